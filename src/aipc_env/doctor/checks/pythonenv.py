"""Training env checks: torch+xpu, the resolved pair, runtime pins, Python, bitsandbytes, Triton, caches."""

from __future__ import annotations

import datetime as _dt

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from aipc_env.core.invocation import command
from aipc_env.core.platforms import DEFAULT_PYTHON, marker_environment
from aipc_env.core.specs import evaluate_marker, parse_requirement, parse_version
from aipc_env.doctor.checks.base import CheckContext, Verdict, check, fail, ok, skip, warn
from aipc_env.matrix import Pair
from aipc_env.matrix.resolve import triton_packages
from aipc_env.trainenv.envs import SOURCE_WORDS

DEFAULT_BNB_MIN = "0.50.2"


def _env_missing(ctx: CheckContext) -> Verdict | None:
    env = ctx.facts.training_env
    if env is None:
        return skip("no training env")
    if env.error:
        return skip(f"training env unreadable: {env.error}")
    return None


def check_training_env(ctx: CheckContext) -> Verdict:
    env = ctx.facts.training_env
    if env is None:
        return fail("not found", "verify and train run in a dedicated env", f"build it: {ctx.env_fix()}")
    if env.error:
        return fail(
            f"{env.prefix}: {env.error}",
            "the recorded env cannot be used",
            f"rebuild it: {ctx.env_fix()} (or point the doctor at another env: --env PREFIX)",
        )
    seen = f"{env.prefix} (Python {env.python_version}; {SOURCE_WORDS[env.source]})"
    if env.source == "current" and "torch" not in env.distributions:
        build = "" if not ctx.facts.has_intel_gpu else "; or build one from the pair's lock: " + ctx.env_fix()
        return warn(
            seen,
            "no training env is built or recorded, and this interpreter has no torch",
            "run `aipc-env train` (or `nox -s train`) once: it builds its training env with this machine's "
            f"torch build{' (the CPU build here)' if not ctx.facts.has_intel_gpu else ''} and records it{build}; "
            "or point the doctor at an env: --env PREFIX",
        )
    return ok(seen, "inspect another env with --env PREFIX")


check("training-env", "Training env", "Training environment")(check_training_env)


def check_torch_xpu(ctx: CheckContext) -> Verdict:
    if early := _env_missing(ctx):
        return early
    torch = ctx.installed.get("torch")
    if torch is None:
        env = ctx.facts.training_env
        if env is not None and env.source == "current":
            return skip("no training env yet (see Training environment)")
        return fail(
            "torch not installed",
            "training needs torch (torch+xpu on an Intel GPU)",
            f"build the env: {ctx.env_fix()}"
            if ctx.facts.has_intel_gpu
            else "run `aipc-env train --env PREFIX` once with this env, or let `aipc-env train` build its own "
            "(the CPU build: this machine has no Intel GPU)",
        )
    try:
        local = parse_version(torch).local
    except InvalidVersion:
        local = None
    if local == "xpu":
        return ok(f"torch {torch}")
    if not ctx.facts.has_intel_gpu:
        return ok(
            f"torch {torch} ({'+' + local if local else 'default'} build); this machine has no Intel GPU, so "
            "the built-in default runs on the CPU"
        )
    target = ctx.pair or ctx.fallback_pair
    return fail(
        f"torch {torch} ({'+' + local if local else 'default'} build)",
        "only torch+xpu wheels from the PyTorch XPU index drive Intel GPUs",
        f"{ctx.env_fix(target)} (or pip install torch=={target.newest_torch} --index-url https://download.pytorch.org/whl/xpu)",
    )


check("torch-xpu", "Training env", "torch build")(check_torch_xpu)


def check_pair(ctx: CheckContext) -> Verdict:
    if early := _env_missing(ctx):
        return early
    res = ctx.resolution
    if res.status in ("none", "not-xpu"):
        return skip(res.summary)
    evidence = tuple(res.evidence)
    if res.status == "ambiguous":
        return warn(
            res.summary, "the runtime alone cannot tell these pairs apart", "install torch from the lock of one pair", *evidence
        )
    if res.status == "unknown":
        return fail(
            res.summary,
            "a runtime no pair of the matrix knows cannot be matched to a toolkit",
            f"rebuild the env: {ctx.env_fix()}",
            *evidence,
        )
    pair = ctx.matrix.by_id[res.pair]  # type: ignore[index]  # the pair was resolved before this check runs
    details = evidence + (f"source: {pair.source}",)
    seen = f"{pair.id}: torch {', '.join(pair.torch)} + oneAPI {pair.oneapi} runtime"
    if pair.certainty == "provisional":
        return warn(
            seen + " (provisional matrix row)",
            "this row rests on a single source; its pins may be wrong",
            "report the env (`pip list`) so the row can be confirmed",
            *details,
        )
    if res.status == "partial":
        return warn(
            seen + f"; {len(res.missing)} pinned package(s) missing",
            "a partial runtime fails at import or when a kernel loads",
            f"repair the env: {ctx.env_fix()}",
            *details,
            f"missing: {', '.join(res.missing)}",
        )
    return ok(seen, *details)


check("pair", "Training env", "torch+xpu / oneAPI pair")(check_pair)


def check_env_lock(ctx: CheckContext) -> Verdict:
    """The env's installed distributions against the checkout's lock of its pair (versions; extras are noted)."""
    from aipc_env.trainenv.drift import compute_drift

    if early := _env_missing(ctx):
        return early
    pair = ctx.pair
    if pair is None:
        return skip("not an XPU env (no pair)")
    lock = ctx.lock_for(pair.id, ctx.platform) if ctx.lock_for else None
    if lock is None:
        return skip(f"no {ctx.platform} lock of {pair.id} in this checkout")
    env = ctx.facts.training_env
    assert env is not None
    drift = compute_drift(lock, env.distributions, None, ctx.platform, env.python_version or DEFAULT_PYTHON)
    wrong = [d for d in drift if d.kind in ("missing", "version")]
    extra = [d for d in drift if d.kind == "extra"]
    if wrong:
        shown = [d.describe() for d in wrong]
        return fail(
            f"{len(wrong)} package(s) differ from the {pair.id} lock",
            "an env that drifted from its lock "
            "is not the env that was verified and locked: the next run may fail where the lock works",
            f'{ctx.env_fix(pair)} --prefix "{env.prefix}" (repairs exactly these; `'
            + command("env", "--check")
            + "` lists them)",
            *shown[:20],
        )
    return ok(
        f"every locked package of {pair.id} at its locked version"
        + (f"; {len(extra)} extra package(s) not in the lock" if extra else ""),
        *[d.describe() for d in extra[:10]],
    )


check("env-lock", "Training env", "Packages match the pair's lock")(check_env_lock)


def check_runtime_mix(ctx: CheckContext) -> Verdict:
    if early := _env_missing(ctx):
        return early
    res = ctx.resolution
    if res.status in ("none", "not-xpu", "unknown", "ambiguous") or res.pair is None:
        return skip(res.summary)
    if not res.mismatches:
        return ok(f"{len(res.matched)} runtime packages match {res.pair}")
    odd = [
        f"{m.name} {m.installed} (expected {' or '.join(m.expected)}"
        f"{'; belongs to ' + ', '.join(m.belongs_to) if m.belongs_to else ''})"
        for m in res.mismatches
    ]
    return fail(
        f"{len(res.mismatches)} package(s) from another release than {res.pair}",
        "mixed oneAPI runtime libraries crash native extensions (bitsandbytes) or load the wrong SYCL library",
        f"reinstall: {ctx.env_fix()}",
        *odd,
    )


check("runtime-mix", "Training env", "Intel runtime from one release")(check_runtime_mix)


def check_python(ctx: CheckContext) -> Verdict:
    if early := _env_missing(ctx):
        return early
    env = ctx.facts.training_env
    pair = ctx.pair
    version = env.python_version if env else None
    if not version:
        return skip("unknown")
    if pair is None:
        return ok(f"Python {version}")
    if version in pair.python_specifier:
        return ok(f"Python {version} ({pair.id} supports {pair.python})")
    return fail(
        f"Python {version}; {pair.id} supports {pair.python}",
        "no torch+xpu wheel exists for this Python",
        f"rebuild the env with the pair's Python: {ctx.env_fix()}",
    )


check("python", "Training env", "Python version")(check_python)


def check_interpreter(ctx: CheckContext) -> Verdict:
    if early := _env_missing(ctx):
        return early
    env = ctx.facts.training_env
    pair = ctx.pair
    version = env.python_version if env else None
    if not version or pair is None:
        return skip("unknown interpreter or pair")
    held = ctx.conda_python_for(pair.id, ctx.platform) if ctx.conda_python_for else None
    minor = ".".join(version.split(".")[:2])
    if held is None or held.split(".")[:2] != version.split(".")[:2]:
        cover = f"holds Python {held}" if held else "exists"
        return ok(
            f"Python {version} from the fallback: `conda create python={minor}` (unpinned) or a --base-python "
            f"venv; no conda layer of {pair.id} for {ctx.platform} {'that ' if held else ''}{cover}"
            + (f", not {minor}" if held else " in this checkout")
        )
    if held == version:
        return ok(f"Python {version}, the conda layer's of {pair.id}")
    return warn(
        f"Python {version}; the conda layer of {pair.id} has {held}",
        "the interpreter was not built "
        "from the lock's conda layer (an older build, or the unpinned fallback): machines with the same lock "
        "run different interpreters",
        f"build a new env from the lock (the interpreter is not repaired in "
        f"place): remove {env.prefix if env else 'the env'}, then {ctx.env_fix(pair)}",
    )


check("interpreter", "Training env", "Interpreter from the conda layer")(check_interpreter)


def check_bitsandbytes(ctx: CheckContext) -> Verdict:
    if early := _env_missing(ctx):
        return early
    pair = ctx.pair
    minimum = pair.bitsandbytes_min if pair else DEFAULT_BNB_MIN
    got = ctx.installed.get("bitsandbytes")
    if got is None:
        return fail(
            "not installed",
            "NF4 quantization and Adam8bit come from bitsandbytes",
            f'pip install "bitsandbytes>={minimum}" (or {ctx.env_fix()})',
        )
    try:
        older = parse_version(got) < parse_version(minimum)
    except InvalidVersion:
        return fail(
            f"bitsandbytes version {got[:40]!r}{'...' if len(got) > 40 else ''} is not a version",
            "the env's record of bitsandbytes does not parse (PEP 440, bounded): its minimum cannot be checked",
            f'reinstall it: pip install --force-reinstall "bitsandbytes>={minimum}" (or {ctx.env_fix()})',
        )
    if older:
        reason = (
            "up to 0.50.1 the Triton 4-bit quantize kernels XPU uses write past the end of absmax when "
            "the block count is not a multiple of 8 (fixed in 0.50.2)"
            if parse_version(minimum) >= parse_version("0.50.2")
            else "the Windows XPU build arrived in 0.48.2"
        )
        return fail(
            f"bitsandbytes {got} < {minimum}" + (f" (minimum for {pair.id})" if pair else ""),
            reason,
            f'pip install "bitsandbytes>={minimum}" (or {ctx.env_fix()})',
        )
    return ok(f"bitsandbytes {got} (≥ {minimum})")


check("bitsandbytes", "Training env", "bitsandbytes version")(check_bitsandbytes)


def _triton_missing(ctx: CheckContext, pair: Pair) -> list[str]:
    """What the Triton path of bitsandbytes lacks on this machine (empty: ready), read from the facts."""
    from aipc_env.lock.wheels import load_wheel_manifest

    missing = []
    triton = pair.triton_pin()
    if not triton.applies_to(ctx.platform) or not pair.compiles_kernels_on(ctx.platform):
        return [f"{pair.id} ships no Triton for this platform"]
    version = ctx.installed.get(triton.key)
    if version is None or not triton.accepts(version):
        missing.append(f"{triton.name} {pair.triton_for(pair.newest_torch)}")
    else:
        record = load_wheel_manifest().metadata_for(triton.name, version, ctx.platform)
        needs = [parse_requirement(r) for r in (record.requires_dist if record else [])]
        env = ctx.facts.training_env
        markers = {**marker_environment(ctx.platform, (env.python_version if env else None) or DEFAULT_PYTHON), "extra": ""}
        missing += [
            f"{r.name} (required by {triton.name} {version})"
            for r in needs
            if (r.marker is None or evaluate_marker(r.marker, markers)) and canonicalize_name(r.name) not in ctx.installed
        ]
    if ctx.facts.is_windows and not (ctx.facts.msvc and ctx.facts.msvc.installs):
        missing.append("MSVC C++ build tools")
    if not ctx.facts.level_zero.header:
        missing.append("the Level Zero headers")
    return missing


def check_bnb_backends(ctx: CheckContext) -> Verdict:
    """Which implementation will run NF4 and Adam8bit here: native SYCL, the Triton fallback, or none."""
    from aipc_env.matrix.bnb import TRITON_NEEDS, bnb_backends

    if early := _env_missing(ctx):
        return early
    pair = ctx.pair
    if not ctx.facts.has_intel_gpu:
        return ok(bnb_backends("cpu", native=True, triton=False).describe() + " (no Intel GPU: the CPU backend)")
    if pair is None:
        return skip("the env's pair is unknown")
    missing = _triton_missing(ctx, pair)
    probe = ctx.facts.device_probe
    native = pair.bitsandbytes_native if not (probe and probe.ran and probe.bnb_backend) else probe.bnb_backend == "xpu-native"
    plan = bnb_backends("xpu", native=native, triton=not missing)
    needs = f"the Triton path needs {TRITON_NEEDS[ctx.platform]}"
    why_native = (
        f"bitsandbytes' native XPU library is built with DPC++ 2025.1 and does not load against the SYCL "
        f"runtime of oneAPI {pair.oneapi} ({pair.id})"
        if not pair.bitsandbytes_native
        else "the live probe found bitsandbytes without its native XPU library"
    )
    native_pairs = sorted(
        (
            p
            for p in ctx.matrix.pairs
            if p.certainty == "confirmed" and p.bitsandbytes_native and p.compiles_kernels_on(ctx.platform)
        ),
        key=lambda p: ((p.id, ctx.platform) in ctx.locks, parse_version(p.newest_torch)),
        reverse=True,
    )
    newer = native_pairs[0].id if native_pairs else None  # the newest with a lock here, else the newest
    if not plan.complete:
        return fail(
            plan.describe(),
            f"{needs}; missing: {'; '.join(missing)}",
            f"install what is missing ({ctx.env_fix()} restores the env's packages)"
            + (
                f"; or move to a pair with the native library: {ctx.env_fix(ctx.matrix.get(newer))}"
                if not native and newer
                else ""
            ),
        )
    if plan.fallback:
        return warn(
            plan.describe(),
            f"{why_native}: every NF4 op runs as a Triton kernel compiled on this PC (slower to start, and {needs})",
            f"move to a pair whose runtime loads it (oneAPI >= 2025.1): {ctx.env_fix(ctx.matrix.get(newer))}"
            if newer
            else "keep the compiler toolchain installed",
        )
    return ok(plan.describe())


check("bnb-backends", "Training env", "bitsandbytes XPU backends")(check_bnb_backends)


def check_triton(ctx: CheckContext) -> Verdict:
    if early := _env_missing(ctx):
        return early
    found = triton_packages(ctx.installed)
    pair = ctx.pair
    listing = ", ".join(f"{k} {v}" for k, v in found.items())
    if len(found) > 1:
        keep = pair.triton.name if pair else "the one of your pair"
        remove = [k for k in found if not pair or k != pair.triton.key]
        return fail(
            listing,
            "every Triton distribution installs the same top-level `triton` package; with "
            "several, kernels break in confusing ways",
            f"pip uninstall -y {' '.join(remove)}; then reinstall {keep} from the lock ({ctx.env_fix()})",
        )
    if pair is None:
        return ok(listing or "no Triton installed")
    expected = pair.triton_pin()
    if not expected.applies_to(ctx.platform):
        return ok(f"{pair.id} ships no Triton on this platform" + (f" ({listing})" if listing else ""))
    if not found:
        return fail(
            f"{expected.name} not installed",
            "bitsandbytes quantize and the 8-bit optimizer run as Triton kernels on XPU",
            f"reinstall: {ctx.env_fix()}",
        )
    name, version = next(iter(found.items()))
    if name != expected.key or not expected.accepts(version):
        return fail(
            f"{listing}; {pair.id} needs {expected.name} {expected.version}",
            "a Triton built for another torch (or for CUDA) cannot compile XPU kernels for this one",
            f"pip uninstall -y {name}; reinstall from the lock ({ctx.env_fix()})",
        )
    return ok(listing)


check("triton", "Training env", "Exactly one Triton")(check_triton)


def check_kernel_cache(ctx: CheckContext) -> Verdict:
    caches = [c for c in ctx.facts.kernel_caches if c.exists]
    if not caches:
        return ok("no kernel cache yet")
    env = ctx.facts.training_env
    if not env or not env.built_at:
        return ok(", ".join(c.path for c in caches), "staleness is checked for envs built by aipc-env")
    built = _dt.datetime.fromisoformat(env.built_at).timestamp()
    stale = [c for c in caches if c.newest_mtime is not None and c.newest_mtime < built]
    if not stale:
        return ok(", ".join(c.path for c in caches))
    paths = " and ".join(f'"{c.path}"' for c in stale)
    return warn(
        f"kernels compiled before the env was (re)built at {env.built_at}",
        "kernels compiled for another torch/Triton/oneAPI cause errors after a version change",
        f"delete {paths}" + (" (rmdir /s /q on Windows)" if ctx.facts.is_windows else " (rm -rf)"),
    )


check("kernel-cache", "Training env", "Triton / inductor kernel caches")(check_kernel_cache)


def check_last_verify(ctx: CheckContext) -> Verdict:
    record = ctx.facts.last_verify
    env = ctx.facts.training_env
    if record is None:
        return warn(
            "never verified",
            "importing bitsandbytes proves nothing; only a quantize, matmul and optimizer step on the device does",
            command("verify"),
        )
    if record.injected:
        return warn(
            f"the last verification ran with injected faults ({', '.join(record.injected)}) at {record.when}",
            "a run with test faults injected says nothing about this stack",
            f"{command('verify')} (without AIPC_VERIFY_INJECT)",
        )
    if env and record.env_prefix and record.env_prefix != env.prefix:
        return warn(
            f"last verified another env ({record.env_prefix}) at {record.when}",
            "this env has not been verified",
            command("verify"),
        )
    if record.passed:
        return ok(f"passed on {record.device} at {record.when}: {record.summary}")
    return fail(
        f"failed on {record.device} at {record.when}: {record.summary}",
        "a stack that fails verification fails training later, after hours of caching",
        "see `aipc-env verify` output for the failing step",
    )


check("last-verify", "Training env", "Last verification")(check_last_verify)
