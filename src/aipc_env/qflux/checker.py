"""The runbook's adaptation checker (step 5, `adaptation_check.py`) over a clone as it is now: ERROR findings
(training on XPU fails or NF4 is unreachable) and WARN findings (it runs, but wastes disk, memory or seeds),
each with file, line and fix. Independent of the edits in patches.py: it reads the code, not the manifest."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.qflux.patches import HELPERS_MODULE, SRC

__all__ = [
    "AccelerateChoices",
    "CheckReport",
    "Finding",
    "check_accelerate_config",
    "check_clone",
    "check_source",
    "check_structure",
]


class Finding(StrictModel):
    level: Literal["ERROR", "WARN"]
    rule: str
    file: str
    line: int
    message: str
    fix: str


class AccelerateChoices(VersionedModel):
    """The values accelerate's own enums allow, read in the training env (workers/accelerate_choices.py): the
    accelerate config is checked against them without importing accelerate here."""

    FORMAT: ClassVar[str] = "accelerate choices"
    schema_version: Literal[1] = 1
    version: str | None
    """accelerate's version; None where it does not import there (then only the YAML types are checked)."""
    distributed_type: list[str]
    mixed_precision: list[str]
    dynamo_backend: list[str]


class CheckReport(VersionedModel):
    """`aipc-env adapt CLONE --check --json`."""

    FORMAT: ClassVar[str] = "adaptation check report"
    schema_version: Literal[1] = 1
    clone: str
    adapted: bool
    findings: list[Finding]

    @property
    def errors(self) -> int:
        return sum(f.level == "ERROR" for f in self.findings)


FIX_ADAPT = "run `aipc-env adapt CLONE` (it applies the runbook's step-5 edits)"


def _tree(text: str | None) -> ast.Module | None:
    """The parsed module, or None when the file is absent or does not parse (check_source reports that)."""
    if text is None:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):  # ValueError: a null byte, before Python 3.11.4
        return None


def _functions(tree: ast.AST | None) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    if tree is None:
        return out
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, node)
    return out


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
"""One source line as the parser counts them (\n, \r\n or \r ends it; a form feed does not), its end kept."""


@functools.lru_cache(maxsize=8)
def _lines(text: str) -> tuple[str, ...]:
    return tuple(_LINE.findall(text))


def _segment(text: str, node: ast.AST) -> str:
    """ast.get_source_segment(text, node), with the text split into lines once rather than once per node (that
    split made the check of one clone take 5 s)."""
    # every node passed here is a statement, which has its position (ast.AST's stub declares none); UTF-8 byte offsets
    first: int = node.lineno - 1  # type: ignore[attr-defined]  # a statement's position (see above)
    last: int = node.end_lineno - 1  # type: ignore[attr-defined]  # a statement's position (see above)
    start: int = node.col_offset  # type: ignore[attr-defined]  # a statement's position (see above)
    end: int = node.end_col_offset  # type: ignore[attr-defined]  # a statement's position (see above)
    lines = _lines(text)
    if first == last:
        return lines[first].encode()[start:end].decode()
    return lines[first].encode()[start:].decode() + "".join(lines[first + 1 : last]) + lines[last].encode()[:end].decode()


def _code_lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        code = line.partition("#")[0]
        if code.strip():
            yield number, code


class _Findings(list[Finding]):
    def add(self, level: Literal["ERROR", "WARN"], rule: str, rel: str, line: int, message: str, fix: str = FIX_ADAPT) -> None:
        self.append(Finding(level=level, rule=rule, file=rel, line=line, message=message, fix=fix))


def check_clone(clone: Path, choices: AccelerateChoices | None = None) -> CheckReport:
    """Every rule over the clone: each source file (check_source), the files read together (check_structure), and
    the created accelerate config (check_accelerate_config, against `choices` where given)."""
    from aipc_env.qflux.adapt import is_adapted, require_clone

    clone = Path(clone)
    require_clone(clone)
    texts: dict[str, str] = {}
    for path in sorted((clone / SRC).rglob("*.py")):
        rel = path.relative_to(clone).as_posix()
        texts[rel] = path.read_text(encoding="utf-8", errors="replace")
    findings = _Findings()
    if HELPERS_MODULE not in texts:
        findings.add("ERROR", "no-device-helpers", HELPERS_MODULE, 0, "the device-agnostic helpers module is missing")
    for rel, text in texts.items():
        if rel != HELPERS_MODULE:
            findings += check_source(rel, text)
    findings += check_structure(texts)
    findings += check_accelerate_config(clone / ACCELERATE_XPU, choices)
    return CheckReport(clone=str(clone), adapted=is_adapted(clone), findings=findings)


def check_source(rel: str, text: str) -> list[Finding]:
    """The rules one source file is judged by on its own: CUDA-only calls and switches, flash-attention-2,
    top-level imports that break on XPU, hard-coded hub IDs, CUDA-only device checks, and whether it parses."""
    findings = _Findings()
    add = findings.add
    try:
        tree: ast.Module | None = ast.parse(text)
    except (SyntaxError, ValueError) as exc:  # ValueError: a null byte, before Python 3.11.4
        tree, syntax_error = None, exc
    demo = _main_block_lines(tree) if tree is not None else set()
    cuda_guarded = _cuda_guarded_lines(tree) if tree is not None else set()
    for number, code in _code_lines(text):
        if "torch.cuda." in code:
            add(
                "ERROR",
                "cuda-call",
                rel,
                number,
                f"CUDA-only call: {code.strip()}",
                "use the qflux.utils.device_utils helper instead (" + FIX_ADAPT + ")",
            )
        elif (
            tree is not None and re.search(r"torch\.backends\.cuda\.enable_\w+_sdp\(", code) and number not in cuda_guarded
        ):  # which lines a CUDA check guards is known only once the file parses
            add(
                "WARN",
                "cuda-sdp-switch",
                rel,
                number,
                f"CUDA attention-backend switch: {code.strip()}: it "
                "does nothing for an XPU, and enable_math_sdp(False) also takes away the math fallback other "
                "devices use (the FSDP path, which one AI PC does not take)",
                "leave the FSDP path alone on one XPU (distributed_type NO); for multi-XPU FSDP guard these "
                "calls with a CUDA check",
            )
        if "flash_attention_2" in code:
            add(
                "ERROR",
                "flash-attention-2",
                rel,
                number,
                "attn_implementation flash_attention_2 is CUDA-only",
                'use attn_implementation="sdpa" (' + FIX_ADAPT + ")",
            )
        if re.match(r"(import|from)\s+transformer_engine\b", code):
            add(
                "ERROR",
                "transformer-engine-import",
                rel,
                number,
                "a top-level transformer_engine import fails on XPU",
                "import it lazily (" + FIX_ADAPT + ")",
            )
        if re.match(r"import torchvision\b", code):
            add(
                "WARN",
                "torchvision-at-import",
                rel,
                number,
                "torchvision is imported at module load: a torchvision that does not match torch breaks `import qflux.main`",
                "import it where images are logged (" + FIX_ADAPT + ")",
            )
        m = re.search(r'load_(?:vae|qwenvl)\(\s*"(Qwen/[^"]+)"|"(Qwen/Qwen2\.5-VL-7B-Instruct)"', code)
        if m and tree is not None and number not in demo:
            add(
                "ERROR",
                "hub-id",
                rel,
                number,
                f"hub ID {m.group(1) or m.group(2)} hard-coded: the configured "
                "local model is not used (a download, or a failure offline)",
                "load from config.model.pretrained_model_name_or_path (" + FIX_ADAPT + ")",
            )
    if tree is None:
        add(
            "ERROR",
            "syntax",
            rel,
            getattr(syntax_error, "lineno", None) or 0,
            f"does not parse: {getattr(syntax_error, 'msg', syntax_error)}",
            "restore the file",
        )
        return findings
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            body = _segment(text, fn)
            if (cuda := re.search(r'\.type\s*==\s*"cuda"', body)) and '"xpu"' not in body:
                line = fn.lineno + body[: cuda.start()].count("\n")
                add(
                    "ERROR",
                    "device-type-cuda-only",
                    rel,
                    line,
                    f"{fn.name}() checks for CUDA devices with no XPU branch",
                    "add an xpu branch (" + FIX_ADAPT + ")",
                )
    return findings


ACCELERATE_XPU = "accelerate_config_xpu.yaml"


def check_accelerate_config(path: Path, choices: AccelerateChoices | None = None) -> list[Finding]:
    """The accelerate config adapt creates, judged by accelerate's own enums (`choices`, read in the training env;
    None or an env without accelerate: only the YAML types). Its file loader accepts an unquoted NO, which YAML
    reads as the boolean false, and `accelerate launch` then fails on .upper()."""
    findings = _Findings()
    add = findings.add
    if not path.is_file():
        add(
            "WARN",
            "no-xpu-accelerate-config",
            ACCELERATE_XPU,
            0,
            "no single-XPU accelerate config: upstream's accelerate_config.yaml asks for 2 processes on MULTI_GPU",
        )
        return findings

    from aipc_env.core.fileio import parse_yaml, read_text
    from aipc_env.errors import InputError

    try:
        data = parse_yaml(read_text(path, "accelerate config"), path, "accelerate config")
    except InputError as exc:
        add("ERROR", "accelerate-config", ACCELERATE_XPU, 0, exc.message, "restore the file (" + FIX_ADAPT + ")")
        return findings
    if not isinstance(data, dict):
        add("ERROR", "accelerate-config", ACCELERATE_XPU, 0, "not a mapping", "restore the file (" + FIX_ADAPT + ")")
        return findings
    known = choices is not None and choices.version is not None
    lines = {
        k: i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) for k in data if line.startswith(f"{k}:")
    }
    rules: list[tuple[str, list[str] | None]] = [
        (key, getattr(choices, key) if known else None) for key in ("distributed_type", "mixed_precision", "dynamo_backend")
    ]
    for key, enum in rules:
        if key not in data:
            continue
        value = data[key]
        if not isinstance(value, str):
            add(
                "ERROR",
                "accelerate-config",
                ACCELERATE_XPU,
                lines.get(key, 0),
                f"{key} is {value!r}, not a string (an unquoted NO or no is a YAML boolean): accelerate launch fails",
                f"quote it: {key}: 'NO'",
            )
        elif enum is not None and value.upper() not in {e.upper() for e in enum}:
            add(
                "ERROR",
                "accelerate-config",
                ACCELERATE_XPU,
                lines.get(key, 0),
                f"{key}: {value} is not one of accelerate's {', '.join(enum)}",
                "use one of those",
            )
    if data.get("num_processes", 1) != 1 or str(data.get("distributed_type", "NO")).upper() != "NO":
        add(
            "WARN",
            "accelerate-multi-process",
            ACCELERATE_XPU,
            lines.get("num_processes", 0),
            "more than one process or a distributed backend: an AI PC has one XPU",
            "num_processes: 1, distributed_type: 'NO'",
        )
    return findings


def _cuda_guarded_lines(tree: ast.Module) -> set[int]:
    """Lines inside an `if` whose test keeps them off an XPU: it names cuda, or excludes xpu (`not in ("xpu", ...)`)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = ast.unparse(node.test)
        if "cuda" in test or ("xpu" in test and "not in" in test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _main_block_lines(tree: ast.Module) -> set[int]:
    """Lines under `if __name__ == "__main__":` (demo code, never run by training)."""
    lines: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def check_structure(texts: dict[str, str]) -> list[Finding]:
    """The rules that read named files together (texts: clone-relative path -> source): the NF4 schema and loader,
    the step-budget guard, checkpoint pruning, LoRA metadata, autocast, XPU seeding."""
    findings = _Findings()
    add = findings.add
    config = texts.get(f"{SRC}/data/config.py")
    base = texts.get(f"{SRC}/trainer/base_trainer.py")
    qwen = texts.get(f"{SRC}/trainer/qwen_image_edit_trainer.py")
    load = texts.get(f"{SRC}/models/load_model.py")
    seed = texts.get(f"{SRC}/utils/seed.py")
    cfg_rel, base_rel = f"{SRC}/data/config.py", f"{SRC}/trainer/base_trainer.py"
    tree = _tree(config)
    if config is not None and tree is not None:
        model_cfg = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ModelConfig"), None)
        if model_cfg is not None and "quantize_type" not in _segment(config, model_cfg):
            add(
                "ERROR",
                "no-nf4-schema",
                cfg_rel,
                model_cfg.lineno,
                "ModelConfig has no quantize_type: an NF4 config is rejected (extra keys are forbidden)",
            )
        data_cfg = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "DataConfig"), None)
        if data_cfg is not None:
            seg = _segment(config, data_cfg)
            m = re.search(
                r"@field_validator\(([^)]*)\)\s*\n\s*@classmethod\s*\n\s*def \w+\(cls, v: int\) -> int:"
                r"\s*\n\s*if v <= 0:",
                seg,
            )
            if m and "num_workers" in m.group(1):
                add(
                    "ERROR",
                    "num-workers-positive",
                    cfg_rel,
                    data_cfg.lineno + seg[: m.start()].count("\n"),
                    "num_workers must be > 0: the Windows spawn escape hatch (0) is rejected",
                )
    if load and "nf4" not in load:
        add(
            "ERROR",
            "no-nf4-loader",
            f"{SRC}/models/load_model.py",
            1,
            "no NF4 path: the transformer cannot load in bitsandbytes nf4 (quantize: true is 8-bit)",
        )
    if base:
        fns = _functions(_tree(base))
        train_epoch, fit = fns.get("train_epoch"), fns.get("fit")
        if train_epoch is not None and "max_train_steps" not in _segment(base, train_epoch):
            add(
                "ERROR",
                "no-max-steps-guard",
                base_rel,
                train_epoch.lineno,
                "train_epoch() never stops at max_train_steps: training overruns the step budget (upstream issue #51)",
            )
        if fit is not None:
            seg = _segment(base, fit)
            loop = re.search(r"for epoch in range\([^\n]*\n((?:[ \t]+[^\n]*\n|\n)*)", seg)
            if loop and "max_train_steps" not in loop.group(1):
                add(
                    "WARN",
                    "no-epoch-break",
                    base_rel,
                    fit.lineno + seg[: loop.start()].count("\n"),
                    "the epoch loop does not break at max_train_steps: one redundant full checkpoint per remaining epoch",
                )
            if re.search(r"^\s*mp\.set_start_method\(", seg, re.MULTILINE) and "except RuntimeError" not in seg:
                add("WARN", "spawn-unguarded", base_rel, fit.lineno, "mp.set_start_method(..., force=True) is not guarded")
        if "checkpoints_total_limit" not in base:
            add(
                "WARN",
                "checkpoints-total-limit-unused",
                base_rel,
                1,
                "train.checkpoints_total_limit is never used: checkpoints are never pruned",
            )
        save_lora = fns.get("save_lora")
        if save_lora is not None and "lora_adapter_metadata" not in _segment(base, save_lora):
            add(
                "WARN",
                "lora-without-metadata",
                base_rel,
                save_lora.lineno,
                "the LoRA is saved without adapter metadata: diffusers reloads it with alpha = r",
            )
    if qwen:
        fns = _functions(_tree(qwen))
        loss = fns.get("_compute_loss")
        if loss is not None and "torch.autocast(" not in _segment(qwen, loss):
            add(
                "WARN",
                "no-nf4-autocast",
                f"{SRC}/trainer/qwen_image_edit_trainer.py",
                loss.lineno,
                "no autocast around the trainable forward (NF4-A2): the bf16 compute path is not taken",
            )
        if "quantize_type" not in qwen:
            add(
                "ERROR",
                "nf4-not-wired",
                f"{SRC}/trainer/qwen_image_edit_trainer.py",
                1,
                "the trainer never passes model.quantize_type to the transformer loader",
            )
    if seed and "xpu" not in seed and "device_manual_seed_all" not in seed:
        add("WARN", "no-xpu-seed", f"{SRC}/utils/seed.py", 1, "seed_everything() does not seed the XPU")
    return findings
