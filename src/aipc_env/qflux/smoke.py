"""`aipc-env adapt CLONE --smoke`: prove the adapted clone trains before the user downloads 40 GB. It trains the
config `recommend --engine qflux` writes for this machine, changed only where a tiny model must (paths, sizes,
step counts; without an XPU the devices and the pre-quantized folders), and records every key it changed.
Upstream's own cache and fit phases (`python -m qflux.main --cache`, then `accelerate launch -m qflux.main`) run
offline on a tiny random Qwen-Image-Edit(-Plus) pipeline, in the qflux env (the patched requirements plus the
pair's torch), through a generated launcher like any training run. Then: the DiT's Linear layers are bitsandbytes
Linear4bit (nf4), the final checkpoint exists, the periodic ones are pruned to the recommended limit, the LoRA
reloads through diffusers with its alpha intact.

On a CPU the clone's NF4 load goes layer by layer (aipc-env's created nf4.py): diffusers' BitsAndBytesConfig path
refuses without an accelerator (see PREQUANTIZED_NEEDS_AN_ACCELERATOR; tests/test_qflux.py pins both refusals).
"""

from __future__ import annotations

import copy
import datetime as _dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal, TextIO

import yaml

from aipc_env.core.fileio import read_json
from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.core.platforms import Platform
from aipc_env.core.runfolder import ACCELERATE_CONFIG
from aipc_env.errors import AipcError, ExitCode
from aipc_env.facts.model import MsvcInfo, OneApiInfo
from aipc_env.launch.accelerate import accelerate_config_text
from aipc_env.launch.hops import SmokePrepare, SmokeVerify
from aipc_env.train.recommend import Machine, get_dotted, set_dotted

__all__ = ["STEPS", "SmokeCheck", "SmokeResult", "run_smoke", "smoke_config"]

STEPS = 5
"""max_train_steps; with a checkpoint at every step, the recommended checkpoints_total_limit (3) prunes two."""
TINY_SIDE = 64

SHIM = """\
# aipc-env smoke (test-environment shim): aipc_env.workers.train.compat's Qwen2VLProcessor shim, for the clone's processes.
# Where torchvision does not import (a CPU torch without its torchvision), the processor is limited to image
# processor + tokenizer, all the Qwen-Image-Edit pipelines use. Where torchvision imports, nothing changes.
from aipc_env.workers.train.compat import processor_without_video

processor_without_video()
"""


class SmokeCheck(StrictModel):
    name: str
    ok: bool
    detail: str


class SmokeResult(VersionedModel):
    """`aipc-env adapt CLONE --smoke --json`."""

    FORMAT: ClassVar[str] = "smoke result"
    schema_version: Literal[1] = 1
    clone: str
    trainer: Literal["QwenImageEdit", "QwenImageEditPlus"]
    pair: str | None
    """The pair whose oneAPI the launcher activates (none: the env holds a CPU build of the torch)."""
    pair_why: str = ""
    env_python: str
    run_dir: str
    log: str
    launcher: str = ""
    exit_code: int
    passed: bool
    checks: list[SmokeCheck]
    changed: dict[str, str] = {}
    """Every key of the recommended config the smoke changed, and why (recommended.yaml, config.yaml beside)."""
    seconds: float

    def summary(self) -> str:
        lines = [
            f"smoke ({self.trainer}, {STEPS} steps, pair {self.pair or 'none'}: {self.pair_why}): "
            f"{'PASS' if self.passed else 'FAIL'} in {self.seconds:.0f} s"
        ]
        lines.append(f"  trained recommend's qflux config; changed only {len(self.changed)} key(s):")
        lines += [f"    {key}: {why}" for key, why in self.changed.items()]
        lines += [f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in self.checks]
        lines.append(f"  log {self.log}")
        return "\n".join(lines)


DROP = object()
"""A changed key that the smoke removes."""

PREQUANTIZED_NEEDS_AN_ACCELERATOR = (
    "removed: this env has no XPU, and the clone's pinned libraries load a bitsandbytes NF4 folder only on an "
    "accelerator (transformers 4.52.4: Bnb4BitHfQuantizer.validate_environment needs intel_extension_for_pytorch "
    "for the CPU; diffusers 0.39.0: BnB4BitDiffusersQuantizer.validate_environment raises 'No GPU found'); the "
    "transformer is quantized to NF4 on load instead"
)


def smoke_config(
    recommended: dict[str, Any], run_dir: Path, *, accelerator: bool, plus: bool = True
) -> tuple[dict[str, Any], dict[str, str]]:
    """`recommend --engine qflux`'s config for this machine, changed only where a tiny model must: paths, sizes,
    step counts, and (without an XPU) the devices and the pre-quantized folders. Optimizer, LoRA, gradient
    checkpointing and accumulation, caption dropout, quantization, workers and the checkpoint limit stay as
    recommended. Returns the config and {dotted key: why} for every key it changed."""
    cfg = copy.deepcopy(recommended)
    out = Path(run_dir)
    size = [TINY_SIDE, TINY_SIDE]
    changes: dict[str, tuple[object, str]] = {
        "model.pretrained_model_name_or_path": (str(out / "model"), "path: the tiny random pipeline"),
        "data.init_args.dataset_path": (str(out / "data"), "path: 3 synthetic samples"),
        "data.init_args.cache_dir": (str(out / "cache"), "path: the run's cache folder"),
        "cache.cache_dir": (str(out / "cache"), "path: the run's cache folder"),
        "logging.output_dir": (str(out / "output"), "path: the run's output folder"),
        "data.init_args.processor.init_args.target_size": (size, "size: the tiny model's images"),
        "data.init_args.processor.init_args.controls_size": ([size], "size: the tiny model's images"),
        "train.max_train_steps": (STEPS, "steps"),
        "train.checkpointing_steps": (
            1,
            "steps: a periodic checkpoint at every step, so the recommended checkpoints_total_limit must prune",
        ),
        "lr_scheduler.warmup_steps": (1, "steps: the warmup ends within the smoke"),
    }
    if not plus and recommended.get("trainer") != "QwenImageEdit":
        changes["trainer"] = (
            "QwenImageEdit",
            "variant: the original Qwen-Image-Edit trainer (--smoke without "
            "--plus); recommend offers Edit-2509, which is the Plus trainer",
        )
    if not accelerator:
        for key in ("cache.devices.vae", "cache.devices.text_encoder"):
            if get_dotted(cfg, key) not in (None, "cpu"):
                changes[key] = ("cpu", "device: this env has no XPU (torch.xpu.is_available() is False)")
    for key, folder in (("model.text_encoder_path", "text-encoder-nf4"), ("model.transformer_path", "transformer-nf4")):
        if get_dotted(cfg, key) is not None:
            changes[key] = (
                (str(out / folder), "path: the tiny model, pre-quantized by aipc-env quantize")
                if accelerator
                else (DROP, PREQUANTIZED_NEEDS_AN_ACCELERATOR)
            )
    for key, (value, _) in changes.items():
        set_dotted(cfg, key, value, remove=value is DROP)
    return cfg, {key: why for key, (_, why) in changes.items()}


def _say(text: str) -> None:
    print(text, flush=True)


def recommended_for(machine: Machine | None) -> dict[str, Any]:
    """What `aipc-env recommend --engine qflux` writes for the machine (this one when None; below 32 GB as forced)."""
    from aipc_env.train.recommend import machine_from_facts, qflux_config, recommend

    if machine is None:
        from aipc_env.facts.gather import GatherOptions
        from aipc_env.trainenv.situation import gather_machine

        machine = machine_from_facts(gather_machine(GatherOptions()))
    return qflux_config(recommend(machine, force=True), dataset_path=None)


def run_smoke(
    clone: Path,
    *,
    pair_id: str | None = None,
    matrix_path: Path | None = None,
    plus: bool = False,
    run_dir: Path | None = None,
    env_prefix: Path | None = None,
    dry_run: bool = False,
    log: Callable[[str], None] | None = None,
    stdout: TextIO | None = None,
    platform: Platform | None = None,
    toolchain: tuple[OneApiInfo, MsvcInfo | None] | None = None,
    machine: Machine | None = None,
) -> SmokeResult:
    """The smoke through the run service: the clone's qflux env (or `env_prefix`) and its pair by the one policy,
    the pair's oneAPI activated in the launcher, upstream's cache and fit phases between a prepare phase (tiny
    model, data, and the smoke config from the machine's recommendation) and a verify phase. `platform` and
    `toolchain` as for start_run (tests render the Windows launcher and run it under Wine)."""

    from aipc_env.core.fileio import atomic_write_text
    from aipc_env.launch.plan import Phase
    from aipc_env.launch.service import Chosen, RunRequest, start_run
    from aipc_env.paths import cache_dir, package_root
    from aipc_env.qflux.adapt import is_adapted
    from aipc_env.qflux.loader import LOADER_SCRIPT
    from aipc_env.train.config import QfluxSection, TrainConfig
    from aipc_env.train.run import engine_phases

    log = log or _say
    clone = Path(clone).absolute()
    if not is_adapted(clone):
        raise AipcError(f"{clone} is not adapted", exit_code=ExitCode.PROBLEMS, fix="run `aipc-env adapt CLONE` first")
    t0 = time.perf_counter()
    run_dir = (run_dir or cache_dir() / "qflux-smoke" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")).absolute()
    (run_dir / "shim").mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "shim" / "sitecustomize.py", SHIM)
    config = run_dir / "config.yaml"
    recommended = run_dir / "recommended.yaml"
    atomic_write_text(recommended, yaml.safe_dump(recommended_for(machine), sort_keys=False))

    def phases(chosen: Chosen) -> list[Phase]:
        py, src = chosen.python, str(clone / "src")
        return [
            Phase(name="prepare", argv=SmokePrepare(out=run_dir, recommended=recommended, config=config, plus=plus).argv(py)),
            Phase(name="validate", argv=[py, str(LOADER_SCRIPT), str(clone), str(config)], cwd=src),
            # the cache and fit phases exactly as `aipc-env train` runs a qflux config
            *engine_phases(
                TrainConfig(engine="qflux", qflux=QfluxSection(clone=str(clone), config=str(config)), output_dir=str(run_dir)),
                config,
                py,
                run_dir / ACCELERATE_CONFIG,
            ),
            Phase(name="verify", argv=SmokeVerify(run=run_dir, clone=clone, config=config).argv(py)),
        ]

    log(f"smoke: {clone} in {run_dir}")
    outcome = start_run(
        RunRequest(
            command="smoke",
            run_dir=run_dir,
            log_file=run_dir / "smoke.log",
            phases=phases,
            env_flag=env_prefix,
            pair_flag=pair_id,
            matrix_path=matrix_path,
            engine="qflux",
            qflux_clone=clone,
            dry_run=dry_run,
            extra_env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
            files={ACCELERATE_CONFIG: accelerate_config_text("auto")},  # accelerate picks the XPU/GPU, else the CPU
            pythonpath=[str(run_dir / "shim"), str(package_root())],
            say=log,
            stdout=stdout,
        ),
        platform=platform,
        toolchain=toolchain,
    )
    rc = outcome.exit_code
    checks: list[SmokeCheck] = []
    verify = run_dir / "verify.json"
    if verify.is_file():
        checks = [SmokeCheck(**c) for c in read_json(verify, "the smoke's verify.json")["checks"]]
    elif not dry_run:
        checks.append(
            SmokeCheck(
                name="phases",
                ok=False,
                detail=f"the run stopped with exit code {rc} before the checks; see {outcome.plan.log_file}",
            )
        )
    changes = run_dir / "changes.json"
    changed = read_json(changes, "the smoke's changes.json") if changes.is_file() else {}
    pair = outcome.pair
    return SmokeResult(
        clone=str(clone),
        trainer="QwenImageEditPlus" if plus else "QwenImageEdit",
        pair=pair.pair.id if pair.pair else None,
        pair_why=pair.why,
        env_python=str(outcome.env.python),
        run_dir=str(run_dir),
        log=outcome.plan.log_file,
        launcher=str(outcome.script),
        exit_code=rc,
        passed=rc == ExitCode.OK and bool(checks) and all(c.ok for c in checks),
        checks=checks,
        changed=changed,
        seconds=round(time.perf_counter() - t0, 1),
    )
