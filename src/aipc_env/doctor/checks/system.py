"""System checks: OS, CPU, RAM, disk, Windows registry settings, and failed probes."""

from __future__ import annotations

import re

from aipc_env.doctor.checks.base import CheckContext, Verdict, check, fail, ok, skip, warn
from aipc_env.facts.memory import GIB, ram_tier_gb

DISK_MIN_GIB = 65
DISK_BOTH_NF4_GIB = 80
CEILING_MIN = 70
TDR_MIN_SECONDS = 10

REG_GFX = r"HKLM\SYSTEM\CurrentControlSet\Control\GraphicsDrivers"


def check_os(ctx: CheckContext) -> Verdict:
    os_ = ctx.facts.os
    name = os_.pretty_name or f"{os_.system} {os_.release}"
    if os_.system == "Windows":
        build = re.search(r"(\d{5})", os_.version or "")
        if build and int(build.group(1)) < 22000:
            return warn(name, "PyTorch validates XPU on Windows 11; Windows 10 drivers lag behind", "upgrade to Windows 11")
        return ok(name)
    if os_.system == "Linux":
        return ok(name)
    return fail(name, "torch+xpu wheels exist only for Windows and Linux", "use a Windows 11 or Linux AI PC")


check("os", "System", "Operating system")(check_os)


def check_cpu(ctx: CheckContext) -> Verdict:
    brand = ctx.facts.cpu.brand or "unknown CPU"
    if re.search(r"Core\(?T?M?\)?\s*Ultra", brand, re.IGNORECASE):
        return ok(brand)
    if any(g.is_intel and "arc" in g.name.lower() for g in ctx.facts.gpus):
        return ok(f"{brand} (with an Intel Arc GPU)")
    return warn(
        brand,
        "the runbook targets Intel Core Ultra (Series 1/2/3) AI PCs with an Intel iGPU, or an Intel Arc discrete card",
        "run on a Core Ultra laptop or a PC with an Intel Arc GPU",
    )


check("cpu", "System", "CPU")(check_cpu)


def check_ram(ctx: CheckContext) -> Verdict:
    total = ctx.facts.memory.total_bytes
    if not total:
        return warn("unknown", "RAM decides the config tier", "check Task Manager > Performance > Memory")
    tier = ram_tier_gb(total)
    seen = f"{total / GIB:.1f} GiB ({tier} GB class)"
    if tier < 32:
        return fail(
            seen,
            "NF4 QLoRA of Qwen-Image-Edit needs at least 32 GB: the NF4 transformer alone takes "
            "~10 GB of GPU allocation, leaving no room for activations on unified memory",
            "use a machine with 32 GB or more",
        )
    if tier <= 32:
        return ok(seen, "32 GB tier: an NF4 text encoder is recommended (aipc-env quantize text-encoder)")
    return ok(seen)


check("ram", "System", "Memory (RAM)")(check_ram)


def check_disk(ctx: CheckContext) -> Verdict:
    disk = ctx.facts.disk
    if disk is None or disk.free_bytes is None:
        return warn("unknown", "the model (~54 GB) and its caches need room", "free at least 65 GB")
    free = disk.free_bytes / GIB
    seen = f"{free:.0f} GiB free on the drive of {disk.path}"
    if free < DISK_MIN_GIB:
        return fail(
            seen,
            f"model ~54 GB + env ~6 GB + dataset and caches need ≥ {DISK_MIN_GIB} GB",
            f"free {DISK_MIN_GIB - free:.0f} GiB more, or pass --work-dir on a larger drive",
        )
    if free < DISK_BOTH_NF4_GIB:
        return warn(
            seen,
            f"both NF4 pre-quantizations (transformer ~10 GB, text encoder ~5.5 GB) need ≥ {DISK_BOTH_NF4_GIB} GB",
            f"free {DISK_BOTH_NF4_GIB - free:.0f} GiB more to pre-quantize both",
        )
    return ok(seen)


check("disk", "System", "Free disk space")(check_disk)


def _registry_unreadable(ctx: CheckContext, value: str) -> Verdict | None:
    reg = ctx.facts.registry
    if reg is None:
        return skip("not Windows")
    if value in reg.errors:
        return warn(
            f"unreadable: {reg.errors[value]}", "the value could not be read", "run the doctor from an account that can read HKLM"
        )
    return None


def check_long_paths(ctx: CheckContext) -> Verdict:
    early = _registry_unreadable(ctx, "LongPathsEnabled")
    if early:
        return early
    value = ctx.facts.registry.long_paths_enabled  # type: ignore[union-attr]  # the check is registered only for machines with these facts
    if value == 1:
        return ok("LongPathsEnabled = 1")
    return fail(
        f"LongPathsEnabled = {value if value is not None else 'not set'}",
        "model and cache paths exceed Windows' 260-character limit",
        'in an admin terminal: powershell -Command "Set-ItemProperty -Path '
        "'HKLM:\\SYSTEM\\CurrentControlSet\\Control\\FileSystem' -Name 'LongPathsEnabled' -Value 1\", "
        "then reboot",
    )


check("long-paths", "Windows settings", "Long path support")(check_long_paths)


def _at_least(ctx: CheckContext, name: str, attr: str, minimum: int, unset: str, why: str, fix: str) -> Verdict:
    early = _registry_unreadable(ctx, name)
    if early:
        return early
    value = getattr(ctx.facts.registry, attr)
    seen = f"{name} = {value if value is not None else unset}"
    return ok(seen) if value is not None and value >= minimum else warn(seen, why, fix)


def check_ceiling(ctx: CheckContext) -> Verdict:
    return _at_least(
        ctx,
        "SystemPartitionCommitLimitPercentage",
        "commit_limit_percentage",
        CEILING_MIN,
        "not set (default ~57)",
        "the iGPU shares system memory; at the default ceiling the cache phase fails with "
        "UR_RESULT_ERROR_DEVICE_LOST / OUT_OF_RESOURCES (driver updates can reset it)",
        f'in an admin terminal: reg add "{REG_GFX}\\MemoryManager" /v '
        "SystemPartitionCommitLimitPercentage /t REG_DWORD /d 75 /f, then reboot",
    )


check("gpu-memory-ceiling", "Windows settings", "Shared GPU memory ceiling")(check_ceiling)


def check_tdr(ctx: CheckContext) -> Verdict:
    return _at_least(
        ctx,
        "TdrDelay",
        "tdr_delay",
        TDR_MIN_SECONDS,
        "not set (default 2 s)",
        "Windows resets the GPU when one kernel runs longer than TdrDelay; long NF4 kernels on an iGPU can trip the 2 s default",
        f'in an admin terminal: reg add "{REG_GFX}" /v TdrDelay /t REG_DWORD /d 60 /f, then reboot',
    )


check("tdr", "Windows settings", "GPU timeout (TDR)")(check_tdr)


def check_probes(ctx: CheckContext) -> Verdict:
    errors = ctx.facts.probe_errors
    if not errors:
        return ok("every probe answered")
    return warn(
        f"{len(errors)} probe(s) failed",
        "checks that depend on them may be incomplete",
        "see the details; re-run with -v",
        *[f"{e.probe}: {e.error}" for e in errors],
    )


check("probes", "System", "Fact collection")(check_probes)
