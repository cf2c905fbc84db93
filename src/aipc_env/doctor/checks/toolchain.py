"""Toolchain checks: conda, MSVC, the oneAPI toolkit against the env's pair, Level Zero headers, setvars quirk."""

from __future__ import annotations

from aipc_env.doctor.checks.base import CheckContext, Verdict, check, fail, ok, skip, warn

MINIFORGE_URL = "https://conda-forge.org/download/"
VS_URL = "https://visualstudio.microsoft.com/vs/community/"
ONEAPI_URL = "https://www.intel.com/content/www/us/en/developer/tools/oneapi/base-toolkit-download.html"


def check_conda(ctx: CheckContext) -> Verdict:
    """conda is one path, not the path: `nox -s train` and `aipc-env train` build their envs with uv; only an env
    built from a lock with `aipc-env env` takes its Python from conda (or from --base-python)."""
    tools = [t for t in ctx.facts.conda if t.name != "conda-lock"]
    if tools:
        return ok(", ".join(f"{t.name} {t.version or ''}".strip() for t in tools))
    env = ctx.facts.training_env
    if env is not None and env.source == "conda":
        return fail(
            "none of conda, mamba, micromamba found, but the training env is a conda env",
            "rebuilding or repairing that env needs a conda tool",
            f"install Miniforge: {MINIFORGE_URL}, then open a new terminal",
        )
    return ok(
        "none found; not needed: `nox -s train` and `aipc-env train` build their envs with uv (`aipc-env env` "
        "takes the pair's Python from conda, or from --base-python)"
    )


check("conda", "Toolchain", "conda / mamba")(check_conda)


def _needs_kernels(ctx: CheckContext) -> bool:
    pair = ctx.pair
    return pair is None or pair.compiles_kernels_on(ctx.platform)


def check_msvc(ctx: CheckContext) -> Verdict:
    msvc = ctx.facts.msvc
    if msvc is None:
        return skip("not Windows (Triton uses gcc on Linux)")
    with_tools = [i for i in msvc.installs if i.has_vc_tools]
    if with_tools:
        best = with_tools[-1]
        return ok(" ".join(x for x in (best.display_name or "Visual Studio", best.version, "with C++ tools") if x))
    if msvc.cl_on_path:
        return ok(f"cl.exe on PATH: {msvc.cl_on_path}")
    why = "Triton compiles its XPU launcher with cl.exe: bitsandbytes NF4 quantize and Adam8bit fail without it"
    if msvc.installs:
        return fail(
            f"{msvc.installs[0].display_name or 'Visual Studio'} without the C++ workload",
            why,
            "Visual Studio Installer > Modify > check 'Desktop development with C++'",
        )
    return fail(
        "no Visual Studio or Build Tools found",
        why,
        f"install Visual Studio Community with 'Desktop development with C++': {VS_URL}",
    )


check("msvc", "Toolchain", "MSVC C++ build tools")(check_msvc)


def check_oneapi_installed(ctx: CheckContext) -> Verdict:
    installs = ctx.facts.oneapi.installs
    versions = sorted({r for i in installs for r in (i.releases or ([i.version] if i.version else [])) if r})
    pair = ctx.pair
    seen = ", ".join(f"{i.version} at {i.root}" for i in installs) or "no oneAPI toolkit found"
    if pair is None:
        if not installs:
            return warn(
                seen,
                "Triton kernels (NF4 quantize, Adam8bit) need a oneAPI toolkit",
                f"install the toolkit matching your pair: {ONEAPI_URL}",
            )
        matching = [p.id for v in versions for p in ctx.matrix.for_toolkit(v)]
        return ok(seen, f"pairs matching this toolkit: {', '.join(matching) or 'none'}")
    if pair.oneapi in versions:
        return ok(f"{pair.oneapi} installed ({pair.id} needs {pair.oneapi})")
    if not _needs_kernels(ctx):
        return ok(f"{seen}; {pair.id} cannot compile kernels on this platform, no toolkit needed")
    if not installs:
        return warn(
            seen,
            f"{pair.id} compiles Triton kernels (NF4 quantize, Adam8bit) with oneAPI {pair.oneapi}; "
            "without it they will not compile",
            f"install Intel oneAPI Base Toolkit {pair.oneapi}: {ONEAPI_URL}",
        )
    alt = [p.id for v in versions for p in ctx.matrix.for_toolkit(v)]
    fix = f"install oneAPI Base Toolkit {pair.oneapi}"
    if alt:
        fix += f", or rebuild the env for a pair that matches your toolkit: {ctx.env_fix(ctx.matrix.get(alt[0]))}"
    return warn(
        f"{seen}; {pair.id} needs {pair.oneapi}",
        "a toolkit of another release must not be activated over this env (mixed runtime libraries)",
        fix,
    )


check("oneapi-installed", "Toolchain", "oneAPI toolkit for the env's pair")(check_oneapi_installed)


def check_oneapi_activated(ctx: CheckContext) -> Verdict:
    active = ctx.facts.oneapi.active_version
    if not active:
        if ctx.facts.env_vars.get("SETVARS_COMPLETED"):
            return warn(
                "SETVARS_COMPLETED is set but no compiler answers",
                "a partial setvars run leaves half an environment",
                "open a fresh terminal; aipc-env launchers call setvars themselves",
            )
        return ok("not activated in this shell (the launchers activate it per run)")
    pair = ctx.pair
    if pair is None:
        return ok(f"oneAPI {active} activated")
    if active == pair.oneapi:
        return ok(f"oneAPI {active} activated, matches {pair.id}")
    return fail(
        f"oneAPI {active} activated over an env of {pair.id} (runtime {pair.oneapi})",
        "two SYCL runtimes in one process break native extensions (bitsandbytes) and Triton kernels",
        "open a fresh terminal without setvars; launch through aipc-env, which activates only the matching release",
    )


check("oneapi-activated", "Toolchain", "Activated oneAPI (setvars)")(check_oneapi_activated)


def check_level_zero(ctx: CheckContext) -> Verdict:
    lz = ctx.facts.level_zero
    if lz.header:
        return ok(lz.header)
    if not _needs_kernels(ctx):
        return skip("no kernels compiled on this platform")
    fix = (
        "set LEVEL_ZERO_V1_SDK_PATH to the Level Zero SDK folder (installed with the full GPU driver package), or ZE_PATH"
        if ctx.facts.is_windows
        else "install the Level Zero headers: apt install libze-dev (or level-zero-devel)"
    )
    return warn(
        f"level_zero/ze_api.h not found (searched: {', '.join(lz.searched) or 'nothing'})",
        "Triton-XPU includes level_zero/ze_api.h when compiling kernels",
        fix,
    )


check("level-zero", "Toolchain", "Level Zero headers")(check_level_zero)


def check_setvars_quirk(ctx: CheckContext) -> Verdict:
    if not ctx.facts.is_windows:
        return skip("not Windows")
    if (
        "NoDefaultCurrentDirectoryInExePath" in ctx.facts.env_vars
        and ctx.facts.env_vars["NoDefaultCurrentDirectoryInExePath"] is not None
    ):
        return warn(
            "set",
            "setvars.bat calls vars.bat by bare name; with this variable present cmd skips the "
            "current folder and every component prints \"'vars.bat' is not recognized\"",
            "nothing to do for aipc-env launchers (they clear it around setvars); for a manual "
            "session run: set NoDefaultCurrentDirectoryInExePath= before setvars.bat",
        )
    return ok("not set")


check("setvars-quirk", "Toolchain", "NoDefaultCurrentDirectoryInExePath")(check_setvars_quirk)
