"""`aipc-env adapt CLONE --smoke`: prove the adapted clone trains before the user downloads 40 GB. Upstream's own
cache and fit phases (`python -m qflux.main --cache`, then `accelerate launch -m qflux.main`) run offline for
exactly 3 steps on a tiny random Qwen-Image-Edit(-Plus) pipeline, in the qflux env (the patched requirements plus
the pair's torch), through a generated launcher like any training run. Then: the DiT's Linear layers are
bitsandbytes Linear4bit (nf4), one final checkpoint at step 3 exists, the LoRA reloads through diffusers with its
alpha intact."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Literal

import yaml

from aipc_env.errors import AipcError, ExitCode
from aipc_env.facts.model import MsvcInfo, OneApiInfo
from aipc_env.formats import StrictModel, VersionedModel
from aipc_env.platforms import Platform

__all__ = ["STEPS", "SmokeCheck", "SmokeResult", "run_smoke", "smoke_config"]

STEPS = 3
KEEP = 1
"""checkpoints_total_limit: periodic checkpoints at every step, so the adapted pruning must remove all but one."""
RANK, ALPHA = 4, 8
"""alpha != rank, so a reload that loses the metadata (alpha falls back to r) is caught."""

SHIM = '''\
# aipc-env smoke (test-environment shim): aipc_env.train.compat's Qwen2VLProcessor shim, for the clone's processes.
# Where torchvision does not import (a CPU torch without its torchvision), the processor is limited to image
# processor + tokenizer, all the Qwen-Image-Edit pipelines use. Where torchvision imports, nothing changes.
from aipc_env.train.compat import processor_without_video

processor_without_video()
'''

ACCELERATE = """\
# written by aipc-env adapt --smoke: one process; accelerate picks the XPU/GPU when there is one, else the CPU
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: 'NO'
mixed_precision: 'no'
dynamo_backend: 'no'
num_machines: 1
num_processes: 1
machine_rank: 0
main_training_function: main
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
    seconds: float

    def summary(self) -> str:
        lines = [f"smoke ({self.trainer}, {STEPS} steps, pair {self.pair or 'none'}: {self.pair_why}): "
                 f"{'PASS' if self.passed else 'FAIL'} in {self.seconds:.0f} s"]
        lines += [f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in self.checks]
        lines.append(f"  log {self.log}")
        return "\n".join(lines)


def smoke_config(run_dir: Path, *, plus: bool) -> dict:
    """The smoke's qflux config, in upstream's layout (the adapted schema: quantize_type nf4)."""
    return {
        "trainer": "QwenImageEditPlus" if plus else "QwenImageEdit",
        "model": {"pretrained_model_name_or_path": str(run_dir / "model"), "quantize": False, "quantize_type": "nf4",
                  "lora": {"r": RANK, "lora_alpha": ALPHA, "init_lora_weights": "gaussian",
                           "target_modules": ["to_q", "to_k", "to_v", "to_out.0"]}},
        "data": {"class_path": "qflux.data.dataset.ImageDataset", "batch_size": 1, "num_workers": 0, "shuffle": False,
                 "init_args": {"dataset_path": str(run_dir / "data"),
                               "processor": {"class_path": "qflux.data.preprocess.ImageProcessor",
                                             "init_args": {"process_type": "resize", "target_size": [64, 64],
                                                           "controls_size": [[64, 64]]}}}},
        "cache": {"devices": {"vae": "cpu", "text_encoder": "cpu"}, "use_cache": True,
                  "cache_dir": str(run_dir / "cache"),
                  "prompt_empty_drop_keys": ["empty_prompt_embeds", "empty_prompt_embeds_mask"]},
        "train": {"gradient_accumulation_steps": 1, "max_train_steps": STEPS, "num_epochs": 10,
                  "checkpointing_steps": 1, "checkpoints_total_limit": KEEP, "mixed_precision": "no",
                  "gradient_checkpointing": False},
        "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3}},
        "lr_scheduler": {"scheduler_type": "constant"},
        "validation": {"enabled": False},
        "logging": {"output_dir": str(run_dir / "output"), "report_to": "tensorboard", "tracker_project_name": "smoke"},
    }


def _say(text: str) -> None:
    print(text, flush=True)


def run_smoke(clone: Path, *, pair_id: str | None = None, matrix_path: Path | None = None, plus: bool = False,
              run_dir: Path | None = None, env_prefix: Path | None = None, dry_run: bool = False,
              log: Callable[[str], None] | None = None, platform: Platform | None = None,
              toolchain: tuple[OneApiInfo, MsvcInfo | None] | None = None) -> SmokeResult:
    """The smoke through the run service: the clone's qflux env (or `env_prefix`) and its pair by the one policy,
    the pair's oneAPI activated in the launcher, upstream's cache and fit phases between a prepare and a verify
    phase. `platform`/`toolchain` as for start_run (tests render the Windows launcher and run it under Wine)."""
    import json

    from aipc_env.fileio import atomic_write_text
    from aipc_env.launch.plan import Phase
    from aipc_env.launch.service import Chosen, RunRequest, start_run
    from aipc_env.paths import cache_dir, package_root
    from aipc_env.qflux.adapt import is_adapted
    from aipc_env.qflux.loader import LOADER_SCRIPT
    from aipc_env.train.config import TrainConfig
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
    atomic_write_text(config, yaml.safe_dump(smoke_config(run_dir, plus=plus), sort_keys=False))

    def phases(chosen: Chosen) -> list[Phase]:
        py, src = chosen.python, str(clone / "src")
        return [
            Phase(name="prepare", argv=[py, "-m", "aipc_env.qflux.smoke_worker", "prepare", "--out", str(run_dir)]
                  + (["--plus"] if plus else [])),
            Phase(name="validate", argv=[py, str(LOADER_SCRIPT), str(clone), str(config)], cwd=src),
            # the cache and fit phases exactly as `aipc-env train` runs a qflux config
            *engine_phases(TrainConfig(engine="qflux", qflux={"clone": str(clone), "config": str(config)},
                                       output_dir=str(run_dir)), config, py, run_dir / "accelerate_config.yaml"),
            Phase(name="verify", argv=[py, "-m", "aipc_env.qflux.smoke_worker", "verify", "--run", str(run_dir),
                                       "--clone", str(clone), "--model", str(run_dir / "model"), "--output",
                                       str(run_dir / "output"), "--steps", str(STEPS), "--rank", str(RANK),
                                       "--alpha", str(ALPHA), "--keep", str(KEEP)]),
        ]

    log(f"smoke: {clone} in {run_dir}")
    outcome = start_run(RunRequest(
        command="smoke", run_dir=run_dir, log_file=run_dir / "smoke.log", phases=phases, env_flag=env_prefix,
        pair_flag=pair_id, matrix_path=matrix_path, engine="qflux", qflux_clone=clone, dry_run=dry_run,
        extra_env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        files={"accelerate_config.yaml": ACCELERATE}, pythonpath=[str(run_dir / "shim"), str(package_root())],
        say=log), platform=platform, toolchain=toolchain)
    rc = outcome.exit_code
    checks: list[SmokeCheck] = []
    verify = run_dir / "verify.json"
    if verify.is_file():
        checks = [SmokeCheck(**c) for c in json.loads(verify.read_text(encoding="utf-8"))["checks"]]
    elif not dry_run:
        checks.append(SmokeCheck(name="phases", ok=False, detail=f"the run stopped with exit code {rc} before the "
                                 f"checks; see {outcome.plan.log_file}"))
    pair = outcome.pair
    return SmokeResult(clone=str(clone), trainer="QwenImageEditPlus" if plus else "QwenImageEdit",
                       pair=pair.pair.id if pair.pair else None, pair_why=pair.why, env_python=str(outcome.env.python),
                       run_dir=str(run_dir), log=outcome.plan.log_file, launcher=str(outcome.script), exit_code=rc,
                       passed=rc == ExitCode.OK and bool(checks) and all(c.ok for c in checks), checks=checks,
                       seconds=round(time.perf_counter() - t0, 1))
