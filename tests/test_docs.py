"""The words a user reads: the command reference equals the argparse tree (a new option without its doc fails), the
getting-started outputs are the tool's own, every runbook reference (`§N`, "runbook step N") resolves through
docs/runbook-map.md, and no shipped text names an internal document. In-process and torch-free; the site itself is
built with `mkdocs build --strict` in .ci/run (nox -s docs)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


# --- the command reference ---------------------------------------------------------------------------------------


def test_the_committed_cli_reference_is_the_parsers():
    gen = _load("gen_cli_reference")
    committed = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert gen.render() == committed, "docs/reference/cli.md is stale: run python docs/gen_cli_reference.py"
    schemas = (ROOT / "docs" / "reference" / "schemas.md").read_text(encoding="utf-8")
    assert gen.render_schemas() == schemas, "docs/reference/schemas.md is stale: run python docs/gen_cli_reference.py"
    assert schemas.count("](../schemas/") == len(list((ROOT / "docs" / "schemas").glob("*.schema.json"))) >= 50


def test_an_option_added_without_its_doc_fails():
    from aipc_env.cli import build_parser

    gen = _load("gen_cli_reference")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    sub.choices["doctor"].add_argument("--brand-new-option", metavar="N", default=3, help="a new knob")
    text = gen.render(parser)
    assert "- `--brand-new-option N` (default: `3`): a new knob" in text
    assert text != (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")


def test_the_reference_is_grouped_by_task_with_an_example_for_every_command():
    gen = _load("gen_cli_reference")
    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[3:] == [f"## {title}" for title, _, _ in gen.GROUPS]  # after the exit codes, the root, the index
    assert "```text\naipc-env train config.yaml --model tiny\n" in text.replace("aipc-env train\n", "")
    assert text.count("**Example") == len(gen.EXAMPLES)


def test_a_command_in_no_group_without_an_example_or_with_a_broken_one_is_refused(monkeypatch):
    from aipc_env.cli import build_parser

    gen = _load("gen_cli_reference")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    sub.add_parser("brand-new", help="a new command")
    with pytest.raises(ValueError, match=r"in no group \['brand-new'\]"):
        gen.render(parser)
    monkeypatch.setitem(gen.EXAMPLES, "verify", ["aipc-env verify --no-such-flag"])
    with pytest.raises(ValueError, match="does not parse"):
        gen.render()
    monkeypatch.setitem(gen.EXAMPLES, "verify", ["aipc-env doctor"])
    with pytest.raises(ValueError, match="is not of `aipc-env verify`"):
        gen.render()
    monkeypatch.delitem(gen.EXAMPLES, "verify")
    with pytest.raises(ValueError, match="`aipc-env verify` has no example"):
        gen.render()


def test_the_reference_lists_every_command_and_exit_code():
    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for command in ("doctor", "train", "fleet bundle", "distill gate", "container run", "dataset validate", "adapt"):
        assert f"`aipc-env {command}`" in text, command
    for code, name in ((0, "OK"), (1, "PROBLEMS"), (2, "USAGE"), (3, "INTERNAL"), (127, "CANNOT_START"), (130, "INTERRUPTED")):
        assert f"| `{code}` | `{name}` |" in text


# --- the getting-started outputs -----------------------------------------------------------------------------------


def test_the_getting_started_outputs_are_the_tools_current_ones():
    gen = _load("gen_outputs")
    for name, text in gen.cheap_outputs().items():
        committed = (ROOT / "docs" / "outputs" / name).read_text(encoding="utf-8")
        assert text == committed, f"docs/outputs/{name} is stale: run python docs/gen_outputs.py"


def test_the_recorded_training_ends_with_its_lora_and_every_snippet_exists():
    recorded = (ROOT / "docs" / "outputs" / "train-default.txt").read_text(encoding="utf-8").splitlines()
    assert recorded[-1].startswith("aipc-env: LoRA ") and recorded[-1].endswith("pytorch_lora_weights.safetensors")
    assert any(line.startswith("step 200/200 loss ") for line in recorded)
    assert recorded[-2].startswith("aipc-env: held-out distance to the targets (16 samples, latent RMS): LoRA ")
    assert "; baselines: base " in recorded[-2] and ", control copied " in recorded[-2] and ", mean target " in recorded[-2]
    assert recorded[-2].endswith(": the LoRA learned the edit (closer than every baseline by at least 20%)")
    included = set()
    for page in (ROOT / "docs").rglob("*.md"):
        included |= set(re.findall(r'--8<-- "([^"]+)"', page.read_text(encoding="utf-8")))
    assert {"outputs/doctor-ready.txt", "outputs/recommend.txt", "outputs/train-default.txt"} <= included
    assert all((ROOT / "docs" / name).is_file() for name in included), included


def test_a_stale_training_recording_is_told_from_a_fresh_one_by_its_shape():
    """The shape a recording is compared by (gen_outputs.training_shape): blind to timings, losses, dates and how
    many heartbeat lines a loaded machine printed; not to a line reworded, added or removed."""
    gen = _load("gen_outputs")
    recorded = (ROOT / "docs" / "outputs" / "train-default.txt").read_text(encoding="utf-8")
    shape = gen.training_shape(recorded)
    reload = next(line for line in recorded.splitlines() if line.startswith("fit: LoRA reloaded through diffusers"))
    start = "fit: starting (importing torch, diffusers and bitsandbytes)\n"
    busier = re.sub(r"\d", "7", recorded).replace(
        start, f"[aipc-env] phase fit: still running (7 s)\n{start}fit: still importing the training stack (5 s)\n"
    )
    assert busier.count("still") > recorded.count("still")
    assert gen.training_shape(busier) == shape
    assert gen.training_shape(recorded.replace(reload, "fit: LoRA reloaded through diffusers: 16 tensors, alpha 8.0")) != shape
    assert gen.training_shape(recorded.replace(f"{reload}\n", "")) != shape


@pytest.mark.slow
def test_the_recorded_training_is_what_the_tool_prints_now(tmp_path: Path):
    """docs/outputs/train-default.txt goes stale when a line of the training changes: a fresh run of the built-in
    default says the same lines (numbers and heartbeats aside)."""
    import difflib
    import sys

    gen = _load("gen_outputs")
    fresh = gen.training_shape(gen.run_training(sys.prefix, tmp_path))
    recorded = gen.training_shape((ROOT / "docs" / "outputs" / "train-default.txt").read_text(encoding="utf-8"))
    diff = "\n".join(difflib.unified_diff(recorded, fresh, "recorded", "now", lineterm="", n=1))
    assert fresh == recorded, f"docs/outputs/train-default.txt is stale (python docs/gen_outputs.py --train PREFIX):\n{diff}"


# --- runbook references --------------------------------------------------------------------------------------------

REF = re.compile(r"§\s?(\d+(?:\.\d+)?)|runbook(?:'s)? step (\d+(?:\.\d+)?)", re.IGNORECASE)


def shipped_files() -> list[Path]:
    """Every file a user reads: the package (help, messages, docstrings, templates), README, docs, launchers,
    environments."""
    files = [ROOT / "README.md", ROOT / "launchers" / "README.md", ROOT / "mkdocs.yml"]
    for folder in ("src", "docs", "launchers", "environments"):
        files += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file()
            and "__pycache__" not in p.parts
            and not any(part.endswith(".egg-info") for part in p.parts)  # an editable install's build output
            and p.suffix not in (".png", ".pyc", ".whl")
        ]
    return sorted(set(files))


def runbook_keys(text: str) -> set[str]:
    """The sections docs/runbook-map.md maps: the first cell of each table row (`§N`, `§N.M`, `step N.M`)."""
    return set(re.findall(r"^\| (§\d+(?:\.\d+)?|step \d+(?:\.\d+)?) \|", text, re.MULTILINE))


def unresolved(text: str, keys: set[str]) -> set[str]:
    found = set()
    for section, step in REF.findall(text):
        key = f"§{section}" if section else f"step {step}"
        if key not in keys:
            found.add(key)
    return found


def test_every_runbook_reference_resolves_through_the_map():
    keys = runbook_keys((ROOT / "docs" / "runbook-map.md").read_text(encoding="utf-8"))
    assert {"§2.3", "§5", "§7.1", "§10", "step 5", "step 5.1"} <= keys
    missing = {}
    for path in shipped_files():
        bad = unresolved(path.read_text(encoding="utf-8", errors="replace"), keys)
        if bad:
            missing[str(path.relative_to(ROOT))] = sorted(bad)
    assert not missing, f"runbook sections cited but not in docs/runbook-map.md: {missing}"


def test_the_reference_check_catches_an_unmapped_section():
    keys = {"§5", "§7.1", "step 5"}
    assert unresolved("the config of runbook §5 and §7.1; runbook step 5", keys) == set()
    assert unresolved("see §7.2, § 12 and runbook step 5.9", keys) == {"§7.2", "§12", "step 5.9"}


def test_the_runbook_and_the_distillation_project_are_named_with_where_they_live():
    site = (ROOT / "docs" / "runbook-map.md").read_text(encoding="utf-8")
    assert "Qwen-Image-Edit LoRA Fine-Tuning on Intel AI PC (Windows)" in site
    assert "https://github.com/tsiendragon/qwen-image-finetune" in site
    distill = (ROOT / "docs" / "distillation.md").read_text(encoding="utf-8")
    assert "https://huggingface.co/ysharma/image21-turbo-trajectories" in distill
    assert "## Distillation quality on a tiny trained teacher" in distill


# --- internal names ------------------------------------------------------------------------------------------------

INTERNAL = re.compile(
    r"\bseed[ _-]?0\d\d\b|\bseeds[\\/]|\b(?:the|a|this) seed['’]s\b|\bseed (?:items?|lessons?|documents?|files?"
    r"|next step)\b|\b(?:as )?the seed (?:learned|says|said|recorded|found|documents?)\b|\bseed[ -]document",
    re.IGNORECASE,
)
""""seed" used as the name of a document ("seed 003", "the seed's order", "Seed item 1"); random seeds are fine."""


@pytest.mark.parametrize(
    "text",
    [
        "turns seed 003 into stages",
        "the seed-003 recipe",
        "Seed 003's G1",
        "the seed's order",
        "Seed item 1:",
        "seed lesson 3",
        "as the seed learned",
        "read ../seeds/003_x.txt",
        "Seed next step 2",
        "the seed documents",
    ],
)
def test_the_internal_name_pattern_catches_document_uses(text):
    assert INTERNAL.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "seed: 42",
        "the same seeds",
        "torch.manual_seed_all(seed)",
        "a random seed",
        "everything is a function of the seed",
        "noise seed per prompt",
        "seed_everything(seed)",
        "secret key (64: seed + public)",
        "--seed 7",
        r"per line (\"seed\" optional)",
    ],
)
def test_the_internal_name_pattern_leaves_random_seeds_alone(text):
    assert not INTERNAL.search(text)


def test_no_shipped_text_names_an_internal_document():
    hits = []
    for path in shipped_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if INTERNAL.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not hits, "\n".join(hits)
