"""Every reader has a fuzz test: the modules of src/aipc_env that open or parse a file (core/fileio's readers, open(),
Image.open, tomllib, yaml, load_versioned, read_text/read_bytes) are listed by scanning the source, and each must be
mapped to the property-based test in tests/test_fuzz_readers.py that fuzzes what it reads, or said not to read
outside input (and why). A new reader with neither fails here, as does a mapping to a test that does not exist or
to a module that no longer reads. GAPS is a ratchet: readers known to lack their own fuzz test, which may only
shrink."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

SRC = ROOT / "src" / "aipc_env"
READS = re.compile(
    r"read_text\(|read_bytes\(|read_json\(|read_yaml\(|parse_toml\(|parse_json\(|parse_yaml\(|load_versioned\("
    r"|load_facts\(|Image\.open\(|tomllib\.|yaml\.safe_load\(|yaml\.load\(|(?<![\w.])open\(|\.open\("
)

VERSIONED = "test_fuzz_versioned_files_from_their_schemas"
TEXT = "test_fuzz_text_readers_on_bytes"

FUZZED: dict[str, str] = {
    "trainenv/layers.py": "test_fuzz_conda_meta_records",
    "train/tinyrun.py": "test_fuzz_tiny_run_config",
    "train/buildcache.py": "test_fuzz_build_cache_record",
    "train/memory_model.py": "test_fuzz_memory_coefficients_file",
    "trainenv/uvenv.py": "test_fuzz_env_stamp",
    "launch/worker_call.py": "test_fuzz_worker_refusal",  # and the workers' results: VERSIONED
    "core/heartbeat.py": "test_fuzz_installer_log_tail",
    "core/net.py": "test_fuzz_download_body",
    "workers/accelerate_choices.py": "test_fuzz_accelerate_enum_source",
    # versioned formats: records, journals, manifests, reports, configs, data files (load_versioned / a model)
    "commands/distill.py": VERSIONED,
    "commands/train.py": VERSIONED,
    "core/formats.py": VERSIONED,
    "distill/config.py": VERSIONED,
    "distill/g3_verdict.py": VERSIONED,
    "workers/distill/trajectories.py": VERSIONED,
    "distill/verdict.py": VERSIONED,
    "fleet/bundle_check.py": VERSIONED,
    "fleet/winget_pins.py": VERSIONED,
    "lock/check.py": VERSIONED,
    "lock/refresh.py": VERSIONED,
    "lock/wheels.py": VERSIONED,
    "matrix/gpu_runtime.py": VERSIONED,
    "matrix/model.py": VERSIONED,
    "qflux/adapt.py": VERSIONED,
    "qflux/patches.py": VERSIONED,
    "workers/heldout_phase.py": VERSIONED,
    "workers/train/checkpoint.py": VERSIONED,
    "train/config.py": VERSIONED,
    "train/resume.py": VERSIONED,
    "trainenv/build.py": VERSIONED,
    "trainenv/qflux_env.py": VERSIONED,
    "trainenv/record.py": VERSIONED,
    # JSON/YAML/TOML through core/fileio's bounded readers
    "core/fileio.py": TEXT,
    "commands/matrix.py": TEXT,
    "workers/distill/export.py": TEXT,
    "distill/grid.py": TEXT,
    "distill/identity.py": TEXT,
    "workers/distill/models.py": TEXT,
    "distill/prompts.py": TEXT,
    "fleet/report.py": TEXT,
    "launch/runlock.py": TEXT,
    "lock/simple_index.py": TEXT,
    "qflux/loader.py": TEXT,
    "qflux/smoke.py": TEXT,
    "workers/train/prequantized.py": TEXT,
    "verify/run.py": TEXT,
    "commands/recommend.py": "test_fuzz_argv_under_json",
    "cli.py": "test_fuzz_argv_under_json",
    # locks, conda layers, versions and specs
    "lock/lockfile.py": "test_fuzz_pylock",
    "lock/artifacts.py": "test_fuzz_pylock",
    "lock/offline.py": "test_fuzz_pylock",
    "lock/lock.py": "test_fuzz_pylock",
    "lock/conda_layer.py": "test_fuzz_conda_layer",
    "lock/specs.py": "test_fuzz_version_requirement_specifier_marker",
    # images, datasets, held-out sets
    "dataset/images.py": "test_fuzz_image_headers",
    "dataset/scan.py": "test_fuzz_datasets",
    "dataset/qflux.py": "test_fuzz_datasets",
    "workers/train/cache.py": "test_fuzz_datasets",  # reads only images `dataset validate` checked before the run (train/inputs)
    # facts, pip lists, the output writer's state
    "facts/model.py": "test_fuzz_facts_through_every_doctor_check",
    "commands/doctor.py": "test_fuzz_facts_through_every_doctor_check",
    "commands/env.py": "test_fuzz_facts_through_every_doctor_check",  # its --facts: the same load_facts
    "matrix/piplist.py": "test_fuzz_pip_lists",
    "core/outputs.py": "test_fuzz_output_record_and_journal",
    "fleet/winget_check.py": "test_fuzz_winget_configuration",
    "trainenv/requirements.py": "test_fuzz_requirements_file",
    "facts/toolversion.py": "test_fuzz_tool_versions_of_a_prefix",
}

NOT_OUTSIDE_INPUT: dict[str, str] = {
    "container/render.py": "its own template files, shipped in the package",
    "container/engine.py": "the engine's own config file it writes (a registries.conf) before a build",
    "container/build.py": "a key file's first bytes, only compared with a marker; the key is checked by fingerprint",
    "core/platforms.py": "this machine's /sys device ids (kernel-written hex words)",
    "core/procs.py": "its own logs, opened to append",
    "workers/distill/tinypipe21.py": "its own licence template",
    "fleet/__init__.py": "its own template files",
    "fleet/ansible.py": "a key file copied byte for byte (its fingerprint checked first)",
    "fleet/bundle.py": "its own verifier module, copied into the bundle",
    "fleet/bundle_files.py": "files hashed in chunks, never parsed",
    "launch/hops.py": "its own log, opened to append",
    "launch/render.py": "its own launcher templates",
    "launch/runner.py": "its own run log, opened to append and to tail",
    "lock/verify.py": "a download written to a file, hashed, never parsed",
    "paths.py": "a checkout's pyproject.toml head, only compared with a marker",
    "trainenv/tool_env.py": "its own constraints and stamp, hashed and compared",
    "trainenv/torch_source.py": "the shipped constraints file",
    "facts/memory.py": "/proc/meminfo of this machine",
    "distill/licence.py": "a licence text read bounded and hashed, never parsed",
    "distill/publish.py": "files hashed and compared, never parsed",
    "workers/compare.py": "nothing but through dataset/images",
    "workers/monitor.py": "the CSV this run of monitor wrote, plotted at its end",
}

GAPS: dict[str, str] = {
    "workers/distill/gates.py": "opens its own rendered grid with PIL directly, not through dataset/images",
    "workers/distill/student.py": "its own JSON-lines log on resume (loads_json per line)",
    "workers/train/fit.py": "its own JSON-lines log on resume (loads_json per line)",
    "fleet/sign.py": "signature and key files (bounded reads; no property test yet)",
    "facts/gather.py": "this machine's conda-meta, METADATA and probe output",
    "qflux/checker.py": "a clone's files and accelerate config",
    "workers/qflux_smoke.py": "yaml.safe_load of the config the tool wrote, inside the training env",
}


def _readers() -> set[str]:
    found = set()
    for path in SRC.rglob("*.py"):
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("#"))
        if READS.search(code):
            found.add(path.relative_to(SRC).as_posix())
    return found


def _fuzz_tests() -> set[str]:
    names = set()
    for path in Path(__file__).parent.glob("test_fuzz_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_fuzz_")}
    return names


def test_every_reader_has_a_fuzz_test_or_a_reason():
    readers = _readers()
    classified = set(FUZZED) | set(NOT_OUTSIDE_INPUT) | set(GAPS)
    unmapped = sorted(readers - classified)
    assert not unmapped, (
        f"readers without a fuzz test: {unmapped}; add a property-based test to tests/test_fuzz_readers.py and map "
        "the module to it in FUZZED (or say in NOT_OUTSIDE_INPUT why it reads nothing from outside)"
    )
    stale = sorted((set(FUZZED) | set(GAPS)) - readers)
    assert not stale, f"mapped modules that no longer read a file: {stale}; remove them"
    assert not set(FUZZED) & set(GAPS) and not set(FUZZED) & set(NOT_OUTSIDE_INPUT)


def test_every_mapped_fuzz_test_exists():
    tests = _fuzz_tests()
    assert set(FUZZED.values()) <= tests, sorted(set(FUZZED.values()) - tests)


def test_the_gaps_only_shrink():
    assert len(GAPS) <= 8, "GAPS is a ratchet: fuzz the reader instead of adding it here"


def test_the_scan_finds_a_new_reader(tmp_path, monkeypatch):
    """The scan itself can fail: a module that starts to read a file is found."""
    import tests.test_fuzz_registry as registry

    fake = tmp_path / "aipc_env"
    (fake / "new").mkdir(parents=True)
    (fake / "new" / "reader.py").write_text("import yaml\nx = yaml.safe_load(open('f'))\n")
    (fake / "new" / "quiet.py").write_text("# open( in a comment\nx = 1\n")
    monkeypatch.setattr(registry, "SRC", fake)
    assert registry._readers() == {"new/reader.py"}
