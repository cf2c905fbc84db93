"""`aipc-env fleet winget | ansible | bundle | report`: provision many AI PCs identically and prove it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import (
    JSON,
    LOCK_ROOT,
    MATRIX,
    PAIR,
    PLATFORM,
    Subparsers,
    add_find_links,
    lock_root,
    output_file,
    output_folder,
    python_minor,
)
from aipc_env.commands.result import FilesWritten, Result, progress
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.core.platforms import Platform
    from aipc_env.matrix import Pair


__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "fleet",
        help="for fleet admins: WinGet configuration, Ansible playbook, offline bundles, one report of many machines",
        description="Provision many AI PCs identically (the machine "
        "layer as a WinGet configuration, an Ansible playbook, offline bundles) and see which drifted "
        "(one report over many `doctor --json` reports). docs/fleet.md is the admin's runbook.",
    )
    inner = p.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)
    w = inner.add_parser(
        "winget",
        parents=[JSON, PAIR, MATRIX],
        help="write (or --check) the WinGet configuration of a pair's machine layer",
        description="The machine layer (OS and driver assertions, oneAPI "
        "of the pair's release pinned to the exact version winget-pkgs lists, or asserted where it "
        "lists none; VS Build Tools with C++, Miniforge and Git pinned; the registry items; elevated "
        "where needed) as a WinGet configuration. With --check FILE: validate any configuration (an "
        "admin's own too) against the official schema and the real modules' properties, matched "
        "case-insensitively; errors located by line (exit 1); unknown resources are warnings.",
    )
    w.add_argument("--out", type=output_file, metavar="FILE", help="write it here (default: stdout)")
    w.add_argument("--check", type=Path, metavar="FILE", help="validate this file instead of writing one")
    a = inner.add_parser(
        "ansible",
        parents=[JSON, PAIR, MATRIX],
        help="write an Ansible playbook for Windows and Linux hosts",
        description="site.yml, an inventory example, group_vars and the WinGet configuration: "
        "Windows hosts get the machine layer, the bundle and a doctor report; Linux hosts the GPU "
        "runtime (from their distribution where it is current, from Intel's graphics repository "
        "given here, or a named note why not: environments/gpu-runtime.yaml), the bundle and a "
        "doctor report. Idempotent.",
    )
    a.add_argument(
        "--out",
        type=output_folder,
        required=True,
        metavar="DIR",
        help="the playbook folder (files an earlier run wrote are replaced; anything else there is refused)",
    )
    a.add_argument(
        "--force",
        action="store_true",
        help="replace files in --out that aipc-env did not write, or that were edited since (never through a symlink)",
    )
    a.add_argument(
        "--gpu-runtime-source",
        metavar="APT-LINE",
        help="Intel's graphics repository for the Linux hosts: one `deb [arch=amd64] https://...` line "
        "(signed-by is set to the key below; trusted=yes is refused)",
    )
    a.add_argument("--gpu-runtime-key", type=Path, metavar="FILE", help="the repository's public key file")
    a.add_argument("--gpu-runtime-key-fingerprint", metavar="FPR", help="its OpenPGP fingerprint, pinned")
    b = inner.add_parser(
        "bundle",
        parents=[JSON, PAIR, PLATFORM, LOCK_ROOT, MATRIX],
        help="an offline bundle of a pair for one platform",
        description="The lock, every wheel it names (sha256-checked), the conda "
        "layer's packages, aipc-env as a wheel, the WinGet configuration, bootstrap scripts and a "
        "manifest of every file's sha256. Install with `aipc-env env --bundle DIR` (no network).",
    )
    b.add_argument(
        "--lock",
        type=Path,
        metavar="PYLOCK",
        help="bundle this pylock instead of the pair's lock in lockfiles/ (e.g. a golden machine's)",
    )
    b.add_argument(
        "--python", type=python_minor, metavar="X.Y", help="the target's Python (default: the lock's, from lock-meta.json)"
    )
    b.add_argument("--out", type=output_folder, required=True, metavar="DIR", help="a new, empty folder")
    add_find_links(b)
    b.add_argument(
        "--sign",
        type=Path,
        metavar="SECRET_KEY",
        help="sign the manifest with this minisign secret key "
        "(password from AIPC_ENV_SIGN_PASSWORD when it is encrypted); machines check it with the public "
        "key: env --bundle DIR --trust PUBKEY, or `minisign -Vm bundle-manifest.json -p PUBKEY`",
    )
    k = inner.add_parser(
        "keygen",
        parents=[JSON],
        help="write a minisign key pair for signing bundles",
        description="An Ed25519 key pair in minisign's format (the `minisign` CLI reads and checks "
        "both). The secret key is encrypted with the password in AIPC_ENV_SIGN_PASSWORD when set.",
    )
    k.add_argument("--secret", type=output_file, required=True, metavar="FILE", help="the secret key (new file, mode 0600)")
    k.add_argument("--public", type=output_file, required=True, metavar="FILE", help="the public key to give the machines")
    k.set_defaults(run=run)
    r = inner.add_parser(
        "report",
        parents=[JSON],
        help="one report over many `doctor --json` reports",
        description="Which machines fail which checks (grouped by check and fix), and which "
        "drifted from a golden machine's pair and env. Writes a static HTML page and a CSV. Exit 1 "
        "when any machine fails, drifted or could not be read.",
    )
    r.add_argument("reports", nargs="+", type=Path, metavar="DIR", help="folders (or files) of doctor --json reports")
    r.add_argument("--golden", type=Path, metavar="FILE", help="the golden machine's doctor --json report")
    r.add_argument("--out", type=output_file, metavar="HTML", help="write the HTML page here")
    r.add_argument("--csv", type=output_file, metavar="FILE", help="write the CSV here")
    for q in (w, a, b, r):
        q.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    commands: dict[str, Callable[[argparse.Namespace], Result]] = {
        "winget": _winget,
        "ansible": _ansible,
        "bundle": _bundle,
        "report": _report,
        "keygen": _keygen,
    }
    return commands[args.fleet_command](args)


def _keygen(args: argparse.Namespace) -> Result:
    import os

    from aipc_env.core.outputs import recover
    from aipc_env.errors import InputError
    from aipc_env.fleet.keygen import KeyPairReport
    from aipc_env.fleet.sign import generate_keypair, keypair_journal, read_public_key, write_keypair

    # a pair an interrupted keygen left half-done (its journal may name only these two files)
    finished = recover(keypair_journal(args.secret), [args.secret, args.public])
    for line in finished:
        progress(args).note(f"aipc-env: {line}")
    if any(line.startswith("finished writing") for line in finished) and args.secret.is_file() and args.public.is_file():
        report = KeyPairReport(
            secret=str(args.secret), public=str(args.public), key_id=read_public_key(args.public).key_id_hex, resumed=True
        )
        return Result(
            report,
            lambda: print(
                f"aipc-env: the key pair an interrupted keygen began is complete: {args.secret} (keep it secret) "
                f"and {args.public}"
            ),
        )
    for path, key in ((args.secret, "--secret"), (args.public, "--public")):
        if path.exists() or path.is_symlink():
            raise InputError("exists: a key is never overwritten", path=path, key=key, fix="choose a new file name")
    secret, public = generate_keypair()
    write_keypair(secret, public, args.secret, args.public, password=os.environ.get("AIPC_ENV_SIGN_PASSWORD") or None)
    report = KeyPairReport(secret=str(args.secret), public=str(args.public), key_id=public.key_id_hex)
    return Result(
        report,
        lambda: print(
            f"wrote {args.secret} (keep it secret) and {args.public} (key {public.key_id_hex}: give it to the machines)"
        ),
    )


def _pair(args: argparse.Namespace, platform: Platform = "win-64") -> Pair:
    from aipc_env.matrix import load_matrix
    from aipc_env.trainenv.situation import target_pair

    return target_pair(load_matrix(args.matrix), platform, getattr(args, "pair", None))


def _winget(args: argparse.Namespace) -> Result:
    from aipc_env.core.fileio import atomic_write_text
    from aipc_env.fleet.winget import (
        WinGetCheckReport,
        WinGetDocument,
        check_file,
        render_yaml,
        validate_configuration,
        winget_configuration,
    )

    if args.check:
        report = WinGetCheckReport(file=str(args.check), issues=check_file(args.check))

        def checked() -> None:
            for issue in report.issues:
                print(issue.render(str(args.check)))
            if not report.errors:
                warned = len(report.issues)
                print(
                    f"{args.check}: valid (the official schema and the real modules' properties)"
                    + (f"; {warned} warning(s)" if warned else "")
                )

        return Result(report, checked, ExitCode.PROBLEMS if report.errors else ExitCode.OK)
    pair = _pair(args)
    config = winget_configuration(pair)
    text = render_yaml(config, pair)
    issues = validate_configuration(config, text)
    if issues:  # a bug: what we write must validate, without warnings
        raise RuntimeError("; ".join(i.render("generated") for i in issues))
    if args.out:
        atomic_write_text(args.out, text)
        progress(args).say(f"wrote {args.out}")
        return Result(WinGetDocument(config))
    return Result(WinGetDocument(config), lambda: print(text, end=""))


def _ansible(args: argparse.Namespace) -> Result:
    from aipc_env.errors import InputError
    from aipc_env.fleet.ansible import gpu_source, write_playbook
    from aipc_env.fleet.winget import render_yaml, winget_configuration

    pair = _pair(args)
    gpu = None
    if args.gpu_runtime_source:
        gpu = gpu_source(args.gpu_runtime_source, args.gpu_runtime_key, args.gpu_runtime_key_fingerprint)
    elif args.gpu_runtime_key or args.gpu_runtime_key_fingerprint:
        raise InputError(
            "a key without its apt source",
            key="--gpu-runtime-source",
            fix="pass the repository's apt line with --gpu-runtime-source",
        )
    written = write_playbook(pair, args.out, render_yaml(winget_configuration(pair), pair), gpu, force=args.force)
    following = (
        f"put the bundles beside site.yml (aipc-env fleet bundle --platform win-64|linux-64 --out {args.out}/bundle-<platform>), "
        "then ansible-playbook -i inventory.yml site.yml"
    )
    report = FilesWritten(files=[str(p) for p in written], next=following)
    return Result(report, lambda: print(f"wrote {len(written)} files to {args.out}; next: {following}"))


def _bundle(args: argparse.Namespace) -> Result:
    from aipc_env.errors import InputError
    from aipc_env.fleet.bundle_make import BundleRequest, make_bundle

    if args.platform is None:
        raise InputError("a bundle is for one platform", key="--platform", fix="pass --platform win-64 or linux-64")
    pair = _pair(args, args.platform)
    request = BundleRequest(
        pair=pair,
        platform=args.platform,
        out=args.out,
        lock_root=lock_root(args),
        lock=args.lock,
        python=args.python,
        sign=args.sign,
        find_links=list(args.find_links),
    )
    manifest = make_bundle(request, progress(args).say)
    return Result(
        manifest,
        lambda: print(
            f"wrote the {args.platform} bundle of {pair.id} to {args.out} "
            f"({len(manifest.files)} files); install it with no network: sh bootstrap.sh "
            "(Linux) or bootstrap.ps1 (Windows)"
        ),
    )


def _report(args: argparse.Namespace) -> Result:
    from aipc_env.core.fileio import atomic_write_text
    from aipc_env.fleet.render import render_csv, render_html
    from aipc_env.fleet.report import build_fleet_report

    report = build_fleet_report(args.reports, args.golden)
    if args.out:
        atomic_write_text(args.out, render_html(report))
    if args.csv:
        atomic_write_text(args.csv, render_csv(report))

    def text() -> None:
        from aipc_env.fleet.report import STATE_ORDER

        machines = [m for m in report.machines if m.state != "superseded"]
        print(f"{len(machines)} machines: " + ", ".join(f"{k} {report.counts[k]}" for k in STATE_ORDER if report.counts.get(k)))
        if report.drift_counts:
            print("  drift: " + ", ".join(f"{k} {v}" for k, v in report.drift_counts.items()))
        for group in report.groups[:15]:
            print(f"  {group.status:5} {group.check}: {len(group.machines)} machine(s); fix: {group.fix}")
        for m in machines:
            if m.state in ("unreadable", "newer", "older"):
                print(f"  {m.state}: {m.file}: {m.problem}")
        if args.out:
            print(f"wrote {args.out}")

    return Result(report, text, ExitCode.PROBLEMS if report.problems else ExitCode.OK)
