"""Whether conda's own version rules (MatchSpec, vendored by conda-lock: the `lock` extra) are here to check a conda
layer's closure; what lock check notes when they are not. Imports nothing of the package."""

from __future__ import annotations

__all__ = ["CLOSURE_UNCHECKED", "can_check_closure"]


def can_check_closure() -> bool:
    """Whether conda's MatchSpec (vendored by conda-lock, the `lock` extra) can be imported here."""
    try:
        from conda_lock._vendor.conda.models.match_spec import MatchSpec  # noqa: F401
    except ImportError:
        return False
    return True


CLOSURE_UNCHECKED = (
    "the conda layer's closure was not checked: conda-lock (conda's MatchSpec) is not installed "
    "here; pip install 'aipc-env[lock]' checks it"
)
