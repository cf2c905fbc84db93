"""GPU checks: an Intel GPU, its driver, several GPUs, and the live device probe."""

from __future__ import annotations

import re

from aipc_env.doctor.checks.base import CheckContext, Verdict, check, fail, ok, skip, warn
from aipc_env.facts.model import GpuInfo
from aipc_env.matrix.model import KnownIssue, Pair

DRIVER_URL = "https://www.intel.com/content/www/us/en/download/785597/intel-arc-graphics-windows.html"
MIN_WINDOWS_DRIVER_BUILD = 6000
"""32.0.101.<build>: older drivers are reported to reboot machines under sustained load (provisional)."""


def intel_gpus(ctx: CheckContext) -> list[str]:
    """Names of Intel GPUs, from the OS listing and sycl-ls (level_zero devices, else OpenCL)."""
    names = [g.name for g in ctx.facts.gpus if g.is_intel]
    sycl = ctx.facts.sycl_devices or []
    l0 = [d for d in sycl if d.kind == "gpu" and d.backend == "level_zero"]
    if l0 and (len(l0) >= len(names)):
        names = [d.name for d in l0]
    return names


def _windows_intel(ctx: CheckContext) -> list[GpuInfo]:
    return [g for g in ctx.facts.gpus if g.is_intel]


def check_intel_gpu(ctx: CheckContext) -> Verdict:
    names = intel_gpus(ctx)
    if not names:
        seen_any = ", ".join(g.name for g in ctx.facts.gpus) or "no GPU"
        return fail(
            f"no Intel GPU ({seen_any})",
            "training runs on an Intel iGPU or Arc GPU (XPU); without one torch falls back to the CPU and a run takes days",
            "run on an Intel Core Ultra AI PC or a PC with an Arc card; on Linux install the GPU driver "
            "(intel-opencl-icd, libze1) so the device appears",
        )
    broken = [g for g in _windows_intel(ctx) if g.status and g.status.upper() != "OK"]
    if broken:
        return fail(
            ", ".join(f"{g.name}: status {g.status}" for g in broken),
            "Device Manager reports a problem with the GPU",
            f"reinstall the driver from {DRIVER_URL}",
        )
    return ok(", ".join(names))


check("intel-gpu", "GPU", "Intel GPU")(check_intel_gpu)


def check_driver(ctx: CheckContext) -> Verdict:
    if ctx.facts.is_windows:
        gpus = _windows_intel(ctx)
        if not gpus:
            return skip("no Intel GPU")
        old = []
        for g in gpus:
            match = re.fullmatch(r"\d+\.\d+\.\d+\.(\d+)", g.driver_version or "")
            if not match or int(match.group(1)) < MIN_WINDOWS_DRIVER_BUILD:
                old.append(g)
        seen = ", ".join(f"{g.name} {g.driver_version or 'unknown'}" for g in gpus)
        if old:
            return warn(
                seen,
                "old Intel graphics drivers are reported to cause spontaneous reboots under sustained GPU load",
                f"install the latest driver: {DRIVER_URL}",
            )
        return ok(seen)
    drivers = {g.driver for g in ctx.facts.gpus if g.is_intel and g.driver}
    sycl_gpus = [d for d in ctx.facts.sycl_devices or [] if d.kind == "gpu"]
    if not drivers and not sycl_gpus:
        return skip("no Intel GPU")
    if sycl_gpus:
        return ok(", ".join(f"{d.backend}: {d.name} [{d.driver}]" for d in sycl_gpus))
    if drivers & {"i915", "xe"}:
        return warn(
            f"kernel driver {', '.join(sorted(drivers))}; no compute runtime seen (sycl-ls missing)",
            "torch+xpu needs the Level Zero compute runtime on top of the kernel driver",
            "install intel-opencl-icd and libze1 (or Intel's client GPU packages)",
        )
    return warn(
        f"kernel driver {', '.join(sorted(drivers))}",
        "Intel GPUs need the i915 or xe kernel driver",
        "install a kernel with the xe/i915 driver for this GPU",
    )


check("gpu-driver", "GPU", "GPU driver")(check_driver)


def check_multi_gpu(ctx: CheckContext) -> Verdict:
    names = intel_gpus(ctx)
    if not names:
        return skip("no Intel GPU")
    if len(names) == 1:
        return ok("1 Intel GPU")
    selector = ctx.facts.env_vars.get("ONEAPI_DEVICE_SELECTOR")
    listing = [f"level_zero:{i} = {n}" for i, n in enumerate(names)]
    if selector:
        return ok(f"{len(names)} Intel GPUs, ONEAPI_DEVICE_SELECTOR={selector}", *listing)
    discrete = next((i for i, n in enumerate(names) if re.search(r"Arc\(TM\) [AB]\d", n)), 0)
    return warn(
        f"{len(names)} Intel GPUs and no device selected",
        "torch may pick the slower iGPU (or split memory) when an Arc card is present",
        f"pin one: set `device: xpu:{discrete}` in the training config, or ONEAPI_DEVICE_SELECTOR=level_zero:{discrete}",
        *listing,
    )


check("multi-gpu", "GPU", "Device selection")(check_multi_gpu)


def check_device_probe(ctx: CheckContext) -> Verdict:
    probe = ctx.facts.device_probe
    if probe is None:
        return skip("not run (add --probe-device)")
    if not probe.ran:
        return fail(
            f"probe failed: {probe.error}", "torch could not be imported in the training env", f"rebuild the env: {ctx.env_fix()}"
        )
    if probe.xpu_available:
        devs = ", ".join(
            f"{d.get('name')} ({int(d.get('total_memory') or 0) / 1e9:.1f} GB)"  # type: ignore[call-overload]  # sorted() over optional names the check filtered for None
            for d in probe.devices
        )
        return ok(f"torch {probe.torch_version}: {devs}")
    if probe.torch_version and probe.torch_version.endswith("+xpu"):
        return fail(
            f"torch {probe.torch_version}: torch.xpu.is_available() is False",
            "an XPU build that sees no device runs everything on the CPU",
            "update the GPU driver; check ONEAPI_DEVICE_SELECTOR; make sure the iGPU is enabled in the "
            "BIOS; on Linux add your user to the 'render' group",
        )
    return fail(
        f"torch {probe.torch_version}: not an XPU build",
        "only torch+xpu wheels drive Intel GPUs",
        f"rebuild the env: {ctx.env_fix()}",
    )


check("device-probe", "GPU", "Live XPU probe")(check_device_probe)


def check_bnb_backend(ctx: CheckContext) -> Verdict:
    probe = ctx.facts.device_probe
    if probe is None or not probe.ran:
        return skip("needs --probe-device")
    if not probe.bnb_version:
        return fail("bitsandbytes did not import", "NF4 needs bitsandbytes", f"rebuild the env: {ctx.env_fix()}")
    seen = f"bitsandbytes {probe.bnb_version}, {probe.bnb_backend or 'unknown'} library"
    if probe.xpu_available and probe.bnb_backend != "xpu-native":
        pair = ctx.pair
        if pair is not None and not pair.bitsandbytes_native:
            return warn(
                seen,
                f"the SYCL runtime of oneAPI {pair.oneapi} ({pair.id}) cannot load bitsandbytes' native "
                "XPU library (built with DPC++ 2025.1): every op goes through Triton (slower, and needs the "
                "compiler toolchain)",
                "move to a pair with oneAPI >= 2025.1 (see the bitsandbytes XPU backends check)",
            )
        return warn(
            seen,
            "without the native XPU library every op goes through Triton (slower, and needs the compiler toolchain)",
            f"reinstall bitsandbytes >= {pair.bitsandbytes_min if pair else '0.50.2'} "
            f"(its wheel ships the XPU library): {ctx.env_fix()}",
        )
    return ok(seen)


check("bnb-backend", "GPU", "bitsandbytes backend")(check_bnb_backend)


def _torch_of(ctx: CheckContext) -> str | None:
    version = ctx.installed.get("torch")
    return version.split("+")[0] if version else None


def machine_issues(ctx: CheckContext) -> tuple[Pair, str, bool, list[KnownIssue]]:
    """(pair, torch, built, issues): the known issues this machine meets with its env's pair and installed torch,
    else with the pair and torch a build would choose (built False). What the doctor and `recommend` warn about."""
    built = ctx.pair
    pair = built or ctx.fallback_pair
    torch = (_torch_of(ctx) if built else None) or pair.newest_torch
    return pair, torch, built is not None, pair.issues_hitting(ctx.platform, ctx.facts.gpu_families, torch)


def check_known_issues(ctx: CheckContext) -> Verdict:
    from aipc_env.core.gpus import family_label
    from aipc_env.matrix.known_issues import describe

    families = ctx.facts.gpu_families
    if not families:
        return skip("no Intel GPU whose family is known")
    pair, torch, built, hits = machine_issues(ctx)
    on = ", ".join(family_label(f) for f in sorted(families)) + (" on Windows" if ctx.facts.is_windows else " on Linux")
    where = f"{pair.id} (torch {torch})" + ("" if built else ", the pair a build would choose,")
    if not hits:
        return ok(f"none known for {where} with {on}")
    clear = [
        p
        for p in ctx.matrix.pairs
        if p.certainty == "confirmed" and p.compiles_kernels_on(ctx.platform) and not p.issues_hitting(ctx.platform, families)
    ]
    alternative = max(clear, key=lambda p: p.newest_torch_version, default=None)
    fix = "follow the workaround in the details"
    if alternative is not None:
        fix += f", or move to {alternative.id}, which has none known here: {ctx.env_fix(alternative)}"
    worst = "critical" if any(i.severity == "critical" for i in hits) else hits[0].severity
    return warn(
        f"{', '.join(i.id for i in hits)} hit{'s' if len(hits) == 1 else ''} {where} with {on}",
        f"{worst}: " + "; ".join(i.what for i in hits),
        fix,
        *(describe(i, pair, torch) for i in hits),
    )


check("known-issues", "GPU", "Known issues of the pair")(check_known_issues)
