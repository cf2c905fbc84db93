"""Validate a qflux config with the clone's own loader, run in the qflux env (a subprocess): the only judge of
what upstream accepts. A rejected config is an InputError naming the file and every key upstream named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aipc_env.core.fileio import loads_json
from aipc_env.errors import AipcError, ExitCode, InputError

__all__ = ["LOADER_SCRIPT", "validate_with_clone"]

LOADER_SCRIPT = Path(__file__).with_name("loader_check.py")


def validate_with_clone(python: Path, clone: Path, config: Path) -> dict[str, Any]:
    """The loader's result ({"ok": True, "trainer", "quantization_type", "config"}); raises InputError when it
    rejects the config, AipcError when the clone's code does not import in that env."""
    import os

    from aipc_env.core.procs import ProbeFailed, run_capture

    env = {**os.environ, "QFLUX_DOTENV_LOADED": "1", "HF_HUB_OFFLINE": "1", "PYTHONUTF8": "1"}
    env.pop("PYTHONPATH", None)
    try:
        result = run_capture(
            [str(python), str(LOADER_SCRIPT), str(Path(clone).absolute()), str(Path(config).absolute())],
            timeout=300,
            check=False,
            cwd=Path(clone) / "src",
            env=env,
        )
    except ProbeFailed as exc:
        raise AipcError(
            f"the clone's config loader could not run: {exc}",
            path=config,
            exit_code=ExitCode.PROBLEMS,
            fix=f"check the env's interpreter {python}",
        ) from None
    try:
        data: dict[str, Any] = loads_json(result.stdout.strip().splitlines()[-1])  # loader_check prints one JSON object
    except (ValueError, IndexError):
        raise AipcError(
            f"the clone's config loader did not answer (exit code {result.returncode}): "
            f"{(result.stderr.strip().splitlines() or [''])[-1][:300]}",
            path=config,
            exit_code=ExitCode.PROBLEMS,
            fix=f"run {python} -c 'import qflux.data.config' in {Path(clone) / 'src'} to see why",
        ) from None
    if data.get("ok"):
        check_variant(config, (data.get("config") or {}).get("model", {}).get("pretrained_model_name_or_path"))
        return data
    if data.get("stage") == "import":
        raise AipcError(
            f"the clone's config loader does not import in {python}: {data.get('error')}",
            path=clone,
            exit_code=ExitCode.PROBLEMS,
            fix="use the qflux env (aipc-env adapt CLONE --smoke builds one), or install the clone's "
            "patched requirements (aipc-env patch-requirements)",
        )
    errors = data.get("errors") or []
    shown = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:4]) or data.get("error", "rejected")
    more = f" (+{len(errors) - 4} more)" if len(errors) > 4 else ""
    raise InputError(
        f"qwen-image-finetune's own loader rejects this config: {shown}{more}",
        path=config,
        key=errors[0]["loc"] if errors else None,
        fix=rejection_fix(errors, data.get("error", "")),
    )


DEVICE_MISSING = "not available but got device="
"""How upstream's device validator (with adapt's xpu branch) says a configured device is missing on this machine."""


def rejection_fix(errors: list[dict[str, Any]], error: str = "") -> str:
    """The fix for a config upstream's loader rejects: a device this machine lacks is not a config problem (the
    config may be right for the PC it was written for), anything else is."""
    missing = [e for e in errors if DEVICE_MISSING in str(e.get("msg", ""))] or (
        [{"loc": "", "msg": error}] if DEVICE_MISSING in error else []
    )
    if missing:
        where = ", ".join(sorted({str(e["loc"]) for e in missing if e.get("loc")})) or "the devices"
        return (
            "this machine does not have the device the config names (" + where + "): on the PC it is for, run "
            "`aipc-env doctor --probe-device` and follow its fixes; to check the config here, set those "
            "devices to cpu in a copy"
        )
    return (
        "`aipc-env recommend --engine qflux` writes a config upstream accepts (after `aipc-env adapt`, which "
        "adds quantize_type / transformer_path to its schema)"
    )


def check_variant(config: Path, model_dir: str | None) -> None:
    """Refuse a model the clone would train as another model: a 2511 checkpoint (its transformer config sets
    zero_cond_t, which upstream's transformer class does not have and ignores)."""
    from aipc_env.core.fileio import read_json
    from aipc_env.facts.parse import model_variant
    from aipc_env.train.recommend import QFLUX_NO_2511, QFLUX_VARIANTS

    if not model_dir or not (Path(model_dir) / "model_index.json").is_file():
        return
    index = read_json(Path(model_dir) / "model_index.json", "model index")
    tconfig = Path(model_dir) / "transformer" / "config.json"
    _, variant = model_variant(index, read_json(tconfig, "transformer config") if tconfig.is_file() else None)
    if variant == "edit-2511":  # what the flag says; a folder that says less (edit-plus, unknown) is not judged
        raise InputError(
            f"{model_dir} is Qwen-Image-Edit-2511 (its transformer config sets zero_cond_t), which "
            f"the qflux engine cannot train as itself (it trains {' and '.join(QFLUX_VARIANTS)})",
            path=config,
            key="model.pretrained_model_name_or_path",
            fix=QFLUX_NO_2511,
        )
