"""`distill publish --repo ID`: the G1 push preflight of the image21-turbo-trajectories project, then the push of the
export folder.

G1: create the repository (exist_ok), upload a 1 KiB random file, download it back by the commit it made and
compare the bytes, then delete it. The push uploads the export folder (the weights, LICENSE and NOTICE.md: nothing
is pushed without the licence) and downloads every file back by its commit to compare sha256. The repository name
is checked first (aipc_env.distill.licence.check_repo_name: no "Qwen..." main name).

The hub is reached through huggingface_hub (HF_TOKEN, HF_ENDPOINT as it reads them; `--endpoint` for a mirror).
Run in the training env: `python -m aipc_env.distill.publish --config C --repo ID [--endpoint URL] [--public]`.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.launch.hops import DistillPublish, run_worker

__all__ = ["PREFLIGHT_FILE", "export_files", "main", "publish"]

PREFLIGHT_FILE = "preflight_test_1kb.bin"
_FIX_EXPORT = "run `aipc-env distill export` first (it writes the weights with LICENSE and NOTICE.md)"


def export_files(folder: Path) -> list[Path]:
    """What an export folder publishes: its .safetensors files, LICENSE and the export's NOTICE.md, each a regular
    file; each weights file's metadata names this LICENSE (its sha256) and says "Built with Qwen"."""
    from safetensors import safe_open

    from aipc_env.core.fileio import read_text
    from aipc_env.distill.licence import BUILT_WITH, NOTICE_MARK

    folder = Path(folder)
    licence, notice = folder / "LICENSE", folder / "NOTICE.md"
    for path in (licence, notice):
        if path.is_symlink() or not path.is_file():
            raise InputError(
                "missing or not a regular file: nothing is published without the licence and the notice",
                path=path,
                fix=_FIX_EXPORT,
            )
    if not read_text(notice, "notice", max_bytes=1 << 20).startswith(NOTICE_MARK):
        raise InputError("not the notice an export writes", path=notice, fix=_FIX_EXPORT)
    licence_sha = hashlib.sha256(licence.read_bytes()).hexdigest()
    weights = sorted(p for p in folder.glob("*.safetensors") if p.is_file() and not p.is_symlink())
    if not weights:
        raise InputError("no exported .safetensors file there", path=folder, fix=_FIX_EXPORT)
    for path in weights:
        try:
            with safe_open(str(path), framework="pt") as fh:
                meta = fh.metadata() or {}
        except Exception as exc:  # noqa: BLE001 - any damage: one clear line
            raise InputError(f"not a readable safetensors file ({type(exc).__name__})", path=path, fix=_FIX_EXPORT) from None
        if meta.get("built_with") != BUILT_WITH or meta.get("license_sha256") != licence_sha:
            raise InputError(
                'its metadata does not carry this folder\'s LICENSE and "Built with Qwen" (exported '
                "before, or from another model)",
                path=path,
                fix="export it again into this folder",
            )
    return [*weights, licence, notice]


def _hub_error(step: str, exc: Exception, endpoint: str) -> AipcError:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    why = f"HTTP {status}" if status else type(exc).__name__
    return AipcError(
        f"G1 push preflight failed at '{step}' against {endpoint} ({why}: {str(exc).splitlines()[0][:300]})",
        fix="check HF_TOKEN (a write token), the network or --endpoint, and that you may write to that repository",
        exit_code=ExitCode.PROBLEMS,
    )


def publish(
    folder: Path, repo: str, *, endpoint: str | None = None, private: bool = True, log: Callable[[str], object] = print
) -> dict[str, Any]:
    """G1, then the push; returns what was verified. Any failure is an AipcError naming the step."""
    from huggingface_hub import HfApi, constants, hf_hub_download

    from aipc_env.distill.licence import check_repo_name

    if constants.HF_HUB_OFFLINE:
        raise AipcError(
            "huggingface_hub's offline mode is on (HF_HUB_OFFLINE): publishing needs the hub",
            fix="run it with HF_HUB_OFFLINE unset (or 0)",
        )

    check_repo_name(repo)
    if "/" not in repo:
        raise InputError(f"{repo!r} has no owner: the hub needs owner/name", key="--repo", fix=f"name it like my-org/{repo}")
    files = export_files(folder)
    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    api = HfApi(endpoint=endpoint)
    step = "create"
    with tempfile.TemporaryDirectory(prefix="aipc-publish-") as tmp:
        try:
            log(f"publish: G1 push preflight on {repo} at {endpoint}: create, upload, download, compare")
            api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
            step = "upload"
            probe = os.urandom(1024)
            commit = api.upload_file(
                path_or_fileobj=probe, path_in_repo=PREFLIGHT_FILE, repo_id=repo, commit_message="aipc-env G1 push preflight"
            )
            step = "download"
            got = Path(
                hf_hub_download(
                    repo,
                    PREFLIGHT_FILE,
                    revision=commit.oid,
                    endpoint=endpoint,
                    cache_dir=Path(tmp) / "cache",
                    local_dir=Path(tmp) / "g1",
                )
            )
            if got.read_bytes() != probe:
                raise AipcError(
                    f"G1 push preflight failed at 'compare': the file downloaded from {endpoint} is not the one uploaded",
                    fix="check the endpoint (a proxy or mirror rewriting files?)",
                    exit_code=ExitCode.PROBLEMS,
                )
            step = "clean up"
            api.delete_file(PREFLIGHT_FILE, repo_id=repo, commit_message="aipc-env G1 push preflight: clean up")
            step = "push"
            log(f"publish: G1 passed; pushing {', '.join(p.name for p in files)}")
            pushed = api.upload_folder(
                folder_path=str(folder),
                repo_id=repo,
                allow_patterns=[p.name for p in files],
                commit_message="aipc-env distill: the student LoRA, its licence and notice",
            )
            step = "verify"
            verified = []
            for path in files:
                back = Path(
                    hf_hub_download(
                        repo,
                        path.name,
                        revision=pushed.oid,
                        endpoint=endpoint,
                        cache_dir=Path(tmp) / "cache",
                        local_dir=Path(tmp) / "push",
                    )
                )
                want, have = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (path, back))
                if want != have:
                    raise AipcError(
                        f"the pushed {path.name} downloads with another sha256 ({have[:12]}... != {want[:12]}...)",
                        fix="push again; check the endpoint",
                        exit_code=ExitCode.PROBLEMS,
                    )
                verified.append({"path": path.name, "sha256": want})
        except AipcError:
            raise
        except Exception as exc:  # noqa: BLE001 - the client's errors (HTTP, network): one line naming the step
            raise _hub_error(step, exc, endpoint) from None
    return {
        "repo": repo,
        "endpoint": endpoint,
        "private": private,
        "g1": "create, upload, download, compare: ok",
        "commit": pushed.oid,
        "files": verified,
    }


def main(argv: list[str] | None = None) -> int:
    args = DistillPublish.parse(argv)
    return run_worker("distill publish", lambda: _publish(args))


def _publish(args: DistillPublish) -> int:
    from aipc_env.distill.config import load_distill_config

    cfg = load_distill_config(args.config)
    folder = Path(args.folder) if args.folder else cfg.out / "export"
    result = publish(folder, args.repo, endpoint=args.endpoint, private=not args.public, log=lambda m: print(m, flush=True))
    print(
        f"distill: published {len(result['files'])} files to {result['repo']} at {result['endpoint']} "
        f"(commit {result['commit'][:12]}; each downloaded back and compared)",
        flush=True,
    )
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
