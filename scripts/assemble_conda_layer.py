"""Assemble the conda layer of a lock (lockfiles/<pair>/conda-lock.yml and conda-sources.json beside it) from a
public pixi.lock: the closure of python and pip by `depends`, with where each package was read. A maintainer's
tool, run by hand when a pair's interpreter layer changes; not shipped in the wheel. What the tool needs at run time
(reading, checking and choosing the layer) is aipc_env.lock.conda_layer.

    python scripts/assemble_conda_layer.py PIXI_LOCK REPOSITORY PATH COMMIT ENVIRONMENT OUT_DIR...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aipc_env.core.platforms import PLATFORMS, Platform
from aipc_env.errors import ExitCode, InputError
from aipc_env.lock.conda_layer import (
    CONDA_SOURCES_NAME,
    ROOTS,
    CondaSources,
    PackageSource,
    RecordSource,
    sources_path,
    split_package_url,
)

__all__ = ["assemble", "main"]


def _dependency(spec: str) -> tuple[str, str]:
    name, _, rest = spec.strip().partition(" ")
    return name, rest.strip() or "*"


def assemble(
    pixi_lock: dict[str, Any],
    environment: str,
    source_key: str,
    source: RecordSource,
    platforms: tuple[Platform, ...] = PLATFORMS,
) -> tuple[dict[str, Any], CondaSources]:
    """A conda-lock v1 document of the closure of python and pip by `depends`, read from one environment of a
    pixi.lock (version 5 or 6), and the record of where each package came from. Raises InputError when the
    environment lacks a root or a dependency."""
    records: dict[str, dict[str, Any]] = {}
    for entry in pixi_lock.get("packages") or []:
        url = entry.get("conda") or entry.get("url")
        if url:
            records[url] = entry
    env = pixi_lock["environments"][environment]["packages"]
    packages: list[dict[str, Any]] = []
    sources: list[PackageSource] = []
    pythons = set()
    for platform in platforms:
        urls = [next(iter(e.values())) for e in env.get(platform, []) if "conda" in e]
        by_name = {split_package_url(u)[0]: u for u in urls}
        todo, seen = list(ROOTS), set()
        while todo:
            name = todo.pop()
            if name in seen or name.startswith("__"):  # a virtual package (__glibc, __win): the system's
                continue
            seen.add(name)
            url = by_name.get(name)
            if url is None:
                raise InputError(
                    f"{source.repository}/{source.path}@{source.commit[:12]}: environment {environment} "
                    f"has no {name} for {platform}"
                )
            rec = records[url]
            deps = dict(_dependency(d) for d in rec.get("depends") or [])
            todo += list(deps)
            _, version, _ = split_package_url(url)
            if name == "python":
                pythons.add(version)
            packages.append(
                {
                    "name": name,
                    "version": str(rec.get("version") or version),
                    "manager": "conda",
                    "platform": platform,
                    "dependencies": deps,
                    "url": url,
                    "hash": {"md5": rec["md5"], "sha256": rec["sha256"]},
                    "category": "main",
                    "optional": False,
                }
            )
            sources.append(PackageSource(platform=platform, name=name, url=url, sha256=rec["sha256"], source=source_key))
    if len(pythons) != 1:
        raise InputError(f"the platforms hold different interpreters: {', '.join(sorted(pythons))}")
    packages.sort(key=lambda p: (p["platform"], p["name"]))
    sources.sort(key=lambda s: (s.platform, s.name))
    doc = {
        "version": 1,
        "metadata": {
            "content_hash": {pl: _content_hash([p for p in packages if p["platform"] == pl]) for pl in platforms},
            "channels": [{"url": "conda-forge", "used_env_vars": []}],
            "platforms": list(platforms),
            "sources": [f"https://github.com/{source.repository}/blob/{source.commit}/{source.path}"],
        },
        "package": packages,
    }
    return doc, CondaSources(python=pythons.pop(), sources={source_key: source}, packages=sources)


def _content_hash(packages: list[dict[str, Any]]) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps([(p["url"], p["hash"]["sha256"]) for p in packages]).encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """python scripts/assemble_conda_layer.py PIXI_LOCK REPOSITORY PATH COMMIT ENVIRONMENT OUT_DIR...: write
    conda-lock.yml and conda-sources.json into each OUT_DIR (a lock folder) from a pixi.lock read at that commit."""
    import argparse

    import yaml

    from aipc_env.core.fileio import atomic_write_text, read_yaml
    from aipc_env.core.formats import write_model

    p = argparse.ArgumentParser(prog="python scripts/assemble_conda_layer.py")
    for name in ("pixi_lock", "repository", "path", "commit", "environment"):
        p.add_argument(name)
    p.add_argument("out", nargs="+", type=Path)
    args = p.parse_args(argv)
    source = RecordSource(repository=args.repository, path=args.path, commit=args.commit, environment=args.environment)
    doc, sources = assemble(
        read_yaml(Path(args.pixi_lock), "pixi.lock"), args.environment, f"{args.repository}@{args.commit[:12]}", source
    )
    for out in args.out:
        atomic_write_text(
            out / "conda-lock.yml",
            "# The interpreter layer of this pair's envs (conda-lock v1), "
            f"assembled from public lock records: see {CONDA_SOURCES_NAME}.\n" + yaml.safe_dump(doc, sort_keys=False, width=200),
        )
        write_model(sources_path(out), sources)
    return ExitCode.OK


if __name__ == "__main__":
    raise SystemExit(main())
