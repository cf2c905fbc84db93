"""Intel GPU families, from a GPU's name or its PCI device id: what known issues (environments/matrix.yaml) are
keyed on. Pure logic, standard library only.

Families:
  arc-a  Arc A-series (Alchemist, DG2): A310..A770, the A-series laptop GPUs, Arc Pro A-series
  arc-b  Arc B-series (Battlemage, BMG): B570, B580, Arc Pro B-series
  igpu   an integrated GPU: Core Ultra's Arc Graphics (Meteor Lake, Arrow Lake), Arc 130V/140V (Lunar Lake),
         Iris Xe, UHD Graphics

Device ids as Linux lists them in include/drm/intel/pciids.h (INTEL_DG2_IDS, INTEL_BMG_IDS, INTEL_MTL_IDS,
INTEL_ARL_IDS, INTEL_LNL_IDS; the copy read had no commit recorded). A GPU neither its name nor its id places
has no family: no known issue applies to it by family."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

__all__ = ["GPU_FAMILIES", "GpuFamily", "families_of", "family_label", "family_of"]

GpuFamily = Literal["arc-a", "arc-b", "igpu"]
GPU_FAMILIES: tuple[GpuFamily, ...] = ("arc-a", "arc-b", "igpu")

_LABELS: dict[str, str] = {
    "arc-a": "Arc A-series (Alchemist)",
    "arc-b": "Arc B-series (Battlemage)",
    "igpu": "integrated Intel GPU",
}

_DG2 = {
    0x5690,
    0x5691,
    0x5692,
    0x56A0,
    0x56A1,
    0x56A2,
    0x56BE,
    0x56BF,  # DG2-G10
    0x5693,
    0x5694,
    0x5695,
    0x56A5,
    0x56A6,
    0x56B0,
    0x56B1,
    0x56BA,
    0x56BB,
    0x56BC,
    0x56BD,  # DG2-G11
    0x5696,
    0x5697,
    0x56A3,
    0x56A4,
    0x56B2,
    0x56B3,
}  # DG2-G12
_BMG = {0xE202, 0xE20B, 0xE20C, 0xE20D, 0xE210, 0xE211, 0xE212, 0xE215, 0xE216}
_IGPU = {
    0x7D40,
    0x7D45,
    0x7D55,
    0x7D60,
    0x7DD5,  # MTL
    0x7D41,
    0x7D51,
    0x7DD1,
    0x7D67,
    0xB640,  # ARL
    0x6420,
    0x64A0,
    0x64B0,
}  # LNL

_ARC_A = re.compile(r"\bArc(?:\(TM\)|™)?\s+(?:Pro\s+)?A\d{2,3}M?\b", re.IGNORECASE)
_ARC_B = re.compile(r"\bArc(?:\(TM\)|™)?\s+(?:Pro\s+)?B\d{2,3}\b", re.IGNORECASE)
_IGPU_NAME = re.compile(r"\b(?:Iris|UHD|HD Graphics)\b|\bArc(?:\(TM\)|™)?\s+(?:\d{3}V\s+GPU|\d{3}V\b|Graphics\b)", re.IGNORECASE)


def family_of(name: str, device_id: str | None = None) -> GpuFamily | None:
    """The family of one Intel GPU: by its marketing name where it names a model, else by its PCI device id
    (lower- or upper-case hex, with or without 0x)."""
    if _ARC_A.search(name):
        return "arc-a"
    if _ARC_B.search(name):
        return "arc-b"
    if _IGPU_NAME.search(name):
        return "igpu"
    try:
        pci = int(device_id or "", 16)
    except ValueError:
        return None
    if pci in _DG2:
        return "arc-a"
    if pci in _BMG:
        return "arc-b"
    if pci in _IGPU:
        return "igpu"
    return None


def families_of(gpus: Iterable[tuple[str, str | None]]) -> frozenset[GpuFamily]:
    """The families of a machine's Intel GPUs, given as (name, PCI device id or None)."""
    return frozenset(f for name, device in gpus if (f := family_of(name, device)) is not None)


def family_label(family: str) -> str:
    return _LABELS.get(family, family)
