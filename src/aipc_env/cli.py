"""The `aipc-env` command line: registers the subcommands (one thin module each in commands/), maps errors to the
exit codes of errors.ExitCode, and never shows a bare traceback (--debug shows it for internal errors)."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from typing import Any, NoReturn

from aipc_env import __version__
from aipc_env.errors import AipcError, ExitCode

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS = (
    "doctor",
    "train",
    "verify",
    "env",
    "lock",
    "matrix",
    "resolve",
    "recommend",
    "dataset",
    "patch-requirements",
    "quantize",
    "compare",
    "monitor",
    "container",
    "fleet",
    "distill",
    "adapt",
)

DESCRIPTION = """\
Reproducible NF4 QLoRA fine-tuning of Qwen-Image-Edit on Intel AI PCs (Core Ultra iGPU, Arc). It automates the
runbook "Qwen-Image-Edit LoRA Fine-Tuning on Intel AI PC (Windows)" (the qwen-image-edit-aipc-finetune skill for
github.com/tsiendragon/qwen-image-finetune); "§N" and "runbook step N" in help text are its sections, each mapped
to the command that automates it in docs/runbook-map.md.

Start here:
  aipc-env doctor            check this machine; every problem comes with a fix
  aipc-env train             train the built-in tiny default (no download, no GPU needed)
  aipc-env recommend > c.yaml   a config for this machine, then: aipc-env train c.yaml
"""

EPILOG = """\
exit codes: 0 ok · 1 problems found · 2 usage or input error · 3 internal error (a bug) · 127 a phase's program could
not start · 130 interrupted
`aipc-env COMMAND --help` explains each command; nox sessions (`nox -s doctor`, `nox -s train`) run the same
commands. Docs: README.md and the pages in docs/ (a site: mkdocs build); every option: docs/reference/cli.md."""


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)


class _Words(argparse.HelpFormatter):
    """argparse's help, wrapped between words only ("held-out" stays whole at any width)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrap(self._whitespace_matcher.sub(" ", text).strip(), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in _wrap(self._whitespace_matcher.sub(" ", text).strip(), width - len(indent)))


class _RawWords(argparse.RawDescriptionHelpFormatter):
    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrap(self._whitespace_matcher.sub(" ", text).strip(), width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Words)
        super().__init__(*args, **kwargs)

    last_error: str | None = None
    """The last refusal's words (main prints them as an error document under --json)."""
    last_prog: str | None = None
    last_guess: str | None = None
    """What the refused word was probably meant to be (a command, an action, an option), if anything is close."""
    argv: list[str] = []
    """The command line being parsed (an unknown option is matched against the options of the command it names)."""

    def error(self, message: str) -> NoReturn:  # argparse exits 2 too; keep its message short and ours
        from aipc_env.core.terminal import visible

        self.print_usage(sys.stderr)
        guess = self.did_you_mean(message)
        print(visible(f"error: {message}" + (f"\n  did you mean {guess}?" if guess else "")), file=sys.stderr)
        _Parser.last_error, _Parser.last_prog, _Parser.last_guess = f"{self.prog}: {message}", self.prog, guess
        raise SystemExit(ExitCode.USAGE)

    def did_you_mean(self, message: str) -> str | None:
        """THE suggestion for a typo (argparse 3.11 has none): the closest command, action or option (difflib)."""
        import difflib
        import re

        choice = re.search(r"invalid choice: '([^']*)'.*?\(choose from (.*)\)", message)
        if choice:
            quoted = re.findall(r"'([^']*)'", choice.group(2))
            word, known = choice.group(1), quoted or choice.group(2).split(", ")
        elif message.startswith("unrecognized arguments: "):
            options = [w for w in message.split(": ", 1)[1].split() if w.startswith("--")]
            if not options:
                return None
            word, known = options[0].split("=", 1)[0], self._options_in_play()
        else:
            return None
        close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
        return f"'{close[0]}'" if close else None

    def _options_in_play(self) -> list[str]:
        """This parser's options and those of the (sub)commands the command line names."""
        parser: argparse.ArgumentParser = self
        known = list(parser._option_string_actions)
        for word in _Parser.argv:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if subs and word in subs[0].choices:
                parser = subs[0].choices[word]
                known += list(parser._option_string_actions)
        return [k for k in known if k.startswith("--")]


class _Version(argparse.Action):
    """`aipc-env --version`: the version and the data home (checkout, AIPC_ENV_HOME or the shipped copy)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from aipc_env.paths import data_home

        print(f"aipc-env {__version__}\ndata: {data_home().describe()}")
        raise SystemExit(ExitCode.OK)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aipc-env", description=DESCRIPTION, epilog=EPILOG, formatter_class=_RawWords)
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show the version and where the matrix and locks are read from, and exit"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"aipc_env.commands.{name.replace('-', '_')}")
        module.add_parser(sub)
    return parser


def _quiet_stdout() -> None:
    """After stdout broke (a closed pipe, a full disk), point it at devnull so the interpreter's final flush
    cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    parser = build_parser()
    _Parser.argv = argv
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        if as_json and stop.code == ExitCode.USAGE:  # argparse's refusal, as a document too
            guess = f"did you mean {_Parser.last_guess}? " if _Parser.last_guess else ""
            _json_error(
                ExitCode.USAGE,
                _Parser.last_error or "bad arguments",
                fix=f"{guess}{_Parser.last_prog or 'aipc-env'} --help lists the arguments",
            )
        raise
    if not getattr(args, "run", None):
        parser.print_help()
        return ExitCode.USAGE
    as_json = bool(getattr(args, "json", False))
    try:
        from aipc_env.commands.result import Result, render

        outcome = args.run(args)
        if not isinstance(outcome, Result):  # pragma: no cover - a programming error, caught by the types
            raise TypeError(f"a command returns a Result, not {type(outcome).__name__}")
        return render(outcome, args)
    except AipcError as exc:
        from aipc_env.commands.result import utf8_text
        from aipc_env.core.terminal import visible

        print(visible(utf8_text(exc.render())), file=sys.stderr)
        if as_json:
            _json_error(exc.exit_code, exc.message, file=exc.path, key=exc.key, fix=exc.fix)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("aipc-env: interrupted", file=sys.stderr)
        if as_json:
            _json_error(ExitCode.INTERRUPTED, "interrupted")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return ExitCode.OK
    except OSError as exc:
        if getattr(exc, "filename", None) is None and _is_stdout_error(exc):
            _quiet_stdout()
            print(f"error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
            return ExitCode.USAGE
        if exc.filename is not None and exc.errno in _USER_ERRNOS:
            fix = "check the path and its permissions, or choose another folder"
            from aipc_env.core.terminal import visible

            print(visible(f"error: {exc.filename}: {exc.strerror}\n  fix: {fix}"), file=sys.stderr)
            if as_json:
                _json_error(ExitCode.USAGE, str(exc.strerror), file=str(exc.filename), fix=fix)
            return ExitCode.USAGE
        return _internal(args, exc, as_json)
    except UnicodeError as exc:  # a path or argument no file system can name (a lone surrogate from Windows argv)
        from aipc_env.commands.result import utf8_text

        fix = "give the path or value as text the file system can hold (rename the file if its name is damaged)"
        message = f"an argument or path is not valid text: {utf8_text(str(exc))[:200]}"
        print(f"error: {message}\n  fix: {fix}", file=sys.stderr)
        if as_json:
            _json_error(ExitCode.USAGE, message, fix=fix)
        return ExitCode.USAGE
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a message, not a traceback
        return _internal(args, exc, as_json)


def _json_error(code: int, message: str, **where: str | None) -> None:
    from aipc_env.commands.result import error_document, render_error

    render_error(error_document(code, message, **where))


_USER_ERRNOS = {
    getattr(errno, name)
    for name in ("EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT", "EISDIR", "ENOTDIR", "ENOENT", "ENAMETOOLONG", "ELOOP")
    if hasattr(errno, name)
}
"""What a path the user gave can cause (no permission, read-only or full disk, a folder for a file): exit 2
naming the path, the last net under the checks each command makes before it starts."""


def _is_stdout_error(exc: OSError) -> bool:
    return exc.errno in (28, 5)  # ENOSPC, EIO: stdout went to a full or broken device


def _internal(args: argparse.Namespace, exc: BaseException, as_json: bool = False) -> int:
    if getattr(args, "debug", False):
        traceback.print_exc()
    fix = "this is a bug; re-run with --debug for the traceback and report it"
    from aipc_env.core.terminal import visible

    print(visible(f"aipc-env: internal error: {type(exc).__name__}: {exc}\n  {fix}"), file=sys.stderr)
    if as_json:
        _json_error(ExitCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}", fix=fix)
    return ExitCode.INTERNAL
