"""What `aipc-env fleet keygen --json` prints: where the key pair is and its key id (the id `minisign` and the
bundle check name)."""

from __future__ import annotations

from typing import ClassVar, Literal

from aipc_env.core.formats import VersionedModel

__all__ = ["KeyPairReport"]


class KeyPairReport(VersionedModel):
    FORMAT: ClassVar[str] = "key pair report"
    schema_version: Literal[1] = 1
    secret: str
    """The secret key file (keep it secret)."""
    public: str
    """The public key file (give it to the machines)."""
    key_id: str
    resumed: bool = False
    """An interrupted keygen had begun this pair; this run finished it."""
