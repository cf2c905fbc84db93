"""Base classes shared by every file format: strict (unknown keys are errors) and versioned."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown keys, so typos in files are reported, not ignored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
