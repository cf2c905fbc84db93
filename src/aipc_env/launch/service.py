"""The run service: the one way a run starts. train, verify, distill and the qflux smoke build their phases and
read their results; everything between is here, once:

1. gather the situation once (`trainenv.situation`) and decide the env and the pair by the one policy
   (`trainenv.select.decide`); build the env the decision names first (a qflux run's qflux env, a torch-less
   tool's own training env), then decide again on it;
2. read the toolchain (oneAPI installs, MSVC) and plan the launcher: the pair's oneAPI only, vcvars where kernels
   compile (`launch.plan.plan_run`);
3. take the run folder's lock, write the run folder, record the env the run used;
4. start the launcher in the foreground (`launch.execute`);
5. return the exit code with the plan, the env and the pair.

`platform` and `toolchain` can be given (tests render a Windows launcher here and run it under Wine).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

from aipc_env.core.platforms import Platform
from aipc_env.errors import ExitCode
from aipc_env.facts.model import MsvcInfo, OneApiInfo
from aipc_env.launch.plan import LaunchPlan, Phase
from aipc_env.trainenv.envs import EnvChoice
from aipc_env.trainenv.select import PairChoice, Situation

if TYPE_CHECKING:
    from aipc_env.matrix import Matrix

__all__ = ["Chosen", "RunCommand", "RunOutcome", "RunRequest", "start_run"]

RunCommand = Literal["train", "verify", "distill", "smoke"]


@dataclass(frozen=True)
class Chosen:
    """The env and pair the policy chose for a run; what phases are built from."""

    env: EnvChoice
    pair: PairChoice

    @property
    def python(self) -> str:
        return str(self.env.python)


@dataclass
class RunRequest:
    """What a command wants run. `phases` and `background` are built from the chosen env and pair."""

    command: RunCommand
    run_dir: Path
    log_file: Path
    phases: Callable[[Chosen], list[Phase]]
    background: Callable[[Chosen], list[Phase]] | None = None
    env_flag: Path | None = None
    pair_flag: str | None = None
    matrix_path: Path | None = None
    device: str | None = None
    engine: Literal["builtin", "qflux"] = "builtin"
    qflux_clone: Path | None = None
    """Run in this clone's qflux env (unless --env names another)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    pythonpath: list[str] | None = None
    """Default: the folder holding this aipc_env package (the env imports it without installing it)."""
    dry_run: bool = False
    check: Callable[[Chosen], None] | None = None
    """Run before anything is written, with the chosen env (e.g. the clone's own config loader)."""
    stdout: TextIO | None = None
    """Where the launcher's output goes (stderr when the command prints JSON)."""
    say: Callable[[str], None] | None = None
    """Where the run's header goes (launcher, env, pair, phases, env builds); default: print to stdout."""
    resume: str | None = None
    """What resumes the run after a Ctrl-C, in words a person types (the runner's stop line says it)."""


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int
    plan: LaunchPlan
    script: Path
    env: EnvChoice
    pair: PairChoice

    @property
    def started(self) -> bool:
        """The launcher ran far enough to open its log."""
        return Path(self.plan.log_file).is_file()


def _print(text: str) -> None:
    from aipc_env.core.terminal import visible

    print(visible(text), file=sys.stdout, flush=True)


def _env_and_pair(
    request: RunRequest, matrix: Matrix, platform: Platform, toolkits: list[str], log: Callable[[str], None]
) -> tuple[EnvChoice, PairChoice]:
    """The situation gathered, the decision, and the env it names built; after a build the policy decides again on
    the built env's situation (its packages say what is activated)."""
    from aipc_env.trainenv.envs import env_python
    from aipc_env.trainenv.select import decide
    from aipc_env.trainenv.situation import situation_for, the_env

    def situation(env: EnvChoice | None) -> Situation:
        return situation_for(
            "run", matrix, platform, pair_flag=request.pair_flag, env=env, toolkits=toolkits, qflux_clone=request.qflux_clone
        )

    qflux = request.qflux_clone is not None and request.env_flag is None
    decision = decide(situation(None if qflux else the_env(request.env_flag)), "run")
    if decision.build is not None:
        if decision.build == "qflux":
            from aipc_env.trainenv.qflux_env import ensure_qflux_env

            assert decision.pair.pair is not None
            prefix, record = ensure_qflux_env(Path(request.qflux_clone or "."), decision.pair.pair, log=log)
            built = EnvChoice(prefix, env_python(prefix), "qflux", record)
        else:  # a tool installed without torch: its own training env, built once
            from aipc_env.trainenv.tool_env import ensure_tool_env

            prefix = ensure_tool_env(log=log)
            built = EnvChoice(prefix, env_python(prefix), "tool")
        decision = decide(situation(built), "run")
    assert decision.env is not None and decision.build is None
    return decision.env, decision.pair


def start_run(
    request: RunRequest, *, platform: Platform | None = None, toolchain: tuple[OneApiInfo, MsvcInfo | None] | None = None
) -> RunOutcome:
    """Choose, plan, lock, record and run (or only write, on a dry run). Input errors raise AipcError."""
    from aipc_env.core.formats import timestamp
    from aipc_env.core.platforms import current_platform
    from aipc_env.facts.gather import installed_toolkits, toolchain_facts
    from aipc_env.launch.execute import run_launcher
    from aipc_env.launch.plan import plan_run
    from aipc_env.launch.render import write_launcher
    from aipc_env.launch.runlock import run_lock
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import package_root
    from aipc_env.trainenv.record import UsedEnvRecord, write_used_env

    say = request.say or _print
    matrix = load_matrix(request.matrix_path)
    platform = platform or current_platform()
    oneapi, msvc = toolchain if toolchain is not None else toolchain_facts()
    env, pair = _env_and_pair(request, matrix, platform, installed_toolkits(oneapi), log=lambda text: say(f"aipc-env: {text}"))
    chosen = Chosen(env, pair)
    if request.check is not None:
        request.check(chosen)
    python = chosen.python
    plan = plan_run(
        platform=platform,
        run_dir=str(request.run_dir),
        python=python,
        pair=pair.pair,
        oneapi=oneapi,
        msvc=msvc,
        phases=request.phases(chosen),
        log_file=str(request.log_file),
        pythonpath=request.pythonpath or [str(package_root())],
        device=request.device,
        engine=request.engine,
        extra_env=request.extra_env,
        background=request.background(chosen) if request.background else [],
        files=request.files,
        resume=request.resume,
    )
    for warning in plan.warnings:
        say(f"aipc-env: warning: {warning}")
    with run_lock(request.run_dir, request.command):
        script = write_launcher(plan)
        say(f"aipc-env: launcher {script}")
        say(f"aipc-env: env {env.describe()}, pair {pair.pair.id if pair.pair else 'none'} ({pair.why})")
        for phase in plan.phases:
            say(f"aipc-env:   {phase.name}: {' '.join(phase.argv)}" + (f"  (in {phase.cwd})" if phase.cwd else ""))
        if request.dry_run:
            return RunOutcome(ExitCode.OK, plan, script, env, pair)
        if env.source not in ("state", "qflux") and request.command != "smoke":
            write_used_env(UsedEnvRecord(prefix=str(env.prefix), python=python, command=request.command, when=timestamp()))
        code = run_launcher(script, stdout=request.stdout)
    return RunOutcome(code, plan, script, env, pair)
