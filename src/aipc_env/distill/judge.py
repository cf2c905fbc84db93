"""G3's decisions, pure: which mode it runs in, and whether the student beats naive@4. Torch-free.

Quality mode judges on LPIPS to teacher@8 (seed 003's statistic: the mean over held-out prompt x seed pairs,
student vs naive), with two bounds: the student's mean must be below naive's by at least `margin`, and the student
must be closer than naive on at least `min_win_rate` of the pairs. Plumbing mode judges nothing about the student.
"""

from __future__ import annotations

from statistics import fmean

from aipc_env.errors import InputError

__all__ = ["decide_mode", "judge"]


def decide_mode(setting: str, *, lpips: bool, tiny_random: bool) -> tuple[str, str]:
    """(mode, why) from eval.mode, whether LPIPS weights are configured, and the model's identity (a tiny random
    pipeline carries aipc_tiny.json) — never from the model's path."""
    if setting == "plumbing":
        return "plumbing", "eval.mode: plumbing"
    if setting == "quality":
        if tiny_random:
            raise InputError("eval.mode is quality, but the model is a tiny random pipeline (it has aipc_tiny.json): "
                             "nothing about its student can be judged", key="eval.mode",
                             fix="set eval.mode: plumbing (or auto), or point model at the real Qwen-Image-2.1-Turbo")
        if not lpips:
            raise InputError("eval.mode is quality, but no LPIPS weights are configured", key="eval.lpips_weights",
                             fix="set eval.lpips_weights, or eval.mode: plumbing")
        return "quality", "eval.mode: quality"
    if tiny_random:
        return "plumbing", "the model is a tiny random pipeline (aipc_tiny.json)"
    if not lpips:
        return "plumbing", "no LPIPS weights configured (eval.lpips_weights)"
    return "quality", "LPIPS weights and a real model"


def judge(pairs: list[tuple[float, float]], *, margin: float, min_win_rate: float) -> tuple[bool, dict]:
    """pairs: (student, naive) distances to the teacher, lower is better. (beats, statistics)."""
    if not pairs:
        raise ValueError("no prompt x seed pairs to judge")
    student, naive = fmean(s for s, _ in pairs), fmean(n for _, n in pairs)
    wins = sum(1 for s, n in pairs if s < n)
    win_rate = wins / len(pairs)
    beats = student <= naive - margin and student < naive and win_rate >= min_win_rate
    return beats, {"student_mean": student, "naive_mean": naive, "margin": margin, "wins": wins,
                   "pairs": len(pairs), "win_rate": win_rate, "min_win_rate": min_win_rate}
