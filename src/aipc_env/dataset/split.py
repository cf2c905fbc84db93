"""The held-out split of a dataset: which samples the fit never sees, so the judge phase can tell whether the LoRA
learned the edit (runbook §3: hold out at least 3 samples as a test set never used for training).

Pure and deterministic: the rule is recorded in the config (`data.heldout_count`, `data.heldout_rule`) and names
the samples by their ids alone, so the cache, the fit, the judge and `dataset validate` all pick the same samples,
on any machine, whatever order the files are listed in. Rule "sha256-of-id": the `count` samples whose
sha256(id) sorts first (ids spread over the set, not the last files of one kind)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

if TYPE_CHECKING:
    from aipc_env.dataset.scan import Sample

__all__ = ["HELDOUT_MAX", "HELDOUT_MIN", "HELDOUT_RULE", "HeldOutRule", "heldout_ids", "split_datasets", "split_samples"]

HELDOUT_MIN = 3
"""The runbook's least held-out count (§3: hold out at least 3 samples)."""
HELDOUT_MAX = 64
HeldOutRule = Literal["sha256-of-id"]
HELDOUT_RULE: HeldOutRule = "sha256-of-id"

T = TypeVar("T")


def _key(sample_id: str) -> tuple[str, str]:
    return hashlib.sha256(sample_id.encode("utf-8", "surrogatepass")).hexdigest(), sample_id


def heldout_ids(ids: Sequence[str], count: int, rule: HeldOutRule = HELDOUT_RULE) -> list[str]:
    """The ids held out by `rule`, in the rule's order. Every sample sharing a held-out id is held out."""
    if rule != HELDOUT_RULE:
        raise ValueError(f"unknown held-out rule {rule!r}")
    if count < 0:
        raise ValueError(f"held-out count {count} is negative")
    return sorted(set(ids), key=_key)[:count]


def split_samples(samples: Sequence[T], ids: Sequence[str], count: int) -> tuple[list[T], list[T]]:
    """(training, held-out) samples: `ids[i]` is the id of `samples[i]`; each keeps its order."""
    if len(samples) != len(ids):
        raise ValueError("one id per sample")
    held = set(heldout_ids(ids, count))
    train = [s for s, i in zip(samples, ids) if i not in held]
    out = [s for s, i in zip(samples, ids) if i in held]
    return train, out


def split_datasets(paths: Sequence[str | Path], count: int | None) -> tuple[list[Sample], list[Sample]]:
    """(training, held-out) samples of the datasets, the held-out ones by the rule over all datasets' ids (none
    held out when `count` is None)."""
    from aipc_env.dataset.scan import scan_dataset

    samples = [s for p in paths for s in scan_dataset(p).samples]
    if not count:
        return samples, []
    return split_samples(samples, [s.id for s in samples], count)
