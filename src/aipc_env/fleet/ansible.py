"""An Ansible playbook that provisions many AI PCs identically: on Windows hosts the WinGet configuration (applied
when `winget configure test` finds drift), the offline bundle and the doctor report; on Linux hosts the Intel GPU
runtime packages, the env from the bundle and the doctor report. Idempotent: a second run changes nothing.
Whole files are rendered (never `lineinfile`, which cannot remove a dropped key) from templates/ (site.yml,
group_vars-*.yml, inventory.example.yml, ansible.cfg)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aipc_env.core.templating import ansible_data, ansible_literal, render_marked
from aipc_env.fleet import template_text
from aipc_env.matrix import Pair

__all__ = ["GpuSource", "gpu_source", "render_playbook", "write_playbook"]


@dataclass(frozen=True)
class GpuSource:
    """Intel's graphics repository for the Linux hosts, validated: the apt line (signed by the copied key only) and
    the key file, whose fingerprint was checked against the pinned one."""

    line: str
    key_file: Path
    key_name: str


def gpu_source(line: str, key: Path | None, fingerprint: str | None) -> GpuSource:
    from aipc_env.container.inputs import APT_KEY, check_pinned, parse_apt_source
    from aipc_env.errors import InputError

    source = parse_apt_source(line)
    if key is None:
        raise InputError(
            "an apt source needs the key that signs it",
            key="--gpu-runtime-key",
            fix="pass the repository's public key file and its fingerprint",
        )
    check_pinned(key, fingerprint)
    armored = b"BEGIN PGP PUBLIC KEY BLOCK" in key.read_bytes()[:4096]
    name = APT_KEY.removesuffix(".gpg") + (".asc" if armored else ".gpg")
    return GpuSource(source.line().strip().replace(APT_KEY, name), key, name)


def render_playbook(pair: Pair, gpu: GpuSource | None = None) -> dict[str, str]:
    """Relative path -> text of every file of the playbook folder (the key file is copied by write_playbook)."""
    from aipc_env.matrix.gpu_runtime import load_gpu_runtime

    table = load_gpu_runtime()
    by_distribution = {
        k: {"name": d.name, "source": d.source, "why": " ".join(d.why.split())} for k, d in table.distributions.items()
    }
    # values from data files are Ansible literals (!unsafe): never evaluated as Jinja on the controller
    data = ansible_data({"aipc_gpu_packages": table.packages, "aipc_gpu_runtime_by_distribution": by_distribution})
    linux = render_marked(
        template_text("group_vars-aipc_linux.yml"),
        "group_vars-aipc_linux.yml",
        {
            "source": ansible_literal(gpu.line if gpu else ""),
            "key": ansible_literal(gpu.key_name if gpu else ""),
            "checked": str(table.checked),
            "table": data,
        },
    )
    return {
        "site.yml": render_marked(template_text("site.yml"), "site.yml", {"pair": pair.id}),
        "group_vars/all.yml": render_marked(
            template_text("group_vars-all.yml"), "group_vars-all.yml", {"pair": pair.id, "pair_value": ansible_literal(pair.id)}
        ),
        "group_vars/aipc_linux.yml": linux,
        "group_vars/aipc_windows.yml": template_text("group_vars-aipc_windows.yml"),
        "inventory.example.yml": template_text("inventory.example.yml"),
        "ansible.cfg": template_text("ansible.cfg"),
    }


def write_playbook(pair: Pair, out: Path, winget_yaml: str, gpu: GpuSource | None = None, *, force: bool = False) -> list[Path]:
    """All the playbook's files or none (aipc_env.core.outputs): only over files an earlier run wrote and nobody edited
    (an admin's own site.yml or group_vars are refused without `force`), never through a symlink."""
    from aipc_env.core.outputs import OutputFolder

    files = {rel: text.encode("utf-8") for rel, text in render_playbook(pair, gpu).items()}
    files[f"aipc-{pair.id}.dsc.yaml"] = winget_yaml.encode("utf-8")
    if gpu is not None:
        files[f"files/{gpu.key_name}"] = gpu.key_file.read_bytes()
    return OutputFolder(out, force=force).write(files)
