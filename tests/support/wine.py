"""Helpers to run generated batch files under Wine's cmd with a recorded stand-in interpreter."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.isolation import isolated_env

RESOURCES = Path(__file__).parent / "resources"
WINE_START_GLITCH = b"ShellExecuteEx failed: Internal error."


def wine_reason() -> str | None:
    """Why Wine tests cannot run here, or None."""
    if not shutil.which("wine"):
        return "wine is not installed (apt-get install -y wine64; .ci/run installs it)"
    if not shutil.which("x86_64-w64-mingw32-gcc"):
        return "mingw-w64 is not installed (apt-get install -y gcc-mingw-w64-x86-64-posix) for the stand-in exe"
    return None


@dataclass
class Wine:
    prefix: Path
    standin: Path

    def env(self, unset: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
        """This process's environment for Wine: the prefix, aipc-env's per-user folders beside it, `extra`, less
        `unset`."""
        return isolated_env(
            self.prefix.parent,
            WINEPREFIX=str(self.prefix),
            WINEDEBUG="-all",
            WINEDLLOVERRIDES="mscoree,mshtml=",
            **{**extra, **dict.fromkeys(unset)},
        )

    def winpath(self, path: Path) -> str:
        """The Windows name Wine gives `path`: the drive in the prefix's dosdevices whose target is the longest
        parent of it (z: -> / in every prefix). Read from the prefix rather than asked of `winepath`, a separate
        process per call that once failed (exit 1, no output) under load on CI."""
        path = Path(os.path.abspath(path))
        best: tuple[int, str, Path] | None = None
        for link in (self.prefix / "dosdevices").iterdir():
            if not re.fullmatch(r"[a-z]:", link.name):
                continue
            target = Path(os.path.realpath(link))
            if path == target or target in path.parents:
                depth = len(target.parts)
                if best is None or depth > best[0]:
                    best = (depth, link.name.upper(), target)
        if best is None:
            raise AssertionError(f"no drive in {self.prefix / 'dosdevices'} maps {path}")
        _, drive, target = best
        return drive + "\\" + "\\".join(path.relative_to(target).parts)

    def run_bat(self, script: Path, timeout: float = 120, unset: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess:
        """Run it exactly as aipc-env does on Windows (launcher_argv, from the script's folder), with Wine's cmd."""
        from aipc_env.launch.execute import launcher_argv

        argv = launcher_argv(script)
        for _attempt in range(2):
            result = subprocess.run(
                ["wine", "cmd", *argv[1:]], cwd=script.parent, capture_output=True, env=self.env(unset, **env), timeout=timeout
            )
            # Wine's own start failure, once seen under load on CI (cmd could not start the batch file at all: this
            # line on stdout, nothing of the batch's on stderr): Wine's, not the launcher's, so it is run again once.
            # Anything the batch file itself says or does is never retried.
            if not (WINE_START_GLITCH in result.stdout and not result.stderr):
                break
        return result


def make_wine(base: Path) -> Wine:
    standin = base / "standin.exe"
    subprocess.run(
        ["x86_64-w64-mingw32-gcc", "-municode", "-O1", "-o", str(standin), str(RESOURCES / "standin.c")], check=True, timeout=120
    )
    wine = Wine(prefix=base / "prefix", standin=standin)
    # One persistent wineserver for the module, started first and detached from our pipes (a server spawned by
    # a captured `wine` call would hold its stdout open); each later cmd run then starts in about a second.
    wine.prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["wineserver", "-p"],
        env=wine.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    subprocess.run(
        ["wine", "cmd", "/c", "exit 0"],
        env=wine.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
        check=False,
    )
    return wine


def stop_wine(wine: Wine) -> None:
    subprocess.run(["wineserver", "-k"], env=wine.env(), capture_output=True, timeout=60, check=False)


def read_record(path: Path) -> tuple[list[str], dict[str, str], str]:
    args, env, cwd = [], {}, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        tag, _, value = line.partition("\t")
        if tag == "ARG":
            args.append(value)
        elif tag == "ENV" and "=" in value[1:]:
            name, _, val = value.partition("=")
            env[name] = val
        elif tag == "CWD":
            cwd = value
    return args, env, cwd


def fake_oneapi_bat(root: Path, release: str = "2025.3", fail: bool = False) -> Path:
    """setvars.bat as Intel ships it: pushd into each component's env folder and `call vars.bat` by bare name."""
    env_dir = root / "compiler" / release / "env"
    env_dir.mkdir(parents=True)
    (root / "setvars.bat").write_text(
        '@echo off\r\nif not "%1"=="--force" exit /b 5\r\n'
        f'pushd "%~dp0compiler\\{release}\\env"\r\ncall vars.bat\r\npopd\r\n'
        'set "SETVARS_COMPLETED=1"\r\nset "ONEAPI_ROOT=%~dp0"\r\n' + ("exit /b 9\r\n" if fail else "exit /b 0\r\n")
    )
    (env_dir / "vars.bat").write_text(
        '@echo off\r\nset "AIPC_SEEN_NDCD=[%NoDefaultCurrentDirectoryInExePath%]"\r\n'
        f'set "CMPLR_ROOT=%~dp0.."\r\nset "FAKE_ONEAPI_RELEASE={release}"\r\n'
    )
    return root
