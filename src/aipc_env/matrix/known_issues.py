"""Known issues of a pair (environments/matrix.yaml, known_issues) as the warnings the doctor, `env` and `recommend`
print: one rule for which issues a machine meets (Pair.issues_hitting) and one wording."""

from __future__ import annotations

from aipc_env.core.gpus import family_label
from aipc_env.core.platforms import Platform
from aipc_env.matrix.model import KnownIssue, Pair

__all__ = ["describe", "issue_warnings"]

_PLATFORM = {"win-64": "Windows", "linux-64": "Linux"}


def describe(issue: KnownIssue, pair: Pair, torch: str) -> str:
    """One warning: the issue by id, the pair and torch it applies to, on what, what happens, the workaround."""
    on = ", ".join(family_label(f) for f in issue.gpu_families) + " on " + ", ".join(_PLATFORM.get(p, p) for p in issue.platforms)
    status = f"fixed in torch {issue.fixed_in}" if issue.fixed_in else "open"
    text = f"known issue {issue.id} ({issue.severity}, {status}) in {pair.id} (torch {torch}) on {on}: {issue.what}"
    if issue.workaround:
        text += f". Workaround: {issue.workaround}"
    return text + f" ({issue.source})"


def issue_warnings(pair: Pair, platform: Platform, families: frozenset[str] | set[str], torch: str | None = None) -> list[str]:
    """The warnings for a machine (platform, GPU families) using a pair's torch (default: the pair's newest)."""
    torch = torch or pair.newest_torch
    return [describe(i, pair, torch) for i in pair.issues_hitting(platform, families, torch)]
