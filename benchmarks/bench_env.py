"""Env build speed (issue 3), measured in one run against a local index made here:
- installing the pip layer from a lock (`aipc-env env`, uv, hash-checked) vs `pip install -r` of the same specs
  into a fresh venv (the runbook's way), as a ratio;
- the no-op re-run of `aipc-env env` on an up-to-date env.
The wheels are small stand-ins (the real torch+xpu is GBs): this measures resolution and install overhead.
Run: python benchmarks/bench_env.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from aipc_env.matrix import load_matrix  # noqa: E402
from tests.support.wheels import make_wheel, write_simple_index  # noqa: E402

PAIR = "xpu-2.13"


def main() -> int:
    pair = load_matrix().get(PAIR)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        pins = [f"{p.name}=={p.version}" + (f"; {p.marker}" if p.marker else "") for p in pair.runtime_pins]
        pypi = [make_wheel(base / "w", p.name, p.version) for p in pair.runtime_pins]
        pypi += [make_wheel(base / "w", "bitsandbytes", "0.50.2")]
        pypi += [make_wheel(base / "w", f"common{i}", "1.0") for i in range(20)]
        xpu = [make_wheel(base / "x", "torch", "2.13.0+xpu", requires=pins), make_wheel(base / "x", "triton-xpu", "3.7.2")]
        pypi_url = write_simple_index(pypi, base / "pypi").as_uri()
        xpu_url = write_simple_index(xpu, base / "xpu").as_uri()
        layer = base / "pip-layer.txt"
        layer.write_text("\n".join(f"common{i}>=1.0" for i in range(20)) + "\n")
        env = dict(
            os.environ,
            AIPC_ENV_STATE_DIR=str(base / "state"),
            AIPC_ENV_CACHE_DIR=str(base / "cache"),
            AIPC_ENV_PYPI_URL=pypi_url,
            AIPC_ENV_XPU_INDEX_URL=xpu_url,
        )
        aipc = [sys.executable, "-m", "aipc_env"]
        common = ["--pair", PAIR, "--lock-root", str(base / "lockfiles"), "--pip-layer", str(layer)]
        py = f"{sys.version_info[0]}.{sys.version_info[1]}"
        subprocess.run(aipc + ["lock", "--pip-only", "--python", py, *common], env=env, check=True, capture_output=True)
        t = time.perf_counter()
        subprocess.run(
            aipc + ["env", "--prefix", str(base / "env-lock"), "--base-python", sys.executable, *common],
            env=env,
            check=True,
            capture_output=True,
        )
        from_lock = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run(
            aipc + ["env", "--prefix", str(base / "env-lock"), "--base-python", sys.executable, *common],
            env=env,
            check=True,
            capture_output=True,
        )
        noop = time.perf_counter() - t
        # the runbook's way: a venv, then pip install -r the specs with the XPU index as an extra index
        reqs = base / "requirements.txt"
        reqs.write_text(
            "\n".join(["torch==2.13.0+xpu", "triton-xpu==3.7.2", "bitsandbytes>=0.50.0"] + [f"common{i}>=1.0" for i in range(20)])
            + "\n"
        )
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", str(base / "env-pip")], check=True)
        subprocess.run(
            [
                str(base / "env-pip" / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-cache-dir",
                "--index-url",
                pypi_url,
                "--extra-index-url",
                xpu_url,
                "-r",
                str(reqs),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PIP_FIND_LINKS": "", "PIP_CONFIG_FILE": os.devnull},
        )
        pip_way = time.perf_counter() - t
    result = {
        "env_from_lock_s": round(from_lock, 2),
        "venv_plus_pip_install_r_s": round(pip_way, 2),
        "ratio_lock_vs_pip": round(from_lock / pip_way, 3),
        "noop_rerun_s": round(noop, 2),
        "packages": len(pypi) + len(xpu),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
