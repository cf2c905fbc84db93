"""Run a clone's own config loader on a config file: `python loader_check.py CLONE CONFIG`, with the qflux env's
interpreter. Standard library only (it runs beside the clone's code, not aipc-env's); prints one JSON object:
{"ok": true, "trainer": ..., "quantization_type": ..., "config": {...}} or {"ok": false, "stage": "import" |
"load", "errors": [{"loc": "data.init_args.processor", "msg": ...}], "error": "..."}."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# The clone's interpreter does not have aipc-env on its path: the exit codes come from its errors.py by path,
# appended last so the clone's own modules win every name.
sys.path.append(str(Path(__file__).resolve().parents[2]))
from aipc_env.errors import ExitCode


def main(argv: list[str]) -> int:
    clone, config = argv[1], argv[2]
    sys.path.insert(0, os.path.join(clone, "src"))
    os.environ.setdefault("QFLUX_DOTENV_LOADED", "1")  # importing qflux otherwise logs in to the hub
    try:
        from pydantic import ValidationError
        from qflux.data.config import load_config_from_yaml
    except Exception as exc:  # noqa: BLE001 - reported as data
        print(json.dumps({"ok": False, "stage": "import", "error": f"{type(exc).__name__}: {exc}", "errors": []}))
        return ExitCode.INTERNAL
    try:
        cfg = load_config_from_yaml(config)
    except ValidationError as exc:
        errors = [{"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]} for err in exc.errors()]
        print(json.dumps({"ok": False, "stage": "load", "error": str(exc).splitlines()[0], "errors": errors}))
        return ExitCode.PROBLEMS
    except Exception as exc:  # noqa: BLE001 - e.g. OmegaConf interpolation errors
        print(json.dumps({"ok": False, "stage": "load", "error": f"{type(exc).__name__}: {exc}", "errors": []}))
        return ExitCode.PROBLEMS
    print(
        json.dumps(
            {
                "ok": True,
                "trainer": getattr(cfg.trainer, "value", str(cfg.trainer)),
                "quantization_type": cfg.quantization_type,
                "config": cfg.model_dump(mode="json", exclude_none=True),
            },
            default=str,
        )
    )
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv))
