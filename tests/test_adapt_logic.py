"""adapt's refusals and the step-5 checker's rules, in process, on copies of the real upstream clone (460ba1a).

Each rule and guard is tested at its bound: one defect put into an adapted clone gives exactly its finding at the
line where it was put (and its near miss gives none); the pristine clone's report is a recorded fixture whose
every line is also checked against the upstream file's own text. tests/test_adapt.py tests the same paths through
the CLI and real signals; these are the fast in-process cases the mutation run (`nox -s mutate`) uses."""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from aipc_env.errors import AipcError, InputError
from aipc_env.qflux import adapt
from aipc_env.qflux.adapt import (
    PATCH_SET,
    STATE_DIR,
    AnchorMismatch,
    apply_adaptation,
    is_adapted,
    load_manifest,
    plan_adaptation,
    revert_adaptation,
)
from aipc_env.qflux.checker import (
    _segment,
    check_accelerate_config,
    check_clone,
    check_source,
    check_structure,
)

FIXTURE = Path(__file__).parent / "fixtures" / "qflux" / "check-pristine-460ba1a.json"
QUIET = {"log": lambda message: None}
TRAINER = "src/qflux/trainer/qwen_image_edit_trainer.py"
BASE = "src/qflux/trainer/base_trainer.py"
CONFIG = "src/qflux/data/config.py"
TOOLS = "src/qflux/utils/tools.py"
SEED = "src/qflux/utils/seed.py"
LOGGER = "src/qflux/utils/logger.py"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): sha(p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file() and STATE_DIR not in p.parts
    }


@pytest.fixture(scope="module")
def adapted_tree(upstream_pristine, tmp_path_factory) -> Path:
    """Adapted once per module; tests copy it (never edit it)."""
    dest = tmp_path_factory.mktemp("adapted") / "clone"
    shutil.copytree(upstream_pristine, dest)
    apply_adaptation(dest, **QUIET)
    return dest


@pytest.fixture(scope="module")
def adapted_texts(adapted_tree) -> dict[str, str]:
    """The adapted clone's source files, clone-relative path -> text (never edit it)."""
    return {
        str(p.relative_to(adapted_tree)): p.read_text(encoding="utf-8")
        for p in sorted((adapted_tree / "src/qflux").rglob("*.py"))
    }


@pytest.fixture
def pristine(upstream_clone) -> Path:
    """A private copy of the pristine upstream clone (conftest's, in a folder with a space and non-ASCII)."""
    return upstream_clone


@pytest.fixture
def adapted(adapted_tree, tmp_path) -> Path:
    dest = tmp_path / "adapted (x86) & ü"
    shutil.copytree(adapted_tree, dest, symlinks=True)
    return dest


def append(clone: Path, rel: str, text: str) -> int:
    """Append lines to a clone's file; returns the line number of the first appended line."""
    path = clone / rel
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(old + text, encoding="utf-8")
    return old.count("\n") + 1


def findings(clone: Path) -> list[tuple[str, str, str, int]]:
    return [(f.level, f.rule, f.file, f.line) for f in check_clone(clone).findings]


# ---- the checker -------------------------------------------------------------------------------------------------


def test_the_pristine_report_is_the_recorded_one_and_each_line_holds_what_it_names(pristine):
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))["findings"]
    report = check_clone(pristine)
    assert [f.model_dump() for f in report.findings] == recorded
    assert report.errors == 52 and report.adapted is False and report.clone == str(pristine)
    marker = {
        "cuda-call": "torch.cuda.",
        "flash-attention-2": "flash_attention_2",
        "hub-id": '"Qwen/',
        "cuda-sdp-switch": "torch.backends.cuda.enable_",
        "device-type-cuda-only": '.type == "cuda"',
        "torchvision-at-import": "import torchvision",
        "no-nf4-schema": "class ModelConfig(",
        "num-workers-positive": '"num_workers"',
        "no-max-steps-guard": "def train_epoch(",
        "no-epoch-break": "for epoch in range(",
        "spawn-unguarded": "def fit(",
        "lora-without-metadata": "def save_lora(",
        "no-nf4-autocast": "def _compute_loss(",
    }
    for row in recorded:  # the line of each finding, read from upstream's own file, not from the checker
        if row["rule"] in marker:
            line = (pristine / row["file"]).read_text(encoding="utf-8").splitlines()[row["line"] - 1]
            assert marker[row["rule"]] in line and not line.lstrip().startswith("#"), row
        else:
            assert row["line"] in (0, 1), row
    demo = (pristine / "src/qflux/models/load_model.py").read_text(encoding="utf-8").splitlines()
    main_at = demo.index('if __name__ == "__main__":') + 1
    demo_ids = [n for n, line in enumerate(demo, 1) if n > main_at and '"Qwen/' in line]
    assert demo_ids, "the demo block names hub IDs upstream"
    assert not any(r["rule"] == "hub-id" and r["line"] in demo_ids for r in recorded)


def test_the_adapted_clone_has_no_finding_and_is_adapted(adapted):
    report = check_clone(adapted)
    assert report.findings == [] and report.errors == 0 and report.adapted is True


@pytest.mark.parametrize(
    "code, expected",
    [
        ("x = torch.cuda.current_device()\n", ("ERROR", "cuda-call")),
        ("# x = torch.cuda.current_device()\n", None),
        ("x = 1  # torch.cuda.current_device()\n", None),
        ("x = 1  # torch.cuda.current_device() # twice\n", None),
        ('kw = dict(attn_implementation="flash_attention_2")\n', ("ERROR", "flash-attention-2")),
        ('kw = dict()  # not "flash_attention_2"\n', None),
        ("import transformer_engine\n", ("ERROR", "transformer-engine-import")),
        ("from transformer_engine import pytorch\n", ("ERROR", "transformer-engine-import")),
        ("import transformer_engine_extras\n", None),
        ("def lazy():\n    import transformer_engine\n", None),
        ("import torchvision\n", ("WARN", "torchvision-at-import")),
        ("import torchvisionx\n", None),
        ("def lazy():\n    import torchvision\n", None),
        ('vae = load_vae("Qwen/Qwen-Image-Edit-2509")\n', ("ERROR", "hub-id")),
        ('enc = load_qwenvl( "Qwen/Qwen-Image-Edit")\n', ("ERROR", "hub-id")),
        ('name = "Qwen/Qwen2.5-VL-7B-Instruct"\n', ("ERROR", "hub-id")),
        ('name = "Qwen/Qwen-Image-Edit-2509"\n', None),
        ('if __name__ == "__main__":\n    vae = load_vae("Qwen/Qwen-Image-Edit-2509")\n', None),
        ('if __name__ == "__main__":\n    pass\nvae = load_vae("Qwen/Qwen-Image-Edit-2509")\n', ("ERROR", "hub-id")),
        ("torch.backends.cuda.enable_flash_sdp(False)\n", ("WARN", "cuda-sdp-switch")),
        ('if device.type == "cuda":\n    torch.backends.cuda.enable_math_sdp(False)\n', None),
        ('if device.type not in ("xpu", "cpu"):\n    torch.backends.cuda.enable_math_sdp(False)\n', None),
        ('if device.type in ("xpu",):\n    torch.backends.cuda.enable_math_sdp(False)\n', ("WARN", "cuda-sdp-switch")),
        ('if device.type != "cpu":\n    torch.backends.cuda.enable_math_sdp(False)\n', ("WARN", "cuda-sdp-switch")),
    ],
)
def test_each_line_rule_at_its_bound(adapted_texts, code, expected):
    base = adapted_texts[TOOLS]
    assert check_source(TOOLS, base) == []
    line = base.count("\n") + 2
    got = [(f.level, f.rule, f.file, f.line) for f in check_source(TOOLS, base + "\n" + code)]
    if expected is None:
        assert got == []
    else:
        assert got == [(*expected, TOOLS, line + code.count("\n") - 1)]


def _whole(findings) -> list[tuple]:
    return [(f.level, f.rule, f.file, f.line, f.message, f.fix) for f in findings]


def test_the_rules_no_upstream_file_breaks_say_what_and_how(adapted_texts):
    """Whole findings of the rules the pristine clone does not show (its report pins the others' texts)."""
    base = adapted_texts[TOOLS]
    at = base.count("\n") + 1
    assert _whole(check_source(TOOLS, base + "import transformer_engine\n")) == [
        (
            "ERROR",
            "transformer-engine-import",
            TOOLS,
            at,
            "a top-level transformer_engine import fails on XPU",
            "import it lazily (run `aipc-env adapt CLONE` (it applies the runbook's step-5 edits))",
        )
    ]
    assert _whole(check_source(TOOLS, base + "def broken(:\n")) == [
        ("ERROR", "syntax", TOOLS, at, "does not parse: invalid syntax", "restore the file")
    ]
    assert _whole(check_source(TOOLS, "x = (\n")) == [
        ("ERROR", "syntax", TOOLS, 1, "does not parse: '(' was never closed", "restore the file")
    ]
    assert _whole(check_source(TOOLS, "x = 1\x00\n")) == [  # the parser gives no line for a null byte
        ("ERROR", "syntax", TOOLS, 0, "does not parse: source code string cannot contain null bytes", "restore the file")
    ]


def test_a_file_that_does_not_parse_keeps_its_line_rules_but_not_the_ones_needing_its_tree():
    """Whether a switch is guarded or a hub ID is demo code needs the parsed file: not judged without it."""
    code = (
        "x = torch.cuda.current_device()\ntorch.backends.cuda.enable_math_sdp(False)\n"
        'vae = load_vae("Qwen/Qwen-Image-Edit-2509")\ndef broken(:\n'
    )
    assert [(f.rule, f.line) for f in check_source(TOOLS, code)] == [("cuda-call", 1), ("syntax", 4)]
    assert [(f.rule, f.line) for f in check_source(TOOLS, code.replace("def broken(:", "pass"))] == [
        ("cuda-call", 1),
        ("cuda-sdp-switch", 2),
        ("hub-id", 3),
    ]


@pytest.mark.parametrize(
    "code, warned",
    [
        (
            'torch.backends.cuda.enable_math_sdp(False)\nif d.type == "cuda":\n    torch.backends.cuda.enable_flash_sdp(False)\n',
            [1],
        ),
        (
            'if d.type == "cuda":\n    torch.backends.cuda.enable_flash_sdp(False)\ntorch.backends.cuda.enable_math_sdp(False)\n',
            [3],
        ),
        ('if d.type == "cuda":\n    if flag:\n        x = 1\n        torch.backends.cuda.enable_math_sdp(False)\n', []),
        ('if flag:\n    torch.backends.cuda.enable_math_sdp(False)\nelif d.type == "cuda":\n    pass\n', [2]),
    ],
)
def test_a_cuda_guard_covers_its_block_and_nothing_around_it(code, warned):
    assert [f.line for f in check_source(TOOLS, code)] == warned
    assert {f.rule for f in check_source(TOOLS, code)} <= {"cuda-sdp-switch"}


def test_a_file_that_is_not_utf8_is_checked_not_a_crash(adapted):
    path = adapted / TOOLS
    path.write_bytes(path.read_bytes() + b"# caf\xe9\nx = torch.cuda.current_device()\n")
    line = path.read_bytes().count(b"\n")
    assert findings(adapted) == [("ERROR", "cuda-call", TOOLS, line)]


@pytest.mark.parametrize("broken", [BASE, TRAINER, CONFIG])
def test_a_structure_file_that_does_not_parse_is_one_syntax_finding(adapted, broken):
    line = append(adapted, broken, "def broken(:\n")
    assert findings(adapted) == [("ERROR", "syntax", broken, line)]


@pytest.mark.parametrize(
    "body, offset",
    [
        ('def pick(d):\n    """doc"""\n    if d.type == "cuda":\n        return 1\n', 2),
        ('def pick(d):\n    return d.type  ==  "cuda"\n', 1),
        ('def pick(d):\n    if d.type == "cuda" or d.type == "xpu":\n        return 1\n', None),
        ('def pick(d):\n    return d.type == "cpu"\n', None),
        ('class K:\n    def pick(self, d):\n        x = 1\n        return d.type == "cuda"\n', 3),
    ],
)
def test_a_function_that_checks_for_cuda_with_no_xpu_branch(adapted_texts, body, offset):
    base = adapted_texts[TOOLS]
    line = base.count("\n") + 1
    got = _whole(check_source(TOOLS, base + body))
    name = "pick"
    assert got == (
        []
        if offset is None
        else [
            (
                "ERROR",
                "device-type-cuda-only",
                TOOLS,
                line + offset,
                f"{name}() checks for CUDA devices with no XPU branch",
                "add an xpu branch (run `aipc-env adapt CLONE` (it applies the runbook's step-5 edits))",
            )
        ]
    )


def test_no_helpers_module_is_an_error(adapted):
    (adapted / "src/qflux/utils/device_utils.py").unlink()
    assert _whole(check_clone(adapted).findings) == [
        (
            "ERROR",
            "no-device-helpers",
            "src/qflux/utils/device_utils.py",
            0,
            "the device-agnostic helpers module is missing",
            "run `aipc-env adapt CLONE` (it applies the runbook's step-5 edits)",
        )
    ]


def test_check_clone_reads_every_source_file_with_its_clone_path(adapted):
    deep = "src/qflux/models/sub dir/extra.py"
    append(adapted, deep, "import torch\nx = torch.cuda.current_device()\n")
    assert findings(adapted) == [("ERROR", "cuda-call", deep, 2)]
    append(adapted, "src/qflux/models/notes.txt", "torch.cuda.current_device()\n")  # only .py files are code
    assert findings(adapted) == [("ERROR", "cuda-call", deep, 2)]


def structure(texts: dict[str, str], rel: str | None = None, old: str = "", new: str = "") -> list[tuple]:
    """check_structure over the adapted texts, `old` replaced by `new` (every occurrence) in `rel`."""
    if rel is not None:
        assert old in texts[rel], (rel, old)
        texts = {**texts, rel: texts[rel].replace(old, new)}
    return [(f.level, f.rule, f.file, f.line) for f in check_structure(texts)]


@pytest.mark.parametrize(
    "seed_text, warned",
    [
        ("def seed_everything(seed):\n    torch.manual_seed(seed)\n", True),
        ("def seed_everything(seed):\n    torch.xpu.manual_seed_all(seed)\n", False),
        ("def seed_everything(seed):\n    device_manual_seed_all(seed)\n", False),
    ],
)
def test_the_seed_rule_takes_either_an_xpu_seed_or_the_helper(adapted_texts, seed_text, warned):
    texts = {**adapted_texts, SEED: "import torch\n\n\n" + seed_text}
    assert structure(texts) == ([("WARN", "no-xpu-seed", SEED, 1)] if warned else [])


def _line_of(text: str, needle: str) -> int:
    (number,) = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return number


def _node(text: str, kind, name: str):
    return next(n for n in ast.walk(ast.parse(text)) if isinstance(n, kind) and n.name == name)


def test_the_adapted_texts_break_no_structure_rule(adapted_texts):
    assert structure(adapted_texts) == []


def test_structure_rules_each_found_when_their_edit_is_missing(adapted_texts):
    """Each structural edit taken out of the adapted texts, one rule at a time."""
    t = adapted_texts
    assert structure(t, BASE, "checkpoints_total_limit", "checkpoints_kept") == [
        ("WARN", "checkpoints-total-limit-unused", BASE, 1)
    ]
    assert structure(t, BASE, "lora_adapter_metadata", "adapter_meta") == [
        ("WARN", "lora-without-metadata", BASE, _line_of(t[BASE], "def save_lora("))
    ]
    assert structure(t, TRAINER, "torch.autocast(", "torch.no_grad(") == [
        ("WARN", "no-nf4-autocast", TRAINER, _line_of(t[TRAINER], "def _compute_loss("))
    ]
    assert structure(t, TRAINER, "quantize_type", "quant_kind") == [("ERROR", "nf4-not-wired", TRAINER, 1)]
    assert structure(t, "src/qflux/models/load_model.py", "nf4", "q4") == [
        ("ERROR", "no-nf4-loader", "src/qflux/models/load_model.py", 1)
    ]


def test_the_epoch_loop_and_spawn_rules_read_the_fit_method(adapted_texts):
    base = adapted_texts[BASE]
    fit = _node(base, ast.FunctionDef, "fit")
    seg = ast.get_source_segment(base, fit)
    loop_at = fit.lineno + seg[: seg.index("for epoch in range(")].count("\n")
    loop_body = seg[seg.index("for epoch in range(") :]
    assert structure(adapted_texts, BASE, seg, seg.replace(loop_body, loop_body.replace("max_train_steps", "max_steps"))) == [
        ("WARN", "no-epoch-break", BASE, loop_at)
    ]
    assert "except RuntimeError" in seg and "mp.set_start_method(" in seg
    assert structure(adapted_texts, BASE, seg, seg.replace("except RuntimeError", "except ValueError")) == [
        ("WARN", "spawn-unguarded", BASE, fit.lineno)
    ]


def test_the_max_steps_guard_is_read_in_train_epoch_only(adapted_texts):
    base = adapted_texts[BASE]
    fn = _node(base, ast.FunctionDef, "train_epoch")
    seg = ast.get_source_segment(base, fn)
    assert structure(adapted_texts, BASE, seg, seg.replace("max_train_steps", "max_steps")) == [
        ("ERROR", "no-max-steps-guard", BASE, fn.lineno)
    ]


def test_the_config_schema_rules(adapted_texts, upstream_pristine):
    text = adapted_texts[CONFIG]
    model_cfg = _node(text, ast.ClassDef, "ModelConfig")
    seg = ast.get_source_segment(text, model_cfg)
    assert structure(adapted_texts, CONFIG, seg, seg.replace("quantize_type", "quant_kind")) == [
        ("ERROR", "no-nf4-schema", CONFIG, model_cfg.lineno)
    ]
    validator = '    @field_validator("batch_size", "num_workers")\n'
    assert validator in (upstream_pristine / CONFIG).read_text(encoding="utf-8")
    adapted_validator = '    @field_validator("batch_size")\n'
    assert text.count(adapted_validator) == 1
    assert structure(adapted_texts, CONFIG, adapted_validator, validator) == [
        ("ERROR", "num-workers-positive", CONFIG, _line_of(text, adapted_validator.strip()))
    ]
    assert structure(adapted_texts, CONFIG, adapted_validator, '    @field_validator("batch_size", "max_workers")\n') == []
    assert structure({**adapted_texts, CONFIG: "x = 1\n"}) == []  # neither ModelConfig nor DataConfig


def test_methods_the_structure_rules_read_may_be_absent(adapted_texts):
    assert structure({**adapted_texts, BASE: "x = 1\n", TRAINER: "y = 2  # quantize_type\n"}) == [
        ("WARN", "checkpoints-total-limit-unused", BASE, 1)
    ]


@pytest.mark.parametrize("missing", [BASE, TRAINER, CONFIG, SEED, "src/qflux/models/load_model.py"])
def test_a_file_the_structure_rules_read_may_be_absent(upstream_pristine, missing):
    """Upstream's own texts (every structure rule fires on them), one file left out: its rules fall silent,
    the others still fire."""
    texts = {
        str(p.relative_to(upstream_pristine)): p.read_text(encoding="utf-8")
        for p in sorted((upstream_pristine / "src/qflux").rglob("*.py"))
    }
    everything = structure(texts)
    assert {f[2] for f in everything} == {BASE, TRAINER, CONFIG, SEED, "src/qflux/models/load_model.py"}
    without = structure({k: v for k, v in texts.items() if k != missing})
    assert without == [f for f in everything if f[2] != missing]


ACCEL = "accelerate_config_xpu.yaml"
RESTORE = "restore the file (run `aipc-env adapt CLONE` (it applies the runbook's step-5 edits))"


@pytest.mark.parametrize(
    "text, expected",
    [
        (None, [("WARN", "no-xpu-accelerate-config", 0)]),
        ("distributed_type: 'NO'\nnum_processes: 1\n", []),
        ("distributed_type: 'no'\nmixed_precision: 'BF16'\ndynamo_backend: 'no'\n", []),
        ("distributed_type: [\n", [("ERROR", "accelerate-config", 0)]),
        ("- NO\n", [("ERROR", "accelerate-config", 0)]),
        (
            "num_processes: 1\ndistributed_type: NO\n",
            [("ERROR", "accelerate-config", 2), ("WARN", "accelerate-multi-process", 1)],
        ),
        ("mixed_precision: fp7\n", [("ERROR", "accelerate-config", 1)]),
        ("dynamo_backend: 'warp'\n", [("ERROR", "accelerate-config", 1)]),
        ("distributed_type: 'XPU_ONLY'\n", [("ERROR", "accelerate-config", 1), ("WARN", "accelerate-multi-process", 0)]),
        ("compute_environment: LOCAL_MACHINE\nnum_processes: 2\n", [("WARN", "accelerate-multi-process", 2)]),
        ("distributed_type: 'MULTI_XPU'\nnum_processes: 1\n", [("WARN", "accelerate-multi-process", 2)]),
        ("{}\n", []),
        (
            "{distributed_type: NO, num_processes: 1}\n",
            [("ERROR", "accelerate-config", 0), ("WARN", "accelerate-multi-process", 0)],
        ),
        ('"mixed_precision": fp7\n', [("ERROR", "accelerate-config", 0)]),
    ],
)
def test_the_accelerate_config_by_accelerates_own_enums(tmp_path, text, expected):
    path = tmp_path / ACCEL
    if text is not None:
        path.write_text(text, encoding="utf-8")
    from aipc_env.workers.accelerate_choices import accelerate_choices  # accelerate's enums, read as the worker does

    found = check_accelerate_config(path, accelerate_choices())
    assert [(f.level, f.rule, f.line) for f in found] == expected
    assert all(f.file == ACCEL for f in found)


def test_without_accelerate_only_the_yaml_types_are_checked(tmp_path, monkeypatch):
    """A training env without accelerate: no enum to check against, the unquoted NO is still caught."""
    import sys

    from aipc_env.workers.accelerate_choices import accelerate_choices

    monkeypatch.setitem(sys.modules, "accelerate", None)  # not found, and import accelerate -> ImportError
    none = accelerate_choices()
    assert none.version is None
    path = tmp_path / ACCEL
    path.write_text("mixed_precision: fp7\ndynamo_backend: warp\n", encoding="utf-8")
    assert check_accelerate_config(path, none) == [] and check_accelerate_config(path) == []
    path.write_text("distributed_type: NO\n", encoding="utf-8")
    assert [(f.rule, f.line) for f in check_accelerate_config(path, none)] == [
        ("accelerate-config", 1),
        ("accelerate-multi-process", 0),
    ]


def test_accelerate_config_findings_whole(tmp_path):
    path = tmp_path / ACCEL
    assert _whole(check_accelerate_config(path)) == [
        (
            "WARN",
            "no-xpu-accelerate-config",
            ACCEL,
            0,
            "no single-XPU accelerate config: upstream's accelerate_config.yaml asks for 2 processes on MULTI_GPU",
            "run `aipc-env adapt CLONE` (it applies the runbook's step-5 edits)",
        )
    ]
    path.write_text("- NO\n", encoding="utf-8")
    assert _whole(check_accelerate_config(path)) == [("ERROR", "accelerate-config", ACCEL, 0, "not a mapping", RESTORE)]
    path.write_text("a: [\n", encoding="utf-8")
    ((level, rule, file, line, message, fix),) = _whole(check_accelerate_config(path))
    assert file == ACCEL
    assert (level, rule, line, fix) == ("ERROR", "accelerate-config", 0, RESTORE)
    # libyaml's parser (PyYAML's C extension, which the one reader uses) words it so
    assert message.startswith("not valid YAML at line 2, column 1: did not find expected node content")
    path.write_text("distributed_type: NO\nnum_processes: 2\nmixed_precision: fp7\n", encoding="utf-8")
    from aipc_env.workers.accelerate_choices import accelerate_choices

    assert _whole(check_accelerate_config(path, accelerate_choices())) == [
        (
            "ERROR",
            "accelerate-config",
            ACCEL,
            1,
            "distributed_type is False, not a string (an unquoted NO or no is a YAML boolean): accelerate launch fails",
            "quote it: distributed_type: 'NO'",
        ),
        (
            "ERROR",
            "accelerate-config",
            ACCEL,
            3,
            "mixed_precision: fp7 is not one of accelerate's no, fp8, fp16, bf16",
            "use one of those",
        ),
        (
            "WARN",
            "accelerate-multi-process",
            ACCEL,
            2,
            "more than one process or a distributed backend: an AI PC has one XPU",
            "num_processes: 1, distributed_type: 'NO'",
        ),
    ]


@pytest.mark.parametrize(
    "source",
    [
        "def f():\n    return 1\n",
        "x = 1\r\ndef f(a,\r\n      b):  # ü\r\n    return 'é' + a\r\n",
        "x = 1\rdef f():\r    return 2\r",
        "\f\ndef f():\n    \f\n    return 'ß'\n\nclass C:\n    y = f()  # tail",
        "class C: pass",
    ],
)
def test_segments_are_what_ast_gives(source):
    nodes = [n for n in ast.walk(ast.parse(source)) if getattr(n, "end_lineno", None) is not None]
    assert nodes
    for node in nodes:
        assert _segment(source, node) == ast.get_source_segment(source, node), ast.dump(node)


# ---- planning ----------------------------------------------------------------------------------------------------

PLAN = [  # recorded from 460ba1a; every anchored edit's id also appears in edits/edits.yaml
    ("accelerate_config_xpu.yaml", True, 1),
    ("src/qflux/data/config.py", False, ["device-type-xpu", "schema-nf4", "schema-nf4-type", "schema-num-workers"]),
    ("src/qflux/data/dataset.py", False, ["local-parquet"]),
    ("src/qflux/models/flux2_klein_loader.py", False, ["device_empty_cache x5"]),
    ("src/qflux/models/flux_kontext_loader.py", False, ["device_empty_cache x6"]),
    ("src/qflux/models/load_model.py", False, ["sdpa-text-encoder", "sdpa-transformer"]),
    ("src/qflux/models/quantize.py", False, ["device_empty_cache x2", "device_available x1", "device_capability x1"]),
    (
        BASE,
        False,
        [
            "max-steps-guard",
            "epoch-loop-break",
            "spawn-guard",
            "checkpoints-total-limit",
            "checkpoints-prune",
            "checkpoints-prune-def",
            "lora-metadata",
            "fsdp-sdp-cuda-only",
            "device_empty_cache x2",
        ],
    ),
    ("src/qflux/trainer/flux2_klein_trainer.py", False, ["device_empty_cache x1"]),
    ("src/qflux/trainer/flux_kontext_trainer.py", False, ["device_empty_cache x4", "device_synchronize x1"]),
    ("src/qflux/trainer/qwen_image_edit_plus_trainer.py", False, ["plus-local-paths", "plus-nf4-load", "device_empty_cache x1"]),
    (
        TRAINER,
        False,
        ["local-paths", "nf4-load", "nf4-autocast", "device_empty_cache x7", "device_synchronize x1", "device_context x1"],
    ),
    ("src/qflux/trainer/validation.py", False, ["device_empty_cache x1", "device_synchronize x1"]),
    ("src/qflux/utils/device_utils.py", True, 1),
    ("src/qflux/utils/logger.py", False, ["torchvision-lazy", "torchvision-lazy-calls", "torchvision-lazy-grid"]),
    ("src/qflux/utils/lora_utils.py", False, ["device_empty_cache x1", "device_synchronize x1"]),
    ("src/qflux/utils/model_compare.py", False, ["device_empty_cache x1"]),
    ("src/qflux/utils/nf4.py", True, 1),
    (SEED, False, ["device_manual_seed_all x1"]),
]


def test_the_plan_of_the_pristine_clone(pristine):
    before = tree(pristine)
    plan = plan_adaptation(pristine)
    got = [(p.path, p.pristine is None, len(p.edits) if p.pristine is None else p.edits) for p in plan.files]
    assert got == PLAN
    for item in plan.files:
        if item.pristine is None:
            assert item.edits[0].startswith("create (") and not (pristine / item.path).exists()
        else:
            assert sha(item.pristine) == before[item.path] and item.adapted != item.pristine
    seed = next(p for p in plan.files if p.path == SEED).adapted.decode()
    assert "torch.cuda" not in seed and "device_manual_seed_all(seed)" in seed
    assert "import torch\nfrom qflux.utils.device_utils import device_manual_seed_all  # aipc-env\n" in seed
    assert tree(pristine) == before  # planning reads only


ANOTHER_COMMIT = "this clone is another upstream commit; update aipc-env"


def _refused(clone: Path, message: str, path: str, fix: str) -> None:
    """apply refuses with exactly this message, path and fix, and the clone is as it was."""
    before = tree(clone)
    with pytest.raises(AnchorMismatch) as info:
        apply_adaptation(clone, **QUIET)
    assert (info.value.message, info.value.path, info.value.fix) == (message, path, fix)
    assert info.value.exit_code == 1
    assert tree(clone) == before and not (clone / STATE_DIR).exists()


def test_not_a_clone_is_refused(tmp_path):
    for call in (plan_adaptation, check_clone, apply_adaptation):
        with pytest.raises(InputError) as info:
            call(tmp_path)
        assert (info.value.message, info.value.path, info.value.fix) == (
            f"{tmp_path} has no src/qflux package",
            str(tmp_path),
            "point at a clone of tsiendragon/qwen-image-finetune (its root folder)",
        )


def test_a_file_the_adaptation_creates_already_upstream_is_refused(pristine):
    append(pristine, "src/qflux/utils/nf4.py", "x = 1\n")
    _refused(
        pristine,
        "src/qflux/utils/nf4.py already exists upstream: this clone is not the upstream the adaptation was written for",
        "src/qflux/utils/nf4.py",
        "adapt a clone of 460ba1a, or update aipc-env",
    )


def test_a_missing_anchor_file_is_refused(pristine):
    (pristine / "src/qflux/data/dataset.py").unlink()
    _refused(
        pristine,
        "anchor file src/qflux/data/dataset.py does not exist",
        "src/qflux/data/dataset.py",
        "this clone is another upstream layout; adapt a clone of 460ba1a",
    )


def test_a_file_that_is_not_utf8_is_refused(pristine):
    path = pristine / SEED
    path.write_bytes(path.read_bytes() + b"# caf\xe9\n")
    _refused(
        pristine,
        "src/qflux/utils/seed.py is not UTF-8 (invalid continuation byte)",
        SEED,
        "restore it from git (git checkout -- src/qflux/utils/seed.py): upstream's files are UTF-8",
    )


@pytest.mark.parametrize("times, ok", [(2, False), (3, True), (4, False)])
def test_an_anchor_must_occur_exactly_as_often_as_stated(pristine, times, ok):
    """torchvision-lazy-calls is stated to occur 3 times in logger.py: 2 and 4 are refused."""
    from aipc_env.qflux.patches import PATCHES

    (patch,) = [p for p in PATCHES if p.id == "torchvision-lazy-calls"]
    assert patch.count == 3
    path = pristine / patch.path
    text = path.read_text(encoding="utf-8")
    at = text.index(patch.old)
    if times == 2:
        text = text[:at] + text[at + len(patch.old) :]
    elif times == 4:
        text = text + "\n" + patch.old
    path.write_text(text, encoding="utf-8")
    if ok:
        assert [p.edits for p in plan_adaptation(pristine).files if p.path == patch.path] == [
            ["torchvision-lazy", "torchvision-lazy-calls", "torchvision-lazy-grid"]
        ]
    else:
        _refused(
            pristine,
            f"anchor 'torchvision-lazy-calls' ('torchvision.utils.make_grid(') occurs {times} "
            f"time(s) in {LOGGER}, expected 3: nothing was changed",
            LOGGER,
            "this clone is another upstream commit; adapt a clone of 460ba1a, or update aipc-env",
        )


def test_the_helpers_import_goes_after_the_first_torch_import(pristine):
    append(
        pristine,
        TOOLS,
        "\ndef flush(x):\n    torch.cuda.empty_cache()\n    x.device_synchronize()\n"
        "    # torch.cuda.synchronize() is not needed\n",
    )
    text = (pristine / TOOLS).read_text(encoding="utf-8")
    (item,) = [p for p in plan_adaptation(pristine).files if p.path == TOOLS]
    assert item.edits == ["device_empty_cache x1", "device_synchronize x1"]
    at = adapt.import_anchor(text)
    expected = (
        (text[:at] + "from qflux.utils.device_utils import device_empty_cache  # aipc-env\n" + text[at:])
        .replace("torch.cuda.empty_cache()", "device_empty_cache()")
        .replace("# torch.cuda.synchronize()", "# device_synchronize()")
    )
    assert item.adapted.decode() == expected


def test_a_file_that_defines_the_helper_itself_gets_no_import(pristine):
    append(pristine, TOOLS, "\ndef device_empty_cache():\n    torch.cuda.empty_cache()\n")
    (item,) = [p for p in plan_adaptation(pristine).files if p.path == TOOLS]
    assert "from qflux.utils.device_utils" not in item.adapted.decode()


def test_a_file_with_a_cuda_call_and_no_torch_import_is_refused(pristine):
    append(pristine, "src/qflux/utils/extra.py", "def flush():\n    torch.cuda.empty_cache()\n")
    _refused(
        pristine,
        "src/qflux/utils/extra.py uses torch.cuda but has no top-level `import torch` line to anchor the helpers import on",
        "src/qflux/utils/extra.py",
        ANOTHER_COMMIT,
    )


def test_the_config_module_cannot_take_the_helpers(pristine):
    append(pristine, CONFIG, "\ndef flush():\n    torch.cuda.empty_cache()\n")
    _refused(
        pristine,
        "src/qflux/data/config.py would need the device helpers, which it cannot import (its package imports it back)",
        CONFIG,
        "update aipc-env",
    )


def test_unknown_cuda_calls_are_counted_and_the_first_three_named(pristine):
    first = "src/qflux/models/extra.py"
    append(pristine, first, "import torch\n\nfree = torch.cuda.mem_get_info()\n")
    line = append(
        pristine, TOOLS, "b = torch.cuda.current_device()\nc = torch.cuda.device_count()\nd = torch.cuda.ipc_collect()\n"
    )
    _refused(
        pristine,
        f"4 torch.cuda use(s) the adaptation does not know: {first}:3: free = "
        f"torch.cuda.mem_get_info(); {TOOLS}:{line}: b = torch.cuda.current_device(); "
        f"{TOOLS}:{line + 1}: c = torch.cuda.device_count()",
        first,
        ANOTHER_COMMIT,
    )


def test_a_helper_call_in_a_comment_needs_no_import(pristine):
    """Only code before a line's first # counts (the file has no `import torch`: an import would be refused)."""
    append(pristine, "src/qflux/utils/extra.py", "x = 1  # torch.cuda.empty_cache() was here # and more\n")
    (item,) = [p for p in plan_adaptation(pristine).files if p.path == "src/qflux/utils/extra.py"]
    assert item.adapted == b"x = 1  # device_empty_cache() was here # and more\n"


def test_a_helper_call_at_the_start_of_a_line_needs_the_import(pristine):
    append(pristine, "src/qflux/utils/extra.py", "import torch\ntorch.cuda.empty_cache()\n")
    (item,) = [p for p in plan_adaptation(pristine).files if p.path == "src/qflux/utils/extra.py"]
    assert item.adapted == (
        b"import torch\nfrom qflux.utils.device_utils import device_empty_cache  # aipc-env\ndevice_empty_cache()\n"
    )


# ---- apply, state, revert ----------------------------------------------------------------------------------------


def test_apply_writes_backups_journal_and_logs(pristine, upstream_pristine):
    before = tree(pristine)
    logged: list[str] = []
    written = apply_adaptation(pristine, log=logged.append)
    assert written == [p for p, *_ in PLAN]
    assert (
        logged[0] == "adapt: accelerate_config_xpu.yaml: create (a single-device accelerate config (the shipped "
        "one is MULTI_GPU x2, bf16, inductor))"
    )
    assert logged[-1] == f"adapt: {SEED}: device_manual_seed_all x1" and len(logged) == len(PLAN)
    assert f"adapt: {LOGGER}: torchvision-lazy, torchvision-lazy-calls, torchvision-lazy-grid" in logged
    backups = pristine / STATE_DIR / "backup"
    assert {str(p.relative_to(backups)): sha(p.read_bytes()) for p in backups.rglob("*") if p.is_file()} == {
        p: before[p] for p, created, _ in PLAN if not created
    }
    manifest = load_manifest(pristine)
    assert manifest.state == "applied" and manifest.patch_set == PATCH_SET
    for rec in manifest.files:
        data = (pristine / rec.path).read_bytes()
        assert rec.adapted_sha256 == sha(data)
        assert rec.pristine_sha256 == before.get(rec.path)
    path = pristine / STATE_DIR / "manifest.json"
    path.write_text(path.read_text(encoding="utf-8").replace(manifest.when, "2001-02-03T04:05:06+00:00"), encoding="utf-8")
    assert apply_adaptation(pristine, **QUIET) == []  # already adapted: not even the manifest is rewritten
    assert load_manifest(pristine).when == "2001-02-03T04:05:06+00:00"


@pytest.mark.parametrize("change", ["applying", "old-patch-set"])
def test_an_unfinished_or_older_manifest_is_completed_without_rewriting_files(adapted, change):
    path = adapted / STATE_DIR / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    if change == "applying":
        data["state"] = "applying"
    else:
        data["patch_set"] = PATCH_SET - 1
    path.write_text(json.dumps(data), encoding="utf-8")
    assert not is_adapted(adapted)
    before = tree(adapted)
    assert apply_adaptation(adapted, **QUIET) == []
    assert tree(adapted) == before and is_adapted(adapted)
    manifest = load_manifest(adapted)
    assert manifest.state == "applied" and manifest.patch_set == PATCH_SET


def test_is_adapted_follows_every_recorded_file(adapted, pristine):
    assert is_adapted(adapted) and not is_adapted(pristine)
    (adapted / "src/qflux/utils/nf4.py").unlink()
    assert not is_adapted(adapted)
    shutil.copy(pristine / SEED, adapted / SEED)
    assert not is_adapted(adapted)


def test_a_file_restored_by_hand_is_adapted_again_from_its_backup(adapted, upstream_pristine):
    adapted_seed = (adapted / SEED).read_bytes()
    shutil.copy(upstream_pristine / SEED, adapted / SEED)
    assert apply_adaptation(adapted, **QUIET) == [SEED]
    assert (adapted / SEED).read_bytes() == adapted_seed and is_adapted(adapted)


def test_a_file_edited_after_adapting_stops_a_new_apply(adapted):
    append(adapted, SEED, "# mine\n")
    path = adapted / STATE_DIR / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["patch_set"] = PATCH_SET - 1  # a newer aipc-env re-adapting
    path.write_text(json.dumps(data), encoding="utf-8")
    before = tree(adapted)
    with pytest.raises(
        AipcError,
        match=r"^src/qflux/utils/seed\.py was edited after the adaptation \(its content is "
        r"neither upstream's nor the adapted one\); nothing was changed$",
    ) as info:
        apply_adaptation(adapted, **QUIET)
    assert info.value.exit_code == 1 and tree(adapted) == before and info.value.path == str(adapted / SEED)
    assert info.value.fix == "keep your edits elsewhere, then `aipc-env adapt --revert --force` and adapt again"


def test_a_damaged_backup_stops_planning(adapted):
    backup = adapted / STATE_DIR / "backup" / SEED
    backup.write_bytes(backup.read_bytes() + b"#\n")
    with pytest.raises(InputError, match=r"^the backup of src/qflux/utils/seed\.py is missing or damaged$") as info:
        plan_adaptation(adapted)
    assert info.value.path == str(backup) and info.value.fix == adapt.AdaptManifest.FIX
    backup.unlink()
    with pytest.raises(InputError, match=r"the backup of src/qflux/utils/seed\.py is missing or damaged"):
        plan_adaptation(adapted)


def test_a_failed_readapt_rolls_back_to_pristine_and_keeps_the_journal(adapted, adapted_tree, upstream_pristine, monkeypatch):
    """A clone adapted before, its first file (a created one) deleted by hand, and the next apply fails writing it:
    every journaled file holding its adapted bytes goes back to pristine (all or nothing; the missing file is
    skipped, not a stop), and the state folder stays (its backups are the only pristine copies left); the next
    apply finishes the adaptation."""
    first = "accelerate_config_xpu.yaml"
    (adapted / first).unlink()
    real = adapt.atomic_write_bytes

    def failing(path, data, **kw):
        if Path(path).name == first:
            raise OSError(28, "No space left on device")
        return real(path, data, **kw)

    monkeypatch.setattr(adapt, "atomic_write_bytes", failing)
    with pytest.raises(OSError, match="No space left on device"):
        apply_adaptation(adapted, **QUIET)
    assert tree(adapted) == tree(upstream_pristine)
    assert (adapted / STATE_DIR / "backup" / SEED).is_file() and load_manifest(adapted).state == "applying"
    monkeypatch.setattr(adapt, "atomic_write_bytes", real)
    assert len(apply_adaptation(adapted, **QUIET)) == len(PLAN)
    assert tree(adapted) == tree(adapted_tree) and is_adapted(adapted)


def test_a_failed_first_apply_leaves_no_state_and_names_its_error(pristine, monkeypatch):
    before = tree(pristine)
    real = adapt.atomic_write_bytes
    written: list[str] = []

    def failing(path, data, **kw):
        if STATE_DIR not in Path(path).parts:
            written.append(Path(path).name)
            if Path(path).name == "nf4.py":  # created files before and after it in the plan
                raise OSError(28, "No space left on device")
        return real(path, data, **kw)

    monkeypatch.setattr(adapt, "atomic_write_bytes", failing)
    with pytest.raises(OSError, match="No space left on device"):
        apply_adaptation(pristine, **QUIET)
    assert written.index("nf4.py") == len(PLAN) - 2  # second to last: created files before and after it
    assert tree(pristine) == before and not (pristine / STATE_DIR).exists()


def test_a_state_folder_the_os_will_not_remove_keeps_the_original_error(pristine, monkeypatch):
    """A failed first apply removes its state folder; where the OS refuses (a Windows lock, stood in for by os.rmdir
    refusing that folder) the error the user sees is still the one that stopped the apply."""
    import os

    real_write, real_rmdir = adapt.atomic_write_bytes, os.rmdir

    def failing(path, data, **kw):
        if Path(path).name == "seed.py" and STATE_DIR not in Path(path).parts:
            raise OSError(28, "No space left on device")
        return real_write(path, data, **kw)

    def locked(path, *args, **kw):
        if str(path).endswith(STATE_DIR):
            raise PermissionError(13, "The process cannot access the file because it is being used", str(path))
        return real_rmdir(path, *args, **kw)

    monkeypatch.setattr(adapt, "atomic_write_bytes", failing)
    monkeypatch.setattr(os, "rmdir", locked)
    with pytest.raises(OSError, match="No space left on device"):
        apply_adaptation(pristine, **QUIET)
    monkeypatch.setattr(os, "rmdir", real_rmdir)
    assert (pristine / STATE_DIR).is_dir()  # left behind, emptied: the next apply starts afresh
    assert list((pristine / STATE_DIR).iterdir()) == []


@pytest.mark.parametrize("instant", ["adapt:after-backup", "adapt:after-journal", "adapt:after-replace", "adapt:before-applied"])
def test_ctrl_c_at_each_instant_of_apply_rolls_back_in_process(pristine, adapted_tree, monkeypatch, instant):
    """A real SIGINT delivered to this process at each named instant (tests/test_adapt.py does it to a CLI
    process, with SIGKILL too)."""
    before = tree(pristine)
    monkeypatch.setenv("AIPC_ENV_INTERRUPT_AT", instant)
    with pytest.raises(KeyboardInterrupt):
        apply_adaptation(pristine, **QUIET)
    assert tree(pristine) == before  # no file of the clone changed, or each was rolled back
    state = {"adapt:after-backup": "backups only", "adapt:after-journal": "applying"}.get(instant, "none")
    if state == "none":  # stopped while replacing: rolled back, nothing kept
        assert not (pristine / STATE_DIR).exists()
    else:  # stopped before the first replace: the backups (and the journal) stay for the next run
        assert (pristine / STATE_DIR / "backup" / SEED).is_file()
        manifest = load_manifest(pristine)
        assert (manifest.state if manifest else "backups only") == state
    assert apply_adaptation(pristine, **QUIET) and tree(pristine) == tree(adapted_tree)


def test_ctrl_c_during_revert_is_finished_by_the_next_revert(adapted, upstream_pristine, monkeypatch):
    monkeypatch.setenv("AIPC_ENV_INTERRUPT_AT", "adapt:revert-after-restore")
    with pytest.raises(KeyboardInterrupt):
        revert_adaptation(adapted, **QUIET)
    assert tree(adapted) != tree(upstream_pristine) and load_manifest(adapted) is not None
    revert_adaptation(adapted, **QUIET)
    assert tree(adapted) == tree(upstream_pristine) and not (adapted / STATE_DIR).exists()


def test_files_an_older_aipc_env_adapted_are_adapted_again(adapted, adapted_tree):
    """A clone adapted by an older patch set: a file holding that set's adapted bytes (recorded in its manifest) is
    replaced, not taken for a user's edit."""
    older = (adapted / SEED).read_bytes() + b"# an older patch set\n"
    (adapted / SEED).write_bytes(older)
    path = adapted / STATE_DIR / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["patch_set"] = PATCH_SET - 1
    next(f for f in data["files"] if f["path"] == SEED)["adapted_sha256"] = sha(older)
    path.write_text(json.dumps(data), encoding="utf-8")
    assert apply_adaptation(adapted, **QUIET) == [SEED]
    assert tree(adapted) == tree(adapted_tree) and is_adapted(adapted)


def test_revert_restores_every_byte_and_names_what_it_did(adapted, upstream_pristine):
    logged: list[str] = []
    done = revert_adaptation(adapted, log=logged.append)
    assert done == [p for p, *_ in PLAN]
    assert tree(adapted) == tree(upstream_pristine) and not (adapted / STATE_DIR).exists()
    assert "adapt: removed accelerate_config_xpu.yaml (created by the adaptation)" in logged
    assert f"adapt: restored {SEED}" in logged


def test_revert_skips_files_already_pristine_or_removed(adapted, upstream_pristine):
    shutil.copy(upstream_pristine / SEED, adapted / SEED)
    (adapted / "src/qflux/utils/nf4.py").unlink()
    done = revert_adaptation(adapted, **QUIET)
    assert SEED not in done and "src/qflux/utils/nf4.py" not in done and len(done) == len(PLAN) - 2
    assert tree(adapted) == tree(upstream_pristine)


def test_revert_without_a_manifest_is_refused(pristine):
    with pytest.raises(InputError, match=r"was not adapted by aipc-env \(no \.aipc-adapt/manifest\.json\)$") as info:
        revert_adaptation(pristine, **QUIET)
    assert info.value.path == str(pristine) and info.value.fix == "nothing to revert"


def test_revert_refuses_edited_files_unless_forced(adapted, upstream_pristine):
    append(adapted, SEED, "# mine\n")
    append(adapted, LOGGER, "# mine too\n")
    before = tree(adapted)
    with pytest.raises(AipcError, match=rf"^edited after the adaptation: {LOGGER}, {SEED}; nothing was reverted$") as info:
        revert_adaptation(adapted, **QUIET)
    assert tree(adapted) == before and info.value.exit_code == 1 and info.value.path == str(adapted)
    assert info.value.fix == "copy your edits elsewhere, then `aipc-env adapt CLONE --revert --force`"
    revert_adaptation(adapted, force=True, **QUIET)
    assert tree(adapted) == tree(upstream_pristine)


@pytest.mark.parametrize("damage", ["changed", "missing", "link"])
def test_revert_checks_every_backup_first(adapted, damage):
    backup = adapted / STATE_DIR / "backup" / SEED
    if damage == "changed":
        backup.write_bytes(backup.read_bytes() + b"#\n")
    elif damage == "missing":
        backup.unlink()
    else:
        real = backup.with_name("real.py")
        backup.rename(real)
        backup.symlink_to(real)
    before = tree(adapted)
    with pytest.raises(InputError, match=rf"^the backup of {SEED} is missing or damaged; nothing was reverted$") as info:
        revert_adaptation(adapted, **QUIET)
    assert tree(adapted) == before and info.value.path == str(adapted / STATE_DIR)
    assert info.value.fix == adapt.AdaptManifest.FIX


def test_revert_names_every_damaged_backup(adapted):
    for rel in (LOGGER, SEED):
        (adapted / STATE_DIR / "backup" / rel).unlink()
    with pytest.raises(
        InputError,
        match=rf"^the backup of {LOGGER}, {SEED} is missing or damaged; nothing was "
        r"reverted$",
    ):
        revert_adaptation(adapted, **QUIET)


def test_line_endings_are_kept_both_ways(pristine, adapted_tree, upstream_pristine):
    """A CRLF checkout (git on Windows): anchors match through CRLF and the adapted file keeps CRLF, byte for byte
    the LF adaptation with CRLF line ends; revert gives back the CRLF bytes."""
    crlf = (pristine / SEED).read_bytes().replace(b"\n", b"\r\n")
    (pristine / SEED).write_bytes(crlf)
    apply_adaptation(pristine, **QUIET)
    assert (pristine / SEED).read_bytes() == (adapted_tree / SEED).read_bytes().replace(b"\n", b"\r\n")
    base = (upstream_pristine / BASE).read_bytes()
    assert (pristine / BASE).read_bytes() == (adapted_tree / BASE).read_bytes() != base  # LF files stay LF
    revert_adaptation(pristine, **QUIET)
    assert (pristine / SEED).read_bytes() == crlf


def test_a_state_folder_that_leads_outside_is_refused(pristine, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (pristine / STATE_DIR).symlink_to(outside)
    with pytest.raises(InputError, match=r"^\.aipc-adapt leads outside the clone \(to .*elsewhere\)$") as info:
        apply_adaptation(pristine, **QUIET)
    assert info.value.path == str(pristine / STATE_DIR)
    assert info.value.fix == "replace the link with the file itself; adapt never edits files outside the clone"
    with pytest.raises(InputError, match=r"\.aipc-adapt leads outside the clone"):
        revert_adaptation(pristine, **QUIET)
    assert list(outside.iterdir()) == []


def test_accelerates_enums_read_from_its_source_are_what_its_imported_enums_give():
    """The worker reads accelerate's enum values from the installed accelerate's own source (no torch import); they
    are exactly what the imported enums list, in their order, and the version is the installed one."""
    from aipc_env.workers import accelerate_choices as worker

    read = worker.accelerate_choices()
    asked = worker._imported()
    assert read == asked and read.version is not None and "MULTI_XPU" in read.distributed_type


ENUM_SOURCE = """
import enum
class DistributedType(str, enum.Enum):
    \"\"\"doc\"\"\"
    NO = "NO"
    MULTI_XPU = "MULTI_XPU"
    ALIAS = "NO"
    def describe(self):
        return self.value
class PrecisionType(str, BaseEnum):
    NO = "no"
    BF16 = "bf16"
class DynamoBackend(str, BaseEnum):
    NO = "NO"
"""


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ((), {"distributed_type": ["NO", "MULTI_XPU"], "mixed_precision": ["no", "bf16"], "dynamo_backend": ["NO"]}),
        (('    BF16 = "bf16"', "    BF16 = _value('bf16')"), None),  # a value that is not a literal
        (('    BF16 = "bf16"', '    _ignore_ = "bf16"'), None),  # a name enum treats specially
        (('    BF16 = "bf16"', '    BF16: str = "bf16"'), None),
        (('    BF16 = "bf16"', '    BF16 = FP16 = "bf16"'), None),
        (("class DynamoBackend", "class Dynamo"), None),  # an enum missing
        (('DynamoBackend(str, BaseEnum):\n    NO = "NO"', "DynamoBackend(str, BaseEnum):\n    pass"), None),  # no members
        (("import enum", "import enum("), None),  # not Python
    ],
)
def test_enums_are_read_from_source_only_in_their_plain_shape(change, expected):
    from aipc_env.workers.accelerate_choices import choices_from_source

    source = ENUM_SOURCE.replace(*change) if change else ENUM_SOURCE
    assert change == () or source != ENUM_SOURCE
    assert choices_from_source(source) == expected


def test_a_source_not_of_the_plain_shape_asks_the_imported_enums(monkeypatch):
    from aipc_env.workers import accelerate_choices as worker

    monkeypatch.setattr(worker, "choices_from_source", lambda _source: None)
    asked = worker.accelerate_choices()
    assert asked == worker._imported() and asked.version is not None
    monkeypatch.setattr(worker, "MAX_SOURCE_BYTES", 10)  # past the bound: not parsed at all
    monkeypatch.setattr(worker, "choices_from_source", lambda _source: pytest.fail("parsed past the bound"))
    assert worker.accelerate_choices() == asked
