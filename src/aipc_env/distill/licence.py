"""What travels with an exported LoRA (the Qwen Research Licence): the base model's licence text, a
change notice, "Built with Qwen", and a repository name that is not "Qwen...". Torch-free; the export writes
what this module returns.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from aipc_env.errors import InputError

__all__ = [
    "BUILT_WITH",
    "LICENCE_NAMES",
    "NOTICE_MARK",
    "TINY_LICENSE",
    "Licence",
    "check_repo_name",
    "find_licence",
    "plain",
    "render_notice",
]

BUILT_WITH = "Built with Qwen"
LICENCE_NAMES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "LICENCE.txt", "LICENCE.md")
"""Where a model folder (a Hugging Face snapshot) keeps its licence text, in the order looked at."""
MAX_LICENCE_BYTES = 1 << 20
NOTICE_MARK = "<!-- aipc-env export notice:"
_TEMPLATE = Path(__file__).with_name("templates") / "NOTICE.md"
TINY_LICENSE = Path(__file__).with_name("templates") / "TINY-LICENSE.txt"
"""The licence text of a tiny random model aipc-env builds (the workers write it into the model folder)."""
_REPO = re.compile(r"^(?:(?P<owner>[A-Za-z0-9][A-Za-z0-9._-]{0,95})/)?(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,95})$")


@dataclass(frozen=True)
class Licence:
    source: Path
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def find_licence(model_dir: Path) -> Licence:
    """The model folder's licence text (a regular file of a name in LICENCE_NAMES); none is a clear error: a
    derivative must carry it."""
    from aipc_env.core.fileio import read_text

    for name in LICENCE_NAMES:
        path = Path(model_dir) / name
        if path.is_file():
            text = read_text(path, "licence file", max_bytes=MAX_LICENCE_BYTES)
            if not text.strip():
                raise InputError(
                    "the model's licence file is empty",
                    path=path,
                    fix="restore it from the model's repository (its LICENSE file)",
                )
            return Licence(path, text)
    raise InputError(
        f"the model folder has no licence file ({', '.join(LICENCE_NAMES[:2])}, ...): an exported "
        "LoRA is a derivative and must carry the base model's licence text",
        path=Path(model_dir) / "LICENSE",
        fix="copy the licence text from the model's repository into the model folder as LICENSE, then export again",
    )


def check_repo_name(repo: str) -> str:
    """A Hugging Face repository id (`owner/name` or `name`) whose main name does not start with "Qwen" (the Qwen
    Research Licence reserves it)."""
    m = _REPO.fullmatch(repo)
    if m is None or ".." in repo or repo.endswith((".git", ".")):
        raise InputError(
            f"{plain(repo)!r} is not a repository id (owner/name: letters, digits, '.', '_', '-')",
            key="--repo",
            fix="name it like my-org/turbo-4step-lora",
        )
    if m.group("name").lower().startswith("qwen"):
        raise InputError(
            f'the repository name {m.group("name")!r} starts with "Qwen": the base model\'s licence '
            '(Qwen Research Licence) does not allow "Qwen" as the main name of a derivative',
            key="--repo",
            fix='choose a main name of your own, e.g. turbo-4step-lora ("for Qwen-Image" may follow it)',
        )
    return repo


def plain(value: object, limit: int = 200) -> str:
    """One line of printable text for a generated file: control characters and backticks replaced, cut at limit."""
    text = "".join(c if c.isprintable() and c != "`" else "?" for c in str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_notice(
    *,
    title: str,
    base_model: str,
    licence: Licence,
    rank: int,
    alpha: float,
    student_steps: int,
    teacher_steps: int,
    modules: list[str],
    config_sha256: str,
    weights: str,
    fmt: str,
    repo: str | None,
) -> str:
    kinds = sorted({re.sub(r"^(?:diffusion_model\.)?transformer_blocks\.\d+\.", "", m) for m in modules})
    return Template(_TEMPLATE.read_text(encoding="utf-8")).substitute(
        title=plain(title),
        base_model=plain(base_model),
        licence_sha256=licence.sha256,
        licence_source=plain(licence.source.name),
        rank=rank,
        alpha=f"{alpha:g}",
        student_steps=student_steps,
        teacher_steps=teacher_steps,
        modules=plain(", ".join(kinds), 400),
        module_count=len(modules),
        config_sha256=plain(config_sha256, 64),
        weights=plain(weights),
        format=plain(fmt),
        repo_line=f"- Repository: `{plain(repo)}`\n" if repo else "",
    )
