"""The qflux path against the real upstream (460ba1a) in a real qflux env (the patched requirements plus this
machine's torch, built with uv): the adapted clone imports without transformer_engine, its own loader accepts
every config `recommend --engine qflux` writes, `train` runs that loader before any phase, upstream's dataset
loader really mishandles what `dataset validate --engine qflux` warns about, and the smoke trains recommend's
config for 5 NF4 steps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import built_once, run_cli

pytestmark = pytest.mark.slow
# the full upstream smoke is a unit of work of its own in the slow tier (tests/conftest.py worker_groups): it runs on
# another worker than the rest of this file, both on the one qflux env
WORKER_GROUPS = {"test_smoke_trains_recommends_config_with_upstreams_own_phases": "smoke"}

GiB = 2**30


@pytest.fixture(scope="session")
def adapted_clone(upstream_pristine, tmp_path_factory) -> Path:
    from aipc_env.qflux.adapt import apply_adaptation

    dest = tmp_path_factory.mktemp("adapted") / "qwen image finetune ü"
    shutil.copytree(upstream_pristine, dest)
    apply_adaptation(dest, log=lambda m: None)
    return dest


@pytest.fixture(scope="session")
def pair():
    """The pair the policy picks for a qflux env here: the one whose torch the local wheel folder holds."""
    from aipc_env.core.platforms import current_platform
    from aipc_env.matrix import load_matrix
    from aipc_env.trainenv.select import decide
    from aipc_env.trainenv.situation import situation_for

    situation = situation_for("run", load_matrix(), current_platform(), qflux_clone=Path("clone"))
    return decide(situation, "run").pair.pair


@pytest.fixture(scope="session")
def qflux_python(adapted_clone, pair, tmp_path_factory) -> Path:
    """The clone's qflux env, built once per run for every worker (its requirements are the adapted clone's, the
    same in every worker's copy): the smoke runs on a worker of its own (WORKER_GROUPS)."""
    from aipc_env.trainenv.envs import env_python
    from aipc_env.trainenv.qflux_env import ensure_qflux_env

    root = built_once(
        tmp_path_factory, "qflux-envs", lambda folder: ensure_qflux_env(adapted_clone, pair, root=folder, log=lambda m: None)
    )
    prefix, _ = ensure_qflux_env(adapted_clone, pair, root=root, log=lambda m: None)  # the built one: its stamp matches
    return env_python(prefix)


def run_in_env(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "QFLUX_DOTENV_LOADED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(python), "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_env_keeps_the_pairs_torch_and_has_no_cuda_packages(qflux_python, pair):
    out = run_in_env(
        qflux_python,
        "import importlib.metadata as m, json; print(json.dumps(sorted("
        "(d.metadata['Name'].lower(), d.version) for d in m.distributions())))",
        Path.cwd(),
    )
    dists = dict(json.loads(out.stdout))
    assert dists["torch"].startswith(pair.newest_torch), dists["torch"]
    assert dists["transformers"] == "4.52.4" and dists["pydantic"] == "2.11.7"
    assert not [n for n in dists if n.startswith("nvidia-") and n != "nvidia-ml-py"]
    assert "transformer-engine" not in dists and "transformer_engine" not in dists


def test_adapted_clone_imports_qflux_main_without_transformer_engine(adapted_clone, qflux_python):
    out = run_in_env(
        qflux_python,
        "import importlib.util, qflux.main\nassert importlib.util.find_spec('transformer_engine') is None\nprint('imported')",
        adapted_clone / "src",
    )
    assert out.returncode == 0 and "imported" in out.stdout, out.stderr[-2000:]


def _datasets(root: Path) -> dict[str, str]:
    local = root / "local"
    (local / "images").mkdir(parents=True)
    (local / "control").mkdir()
    csv = root / "pairs.csv"
    csv.write_text("path_target,path_control,prompt\n/abs/t.png,/abs/c.png,Add the character\n", encoding="utf-8")
    pq = root / "pq" / "data"
    pq.mkdir(parents=True)
    (pq / "train-00000-of-00001.parquet").write_bytes(b"")
    return {"local": str(local), "csv": str(csv), "parquet": str(root / "pq")}


@pytest.mark.parametrize("gb", [31.6, 62.6, 95.4])
def test_every_recommended_config_loads_through_the_clones_own_loader(
    gb, adapted_clone, upstream_pristine, qflux_python, tmp_path
):
    from aipc_env.errors import InputError
    from aipc_env.qflux.loader import validate_with_clone
    from aipc_env.train.recommend import Machine, qflux_config, recommend

    for kind, path in _datasets(tmp_path / "ds").items():
        rec = recommend(
            Machine(ram_bytes=int(gb * GiB), device="cpu"),
            dataset_path=path,
            model_path=str(tmp_path / "model"),
            output_dir=str(tmp_path / "out"),
        )
        if "text_encoder_path" in rec.config["model"]:
            rec.config["model"]["text_encoder_path"] = str(tmp_path / "te-nf4")
        cfg = qflux_config(rec, dataset_path=path)
        file = tmp_path / f"{kind}.yaml"
        file.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        result = validate_with_clone(qflux_python, adapted_clone, file)
        loaded = result["config"]
        assert result["quantization_type"] == "nf4" and result["trainer"] == "QwenImageEditPlus"
        assert loaded["data"]["init_args"]["processor"]["class_path"] == "qflux.data.preprocess.ImageProcessor"
        assert loaded["cache"]["cache_dir"] == str(tmp_path / "out" / "cache")
        assert loaded["model"]["quantize"] is False
        if kind == "parquet":
            assert loaded["data"]["init_args"]["dataset_path"] == [{"repo_id": path, "split": "train"}]
        # the pristine clone's loader has no NF4 in its schema: the adaptation is what makes these configs valid
        with pytest.raises(InputError, match="quantize_type"):
            validate_with_clone(qflux_python, upstream_pristine, file)


def test_the_loader_checks_devices_for_real(adapted_clone, qflux_python, tmp_path):
    """An xpu:0 config is what an AI PC gets; this machine has no XPU and upstream's loader says so by key."""
    from aipc_env.errors import InputError
    from aipc_env.qflux.loader import validate_with_clone
    from aipc_env.train.recommend import Machine, qflux_config, recommend

    rec = recommend(Machine(ram_bytes=64 * GiB, device="xpu:0"), model_path="/m", output_dir=str(tmp_path))
    file = tmp_path / "xpu.yaml"
    file.write_text(yaml.safe_dump(qflux_config(rec, dataset_path="/d")), encoding="utf-8")
    with pytest.raises(InputError) as info:
        validate_with_clone(qflux_python, adapted_clone, file)
    assert info.value.key == "cache.devices.vae" and "XPU not available" in info.value.message
    assert "doctor --probe-device" in info.value.fix and "recommend" not in info.value.fix  # the config is not wrong


def test_the_fix_for_a_rejected_config_tells_a_missing_device_from_a_bad_config():
    from aipc_env.qflux.loader import rejection_fix

    missing = [{"loc": "cache.devices.vae", "msg": "Value error, XPU not available but got device=xpu:0."}]
    assert "doctor --probe-device" in rejection_fix(missing) and "cache.devices.vae" in rejection_fix(missing)
    assert "doctor --probe-device" in rejection_fix([], "ValueError: XPU not available but got device=xpu")
    assert "recommend --engine qflux" in rejection_fix([{"loc": "train.lr", "msg": "Field required"}])


def _train_config(tmp_path: Path, clone: Path, qcfg: dict) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    qfile = tmp_path / "qflux config.yaml"
    qfile.write_text(yaml.safe_dump(qcfg, sort_keys=False), encoding="utf-8")
    cfg = {
        "engine": "qflux",
        "qflux": {"clone": str(clone), "config": str(qfile)},
        "output_dir": str(tmp_path / "out"),
        "device": "cpu",
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def test_train_runs_the_clones_loader_before_any_phase(adapted_clone, qflux_python, tmp_path):
    from aipc_env.train.recommend import Machine, qflux_config, recommend

    env = str(qflux_python.parent.parent)
    rec = recommend(Machine(ram_bytes=64 * GiB, device="cpu"))
    todo = _train_config(tmp_path / "a", adapted_clone, qflux_config(rec, dataset_path=None))
    result = run_cli("train", str(todo), "--dry-run", "--env", env, timeout=300)
    assert result.returncode == 2 and "TODO" in result.stderr and "model.pretrained_model_name_or_path" in result.stderr
    rec = recommend(Machine(ram_bytes=64 * GiB, device="cpu"), model_path="/m", output_dir=str(tmp_path / "o"), dataset_path="/d")
    good = qflux_config(rec, dataset_path="/d")
    ok = run_cli("train", str(_train_config(tmp_path / "b", adapted_clone, good)), "--dry-run", "--env", env, timeout=300)
    assert ok.returncode == 0 and "the clone's loader accepts" in ok.stdout, ok.stderr
    flat = json.loads(json.dumps(good))
    flat["data"]["init_args"]["processor"] = {"process_type": "center_crop", "target_size": [384, 672]}
    bad = run_cli("train", str(_train_config(tmp_path / "c", adapted_clone, flat)), "--dry-run", "--env", env, timeout=300)
    assert bad.returncode == 2 and "data.init_args.processor" in bad.stderr and "Extra inputs" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "c" / "out" / "launch.sh").exists()


def test_train_with_engine_qflux_runs_in_the_clones_qflux_env(adapted_clone, qflux_python, tmp_path):
    """Without --env, `train` checks and runs a qflux config in the clone's qflux env (built by the run service when
    missing, here from uv's warm cache), never in the default training env that cannot import the clone."""
    from aipc_env.train.recommend import Machine, qflux_config, recommend

    rec = recommend(Machine(ram_bytes=64 * GiB, device="cpu"), model_path="/m", output_dir=str(tmp_path / "o"), dataset_path="/d")
    config = _train_config(tmp_path / "b", adapted_clone, qflux_config(rec, dataset_path="/d"))
    result = run_cli("train", str(config), "--dry-run", timeout=1200, env={"AIPC_ENV_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "the clone's qflux env, built by aipc-env" in result.stdout
    assert "the clone's loader accepts" in result.stdout
    assert str(tmp_path / "cache" / "qflux-envs") in result.stdout


PROBE = """
import json, sys
from qflux.data.config import DatasetInitArgs
from qflux.data.dataset import ImageDataset
args = DatasetInitArgs(dataset_path=json.loads(sys.argv[1]), cache_dir=sys.argv[2], use_cache=True)
try:
    ds = ImageDataset(args)
    rows = []
    for i in range(len(ds)):
        d = ds.load_data(i)
        rows.append({"image": str(d.get("image")), "controls": 1 + len(d.get("controls") or []),
                     "prompt": d.get("prompt")})
    print(json.dumps({"ok": True, "rows": rows}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": type(exc).__name__ + ": " + str(exc)}))
"""


def _probe(python: Path, clone: Path, dataset, cache: Path) -> dict:
    env = {**os.environ, "QFLUX_DOTENV_LOADED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [str(python), "-c", PROBE, json.dumps(dataset), str(cache)],
        cwd=clone / "src",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_dataset_warnings_match_what_upstreams_loader_really_does(upstream_pristine, qflux_python, tmp_path):
    from PIL import Image

    from aipc_env.dataset.qflux import qflux_warnings
    from aipc_env.dataset.scan import scan_dataset

    root = tmp_path / "ds"
    (root / "images").mkdir(parents=True)
    (root / "control").mkdir()
    for stem in ("a", "b", "c"):
        Image.new("RGB", (64, 64)).save(root / "control" / f"{stem}.png")
        (root / "images" / f"{stem}.txt").write_text("Add a red hat to the person", encoding="utf-8")
    Image.new("RGB", (64, 64)).save(root / "images" / "a.png")
    Image.new("RGB", (64, 64)).save(root / "images" / "b.PNG")  # upper-case extension
    Image.new("RGB", (64, 64)).save(root / "images" / "c.png")
    (root / "images" / "c.txt").write_text("Add a red hat to the person", encoding="utf-8-sig")  # BOM
    Image.new("RGB", (64, 64)).save(root / "control" / "a_control_1.jpg")
    Image.new("RGB", (64, 64)).save(root / "control" / "a_control_2.png")  # mixed extensions
    result = _probe(qflux_python, upstream_pristine, str(root), tmp_path / "cache")
    assert result["ok"], result
    rows = {Path(r["image"]).stem: r for r in result["rows"]}
    assert set(rows) == {"a", "c"}  # b.PNG was skipped
    assert rows["c"]["prompt"].startswith("\ufeff")  # the BOM is kept
    assert rows["a"]["controls"] == 2  # main + control_1: control_2 (.png) was lost
    text = "\n".join(qflux_warnings(scan_dataset(root)))
    assert "b.PNG" in text and "BOM" in text and "mix extensions" in text
    cli = run_cli("dataset", "validate", str(root), "--engine", "qflux", "--target-size", "64", "64")
    assert "b.PNG" in cli.stdout and not any(
        "qflux:" in w
        for w in json.loads(run_cli("dataset", "validate", str(root), "--target-size", "64", "64").stdout)["warnings"]
    )
    # CSV paths relative to the CSV
    (tmp_path / "csvds").mkdir()
    shutil.copy(root / "images" / "a.png", tmp_path / "csvds" / "t.png")
    shutil.copy(root / "control" / "a.png", tmp_path / "csvds" / "c.png")
    csv = tmp_path / "csvds" / "pairs.csv"
    csv.write_text("path_target,path_control,prompt\nt.png,c.png,Add a red hat to the person\n", encoding="utf-8")
    result = _probe(qflux_python, upstream_pristine, str(csv), tmp_path / "cache2")
    assert not result["ok"] and "t.png" in result["error"], result  # opened from src/, not beside the CSV
    assert "relative path" in "\n".join(qflux_warnings(scan_dataset(csv)))


def test_local_parquet_dict_form_fails_upstream_and_loads_once_adapted(upstream_pristine, adapted_clone, qflux_python, tmp_path):
    make = (
        "import sys, io\nfrom PIL import Image\nfrom datasets import Dataset\n"
        "from qflux.utils.huggingface import FEATURES\n"
        "img = Image.new('RGB', (64, 64))\n"
        "rows = {'id': ['a', 'b'], 'control_images': [[img], [img]], 'control_mask': [None, None],\n"
        "        'target_image': [img, img], 'prompt': ['Add a hat', 'Remove the hat']}\n"
        "Dataset.from_dict(rows, features=FEATURES).to_parquet(sys.argv[1])\n"
    )
    target = tmp_path / "pq" / "data"
    target.mkdir(parents=True)
    env = {**os.environ, "QFLUX_DOTENV_LOADED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    made = subprocess.run(
        [str(qflux_python), "-c", make, str(target / "train-00000-of-00001.parquet")],
        cwd=adapted_clone / "src",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    form = [{"repo_id": str(tmp_path / "pq"), "split": "train"}]
    assert not _probe(qflux_python, upstream_pristine, form, tmp_path / "c1")["ok"]
    adapted = _probe(qflux_python, adapted_clone, form, tmp_path / "c2")
    assert adapted["ok"], adapted
    assert [r["prompt"] for r in adapted["rows"]] == ["Add a hat", "Remove the hat"]


def _dotted(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def test_the_plain_edit_smoke_config_loads_with_upstreams_plain_trainer(adapted_clone, qflux_python, tmp_path):
    """One full smoke trains (below: edit-plus, what `recommend` writes). The plain edit variant differs in the trainer
    key only (a recorded change, tests/test_qflux_smoke_config.py): its smoke config loads through the clone's own
    loader as upstream's plain trainer with NF4, and that trainer's module, with the adaptation's edits, imports in
    the clone's env."""
    from aipc_env.qflux.loader import validate_with_clone
    from aipc_env.qflux.smoke import recommended_for, smoke_config
    from aipc_env.train.recommend import Machine

    cfg, changed = smoke_config(
        recommended_for(Machine(ram_bytes=int(31.6 * GiB))), tmp_path / "run", accelerator=False, plus=False
    )
    assert "trainer" in changed
    file = tmp_path / "plain edit.yaml"
    file.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    result = validate_with_clone(qflux_python, adapted_clone, file)
    assert result["trainer"] == "QwenImageEdit" and result["quantization_type"] == "nf4"
    out = run_in_env(
        qflux_python,
        "from qflux.trainer.qwen_image_edit_trainer import QwenImageEditTrainer\nprint(QwenImageEditTrainer.__name__)",
        adapted_clone / "src",
    )
    assert out.returncode == 0 and "QwenImageEditTrainer" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("plus", [True], ids=["edit-plus"])
def test_smoke_trains_recommends_config_with_upstreams_own_phases(adapted_clone, qflux_python, tmp_path, plus):
    """The one full upstream smoke: it trains what `recommend --engine qflux` writes for a 32 GB AI PC (its CLI
    output, read here), changed only in the keys it records; optimizer, checkpointing, caption dropout and NF4
    stay."""
    from aipc_env.qflux.smoke import run_smoke
    from aipc_env.train.recommend import Machine

    run_dir = tmp_path / "smoke run & ü"
    result = run_smoke(
        adapted_clone,
        plus=plus,
        run_dir=run_dir,
        env_prefix=qflux_python.parent.parent,
        log=lambda m: None,
        machine=Machine(ram_bytes=int(31.6 * GiB)),
    )
    assert result.passed, result.summary() + "\n" + Path(result.log).read_text(errors="replace")[-3000:]
    names = {c.name for c in result.checks}
    assert names == {
        "nf4-linear-layers",
        "fit-phase-ran-nf4",
        "final-checkpoint",
        "checkpoints-pruned",
        "lora-reloads-with-alpha",
    }
    log = Path(result.log).read_text(errors="replace")
    assert "qflux.main" in log and "5/5" in log
    assert Path(result.env_python).parent == qflux_python.parent
    pruned = next(c for c in result.checks if c.name == "checkpoints-pruned")
    assert "[3, 4, 5]" in pruned.detail  # limit 3 of 5 periodic checkpoints
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"ram_gb": 31.6}), encoding="utf-8")
    cli = run_cli("recommend", "--engine", "qflux", "--json", "--facts", str(probe))
    assert cli.returncode == 0, cli.stderr
    recommended = _dotted(json.loads(cli.stdout)["config"])
    trained = _dotted(yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")))
    differ = {k for k in recommended.keys() | trained.keys() if recommended.get(k, "<absent>") != trained.get(k, "<absent>")}
    assert differ == set(result.changed), differ ^ set(result.changed)
    expected = {
        "model.pretrained_model_name_or_path",
        "data.init_args.dataset_path",
        "data.init_args.cache_dir",
        "cache.cache_dir",
        "logging.output_dir",
        "data.init_args.processor.init_args.target_size",
        "data.init_args.processor.init_args.controls_size",
        "train.max_train_steps",
        "train.checkpointing_steps",
        "lr_scheduler.warmup_steps",
        "cache.devices.vae",
        "cache.devices.text_encoder",
        "model.text_encoder_path",
    } | (set() if plus else {"trainer"})
    assert set(result.changed) == expected
    assert "validate_environment" in result.changed["model.text_encoder_path"]
    for key, value in {
        "optimizer.class_path": "bitsandbytes.optim.Adam8bit",
        "train.gradient_checkpointing": True,
        "data.init_args.caption_dropout_rate": 0.05,
        "train.checkpoints_total_limit": 3,
        "model.quantize_type": "nf4",
        "train.gradient_accumulation_steps": 2,
        "data.num_workers": 1,
        "model.lora.r": 16,
    }.items():
        assert trained[key] == value, key
    assert "changed only 13" in result.summary() or "changed only 14" in result.summary()


def test_smoke_cli_refuses_a_pristine_clone(upstream_pristine, tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(upstream_pristine, clone)
    (clone / "src/qflux/trainer/base_trainer.py").write_text("changed upstream\n", encoding="utf-8")
    result = run_cli("adapt", str(clone), "--smoke")
    assert result.returncode == 1 and "anchor" in result.stderr


@pytest.mark.wine
def test_smoke_launcher_activates_its_pairs_oneapi_under_wine(adapted_clone, tmp_path):
    """The smoke goes through the run service: its generated launch.bat runs the pair's setvars (Wine's real cmd,
    a fake setvars.bat that calls vars.bat by bare name) before the env's interpreter (a recording stand-in)."""
    import shutil

    from aipc_env.facts.model import OneApiInfo, OneApiInstall
    from aipc_env.matrix import load_matrix
    from aipc_env.qflux.smoke import run_smoke
    from aipc_env.trainenv.record import EnvRecord, write_env_record
    from tests.conftest import require_tool
    from tests.support.wine import fake_oneapi_bat, make_wine, read_record, stop_wine, wine_reason

    require_tool(wine_reason())
    pair = load_matrix().get("xpu-2.13")
    (tmp_path / "wine").mkdir()
    wine = make_wine(tmp_path / "wine")
    try:
        base = tmp_path / "Users & Co (x86)"
        # ASCII: Wine's cmd did not find an interpreter whose non-ASCII name it read from launch.env; this test is
        # about the activation, not that Wine limit
        prefix = base / "qflux env"
        prefix.mkdir(parents=True)
        shutil.copy(wine.standin, prefix / "python.exe")
        write_env_record(
            EnvRecord(
                prefix=str(prefix),
                python=str(prefix / "python.exe"),
                pair=pair.id,
                platform="win-64",
                built_at="2026-12-01T00:00:00+00:00",
            )
        )
        root = fake_oneapi_bat(base / "Program Files (x86)" / "Intel" / "oneAPI", release=pair.oneapi)
        toolchain = OneApiInfo(
            installs=[
                OneApiInstall(
                    root=wine.winpath(root),
                    layout="component",
                    releases=[pair.oneapi],
                    version=pair.oneapi,
                    setvars=wine.winpath(root / "setvars.bat"),
                )
            ]
        )
        result = run_smoke(
            adapted_clone,
            run_dir=base / "smoke & run",
            env_prefix=prefix,
            dry_run=True,
            log=lambda m: None,
            platform="win-64",
            toolchain=(toolchain, None),
        )
        assert result.pair == pair.id and result.launcher.endswith("launch.bat")
        # the env was chosen on this Linux host, so its interpreter has a POSIX path: give launch.env the Windows
        # name of the same file (on Windows the policy yields that name itself); every other line stays as written
        env_file = Path(result.launcher).with_name("launch.env")
        lines = env_file.read_bytes().decode("utf-8").split("\r\n")
        lines = [f"AIPC_PYTHON={wine.winpath(prefix / 'python.exe')}" if ln.startswith("AIPC_PYTHON=") else ln for ln in lines]
        env_file.write_bytes("\r\n".join(lines).encode("utf-8"))
        assert any(ln.startswith("AIPC_ONEAPI_DIR=") for ln in lines)
        record = base / "record.txt"
        ran = wine.run_bat(Path(result.launcher), AIPC_STANDIN_OUT=wine.winpath(record))
        assert ran.returncode == 0, ran.stderr
        args, env, _ = read_record(record)
        assert args == ["-m", "aipc_env.launch.runner", "launch.json"]
        assert env["SETVARS_COMPLETED"] == "1" and env["FAKE_ONEAPI_RELEASE"] == pair.oneapi
        assert env["HF_HUB_OFFLINE"] == "1" and env["QFLUX_DOTENV_LOADED"] == "1"
    finally:
        stop_wine(wine)


@pytest.mark.parametrize("zero_cond_t, refused", [(True, True), (False, False), (None, False)])
def test_a_2511_checkpoint_is_refused_for_the_qflux_engine(tmp_path, zero_cond_t, refused):
    """Upstream's transformer class has no zero_cond_t: a 2511 checkpoint would load as another model."""
    import json as _json

    from aipc_env.errors import InputError
    from aipc_env.qflux.loader import check_variant

    model = tmp_path / "model"
    (model / "transformer").mkdir(parents=True)
    (model / "model_index.json").write_text(_json.dumps({"_class_name": "QwenImageEditPlusPipeline"}))
    tconfig = {"_class_name": "QwenImageTransformer2DModel"}
    if zero_cond_t is not None:
        tconfig["zero_cond_t"] = zero_cond_t
    (model / "transformer" / "config.json").write_text(_json.dumps(tconfig))
    if refused:
        with pytest.raises(InputError) as info:
            check_variant(tmp_path / "q.yaml", str(model))
        assert info.value.key == "model.pretrained_model_name_or_path" and "2511" in info.value.message
        assert "built-in engine" in info.value.fix
    else:
        check_variant(tmp_path / "q.yaml", str(model))


def test_recommend_for_qflux_offers_2509_and_says_why_not_2511(tmp_path):
    out = tmp_path / "q.yaml"
    result = run_cli("recommend", "--engine", "qflux", "--force", "--out", str(out), "--json")
    report = json.loads(result.stdout)
    assert "Qwen-Image-Edit-2509" in report["config"]["model"]["pretrained_model_name_or_path"]
    assert any("not 2511" in note and "zero_cond_t" in note for note in report["notes"])


VARIANT_SCRIPT = r"""
import json, sys
from qflux.models.transformer_qwenimage import QwenImageTransformer2DModel
out = {}
for name, path in json.loads(sys.argv[1]).items():
    config = json.load(open(path, encoding="utf-8"))
    _, unused, _ = QwenImageTransformer2DModel.extract_init_dict(config)
    out[name] = sorted(k for k in unused if not k.startswith("_"))
print(json.dumps(out))
"""


def test_upstreams_transformer_ignores_no_attribute_of_an_offered_variant(adapted_clone, qflux_python, tmp_path):
    """For each published checkpoint's transformer config: diffusers' own class accepts every key (the fixtures
    name real attributes), upstream's class (in the clone's env, as from_pretrained decides it) ignores none of
    a variant the qflux path offers, and ignores 2511's zero_cond_t, which is why the qflux path refuses 2511."""
    from diffusers import QwenImageTransformer2DModel

    from aipc_env.errors import InputError
    from aipc_env.qflux.loader import check_variant
    from aipc_env.train.recommend import QFLUX_VARIANTS

    fixtures = Path(__file__).parent / "fixtures" / "qwen-image-edit"
    files = {f.name.split(".")[0]: str(f) for f in sorted(fixtures.glob("*.transformer-config.json"))}
    assert set(files) == {"edit", "edit-2509", "edit-2511"}
    for path in files.values():
        _, unused, _ = QwenImageTransformer2DModel.extract_init_dict(json.loads(Path(path).read_text()))
        assert not [k for k in unused if not k.startswith("_")], (path, unused)
    ran = subprocess.run(
        [str(qflux_python), "-c", VARIANT_SCRIPT, json.dumps(files)],
        capture_output=True,
        text=True,
        cwd=adapted_clone / "src",
        env={**os.environ, "PYTHONPATH": str(adapted_clone / "src"), "QFLUX_DOTENV_LOADED": "1", "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    ignored = json.loads(ran.stdout.strip().splitlines()[-1])
    assert ignored == {"edit": [], "edit-2509": [], "edit-2511": ["zero_cond_t"]}
    assert set(QFLUX_VARIANTS) == {"edit", "edit-2509"} and all(not ignored[v] for v in QFLUX_VARIANTS)
    for name, path in files.items():  # the refusal follows what upstream ignores, variant by variant
        model = tmp_path / name
        (model / "transformer").mkdir(parents=True)
        (model / "model_index.json").write_text(json.dumps({"_class_name": "QwenImageEditPlusPipeline"}))
        shutil.copy(path, model / "transformer" / "config.json")
        if ignored[name]:
            with pytest.raises(InputError, match="zero_cond_t"):
                check_variant(tmp_path / "c.yaml", str(model))
        else:
            check_variant(tmp_path / "c.yaml", str(model))


XPU_LOAD_SCRIPT = r"""
import json, sys, traceback
from pathlib import Path
import torch
from aipc_env.workers.train.compat import processor_without_video
processor_without_video()
from aipc_env.workers.train.tinypipe import build_tiny_pipeline
out = Path(sys.argv[1])
build_tiny_pipeline(out / "model", plus=True)
from qflux.utils.nf4 import nf4_config
import diffusers, transformers
from diffusers import QwenImageTransformer2DModel
from transformers import Qwen2_5_VLForConditionalGeneration
config = nf4_config(torch.bfloat16)
result = {"diffusers": diffusers.__version__, "transformers": transformers.__version__,
          "config": {"load_in_4bit": config.load_in_4bit, "quant_type": config.bnb_4bit_quant_type,
                     "compute_dtype": str(config.bnb_4bit_compute_dtype)}}

def refusal(call):
    try:
        call()
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        return {"type": type(exc).__name__, "message": str(exc)[:300], "function": frames[-1].name,
                "file": frames[-1].filename.split("site-packages/")[-1],
                "through": [f.name for f in frames]}
    return None

# the adapted clone's XPU branch: diffusers' bitsandbytes loader with the device map it passes
result["transformer"] = refusal(lambda: QwenImageTransformer2DModel.from_pretrained(
    str(out / "model"), subfolder="transformer", quantization_config=config, torch_dtype=torch.bfloat16,
    device_map={"": "xpu"}, use_safetensors=True))
result["text_encoder"] = refusal(lambda: Qwen2_5_VLForConditionalGeneration.from_pretrained(
    sys.argv[2], torch_dtype=torch.bfloat16))
print(json.dumps(result))
"""


def test_the_xpu_nf4_load_path_runs_up_to_the_call_that_needs_an_accelerator(adapted_clone, qflux_python, tmp_path):
    """On an XPU the adapted clone loads the transformer through diffusers' BitsAndBytesConfig and a pre-quantized
    NF4 text encoder through transformers. In the clone's env both run on this CPU up to one call each, which
    refuses without an accelerator: the calls the smoke names when it drops the pre-quantized folders. Should a
    release lift either refusal, this fails, and the smoke can take the XPU path on the CPU too."""
    from aipc_env.qflux.smoke import PREQUANTIZED_NEEDS_AN_ACCELERATOR
    from aipc_env.workers.train.tinypipe import build_tiny_pipeline

    te = tmp_path / "te-nf4"  # made as a user makes it (this env's transformers quantizes on the CPU)
    model = build_tiny_pipeline(tmp_path / "tiny", plus=True)
    made = run_cli("quantize", "text-encoder", "--src", str(model), "--dst", str(te), "--device", "cpu")
    assert made.returncode == 0, made.stderr[-2000:]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(adapted_clone / "src"), str(Path(__file__).parents[1] / "src")]),
        "QFLUX_DOTENV_LOADED": "1",
        "HF_HUB_OFFLINE": "1",
    }
    ran = subprocess.run(
        [str(qflux_python), "-c", XPU_LOAD_SCRIPT, str(tmp_path / "clone-side"), str(te)],
        capture_output=True,
        text=True,
        env=env,
        cwd=adapted_clone / "src",
        timeout=900,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["config"] == {"load_in_4bit": True, "quant_type": "nf4", "compute_dtype": "torch.bfloat16"}
    transformer, text_encoder = result["transformer"], result["text_encoder"]
    assert transformer and transformer["function"] == "validate_environment", transformer
    assert transformer["file"].endswith("diffusers/quantizers/bitsandbytes/bnb_quantizer.py")
    assert "No GPU found" in transformer["message"] and "from_pretrained" in transformer["through"]
    assert text_encoder and "validate_bnb_backend_availability" in text_encoder["through"], text_encoder
    assert "validate_environment" in text_encoder["through"] and "intel_extension_for_pytorch" in text_encoder["message"]
    # the smoke's stated reason names these versions and calls
    assert f"diffusers {result['diffusers']}" in PREQUANTIZED_NEEDS_AN_ACCELERATOR
    assert f"transformers {result['transformers']}" in PREQUANTIZED_NEEDS_AN_ACCELERATOR
    assert "BnB4BitDiffusersQuantizer.validate_environment" in PREQUANTIZED_NEEDS_AN_ACCELERATOR
