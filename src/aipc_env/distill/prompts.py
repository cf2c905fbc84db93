"""Prompt lists for trajectories (train) and G3 (eval): JSONL files, one {"prompt": ...} per line, or built-ins.
Torch-free."""

from __future__ import annotations

from pathlib import Path

from aipc_env.core.fileio import parse_json, read_text
from aipc_env.core.formats import SEED_MAX, Seed, StrictModel
from aipc_env.distill.shapes import eval_prompts, train_prompts
from aipc_env.errors import InputError

__all__ = ["BUILTIN", "PromptRecord", "load_prompts"]

BUILTIN: dict[str, list[str] | list[tuple[str, int]]] = {
    "builtin:prompts": [
        "a red fox in fresh snow, morning light",
        "a bowl of ramen on a wooden table",
        "a lighthouse on a cliff at dusk",
        'a shop sign that reads "OPEN LATE"',
        "a watercolor of a cat asleep on a windowsill",
        "a blue vintage car on a desert road",
    ],
    "builtin:eval-prompts": ["a paper boat on a puddle", 'a poster with the words "HELLO WORLD"'],
    "builtin:shapes-prompts": train_prompts(),  # (prompt, seed): the trained tiny teacher's data (distill/shapes.py)
    "builtin:shapes-eval-prompts": eval_prompts(),
}


class PromptRecord(StrictModel):
    prompt: str
    seed: Seed | None = None
    """Noise seed of this prompt's trajectory (default: the config's seed plus the line index)."""


def load_prompts(source: str, *, limit: int | None = None) -> list[PromptRecord]:
    """The prompts of a JSONL file (a bad line is an error naming file and line) or of a built-in list.
    Accepts {"prompt": ...} and the extractor format of the image21-turbo-trajectories project ({"text": ...} or
    {"caption": ...}); extra keys (e.g. quoted_strings) are kept out."""
    if source in BUILTIN:
        records: list[PromptRecord] = [
            PromptRecord(prompt=p) if isinstance(p, str) else PromptRecord(prompt=p[0], seed=p[1]) for p in BUILTIN[source]
        ]
        return records[:limit] if limit else records
    path = Path(source)
    records = []
    text = read_text(path, "prompts file")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = parse_json(line, path, f"line {number}")
        except InputError as exc:
            raise InputError(
                f"line {number} is not JSON: {exc.message}", path=path, key=f"line {number}", fix="one JSON object per line"
            ) from None
        if not isinstance(row, dict):
            raise InputError(f"line {number} is not a JSON object", path=path, key=f"line {number}")
        prompt = next((row[k] for k in ("prompt", "text", "caption") if isinstance(row.get(k), str)), None)
        if not prompt or not prompt.strip():
            raise InputError(
                f'line {number} has no non-empty "prompt"',
                path=path,
                key=f"line {number}",
                fix='give each line {"prompt": "..."}',
            )
        seed = row.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= SEED_MAX):
            raise InputError(
                f"line {number}: seed must be an integer from 0 to {SEED_MAX}, got {seed!r}", path=path, key=f"line {number}"
            )
        records.append(PromptRecord(prompt=prompt, seed=seed))
        if limit and len(records) >= limit:
            break
    if not records:
        raise InputError("the prompts file holds no prompts", path=path, fix='one {"prompt": "..."} per line')
    return records
