"""G3's verdict, pure (the workers measure, this module decides): which mode it runs in, whether the student beats
naive@4, and the checks on what G3 wrote and measured (artifacts read back, the LoRA moves the output, the images
are finite). Torch-free.

Quality mode judges on LPIPS to teacher@8 (the recorded project's statistic: the mean over held-out prompt x seed pairs,
student vs naive; on the trained tiny teacher, the latent MSE to teacher@8), with two bounds: the student's mean
must be below naive's by at least `margin`, and the student must be closer than naive on at least `min_win_rate`
of the pairs. Plumbing mode judges nothing about the student.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any, Literal

from aipc_env.errors import AipcError, InputError

__all__ = [
    "METRICS",
    "artifacts_read_back",
    "decide",
    "decide_entries",
    "decide_mode",
    "g3_metric",
    "lora_changes_output",
    "not_worse_than_reference",
    "outputs_finite",
    "student_beats_naive",
]


def decide_mode(
    setting: str, *, lpips: bool, tiny_random: bool, tiny_trained: bool = False
) -> tuple[Literal["quality", "plumbing"], str]:
    """(mode, why) from eval.mode, whether LPIPS weights are configured, and the model's identity (a tiny pipeline
    carries aipc_tiny.json, which says whether it was trained) — never from the model's path. The trained tiny
    teacher is judged without LPIPS (on the latent distance to teacher@8, see g3_metric)."""
    if setting == "plumbing":
        return "plumbing", "eval.mode: plumbing"
    if setting == "quality":
        if tiny_random:
            raise InputError(
                "eval.mode is quality, but the model is a tiny random pipeline (it has aipc_tiny.json): "
                "nothing about its student can be judged",
                key="eval.mode",
                fix="set eval.mode: plumbing (or auto), or point model at the real Qwen-Image-2.1-Turbo",
            )
        if tiny_trained:
            return "quality", "eval.mode: quality (the trained tiny teacher: latent distance to teacher@8)"
        if not lpips:
            raise InputError(
                "eval.mode is quality, but no LPIPS weights are configured",
                key="eval.lpips_weights",
                fix="set eval.lpips_weights, or eval.mode: plumbing",
            )
        return "quality", "eval.mode: quality"
    if tiny_random:
        return "plumbing", "the model is a tiny random pipeline (aipc_tiny.json)"
    if tiny_trained:
        return "quality", "the model is the trained tiny teacher (aipc_tiny.json): latent distance to teacher@8"
    if not lpips:
        return "plumbing", "no LPIPS weights configured (eval.lpips_weights)"
    return "quality", "LPIPS weights and a real model"


METRICS = {
    "lpips": ("lpips", "LPIPS (alex) to teacher@8, lower is better"),
    "latent_mse": (
        "latent_mse",
        "latent MSE to teacher@8 (the trained tiny teacher's own space), lower is better; pixel MSE/PSNR recorded beside it",
    ),
    "psnr": ("mse", "PSNR/MSE to teacher@8, higher PSNR is better"),
}
"""G3's metric -> (the distance key decide() compares, lower is better; the note every verdict carries)."""


def g3_metric(mode: str, *, lpips: bool, tiny_trained: bool) -> Literal["lpips", "latent_mse", "psnr"]:
    """What G3 measures: the trained tiny teacher in quality mode on the latent MSE to teacher@8 (its data lives in
    latent space; its VAE is random, and LPIPS needs a download), a real model in quality mode on LPIPS, anything
    in plumbing mode on PSNR/MSE (reported, not judged)."""
    if mode == "quality":
        return "latent_mse" if tiny_trained else "lpips" if lpips else "psnr"
    return "psnr"


def decide(pairs: list[tuple[float, float]], *, margin: float, min_win_rate: float) -> tuple[bool, dict[str, float]]:
    """pairs: (student, naive) distances to the teacher, lower is better. (beats, statistics)."""
    if not pairs:
        raise ValueError("no prompt x seed pairs to judge")
    student, naive = fmean(s for s, _ in pairs), fmean(n for _, n in pairs)
    wins = sum(1 for s, n in pairs if s < n)
    win_rate = wins / len(pairs)
    beats = student <= naive - margin and student < naive and win_rate >= min_win_rate
    return beats, {
        "student_mean": student,
        "naive_mean": naive,
        "margin": margin,
        "wins": wins,
        "pairs": len(pairs),
        "win_rate": win_rate,
        "min_win_rate": min_win_rate,
    }


def decide_entries(
    entries: list[dict[str, Any]], metric: str, *, margin: float, min_win_rate: float
) -> tuple[bool, dict[str, float]]:
    """decide() over G3's entries (each with distance_to_teacher: kind -> distance -> value), on the distance that
    `metric` compares (METRICS): LPIPS, the latent MSE on the trained tiny teacher, else the pixel MSE."""
    key = METRICS[metric][0]
    return decide(
        [(e["distance_to_teacher"]["student"][key], e["distance_to_teacher"]["naive"][key]) for e in entries],
        margin=margin,
        min_win_rate=min_win_rate,
    )


def artifacts_read_back(out: Path, runs: int, lora_sha256: str) -> str:
    """G3's manifest reads back with one entry per run, every image it names and the grid are on disk, and it names
    the LoRA that was evaluated."""
    from aipc_env.core.formats import load_versioned
    from aipc_env.distill.verdict import G3Manifest

    back = load_versioned(G3Manifest, out / "manifest.json")
    missing = [f for e in back.entries for f in e.files.values() if not (out / f).is_file()]
    if len(back.entries) != runs or missing or not (out / "grid.png").is_file():
        raise AipcError(
            f"the G3 artifacts are incomplete: {len(back.entries)} of {runs} entries, missing {missing[:3] or 'grid.png'}"
        )
    if back.lora_sha256 != lora_sha256:
        raise AipcError("the manifest names another LoRA than the one evaluated")
    return f"{runs} comparisons, every image and the grid on disk, manifest reads back"


def lora_changes_output(moved: float) -> str:
    """moved: the largest |student - naive| over G3's 4-step latents."""
    from aipc_env.distill.lesson_errors import StudentNotBetter

    if moved == 0.0:
        raise StudentNotBetter(
            "with the LoRA on, the 4-step output equals naive@4 bit for bit: the adapter is inactive or all zeros",
            fix="check the train stage's verdict (did the LoRA change?) and the LoRA file's keys",
        )
    return f"the LoRA moves the 4-step latents (max |student - naive| {moved:.3g})"


def outputs_finite(finite: bool) -> str:
    if not finite:
        raise AipcError("an output image holds NaN or Inf values")
    return "every teacher/naive/student image is finite"


def student_beats_naive(beats: bool, detail: str, *, margin: float, min_win_rate: float) -> str:
    """Quality mode's verdict from decide()'s `beats`."""
    from aipc_env.distill.lesson_errors import StudentNotBetter

    if not beats:
        raise StudentNotBetter(
            f"the student does not beat naive@4 by margin {margin:g} with win rate >= {min_win_rate:g}: {detail}",
            fix="see the velocity diagnostic in `aipc-env distill "
            "report`; try endpoint weighting, a lower lr, or the on-policy phase (student.on_policy)",
        )
    return detail


def not_worse_than_reference(student: float, reference: float, *, margin: float, metric: str) -> str:
    """Quality mode with eval.reference_lora: the student's mean distance to the teacher (lower is better) may
    exceed the reference LoRA's by at most `margin`. Equal to reference + margin passes."""
    from aipc_env.distill.lesson_errors import StudentWorseThanReference

    detail = f"student {metric} {student:.4g} vs reference {reference:.4g} (margin {margin:g})"
    if not student <= reference + margin:
        raise StudentWorseThanReference(
            f"the student is worse than the reference LoRA by more than the margin: {detail}",
            fix="a student that does not match the public 4-step LoRA is not worth publishing: "
            "train longer, try endpoint weighting or the on-policy phase (student.on_policy)",
        )
    return detail
