"""The `aipc-env` command line: registers subcommands, maps errors to exit codes, never shows a bare traceback.

Exit codes: 0 ok · 1 problems found (failed check, drift, failed verify/training) · 2 usage or input error ·
3 internal error (a bug; traceback with --debug) · 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from aipc_env import __version__
from aipc_env.commands import COMMANDS
from aipc_env.errors import EXIT_USAGE, AipcError

__all__ = ["main", "build_parser"]

EXIT_INTERNAL = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep its message short and ours
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aipc-env", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"aipc-env {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"aipc_env.commands.{name.replace('-', '_')}")
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.run(args))
    except AipcError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a message, not a traceback
        if args.debug:
            traceback.print_exc()
        print(f"aipc-env: internal error: {type(exc).__name__}: {exc}\n"
              "  this is a bug; re-run with --debug for the traceback and report it", file=sys.stderr)
        return EXIT_INTERNAL
