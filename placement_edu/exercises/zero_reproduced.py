"""Exercises of the notebook "ZeRO, reproduced from placements"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.report import analyze, compare
from placement_edu.units import GB


def _model_state_gb(strategy: str, psi: float, n: int) -> Fraction:
    return Fraction(analyze(strategy, psi, n).memory.model_state) / GB


EXERCISES = (
    Exercise(
        "zero2-memory",
        "Ψ = 7.5e9, N = 64, mixed_adam: how many GB of model state does one zero2 device hold (within 0.1%)?",
        lambda: _model_state_gb("zero2", 7.5e9, 64), "GB (1e9 bytes)",
        "2Ψ of replicated fp16 parameters plus 14Ψ/N of sharded gradients and optimizer state: "
        "15 + 1.640625 GB (ZeRO Table 1 prints 16.6).",
        mistakes=((Fraction(120, 64), "that is 16Ψ/N, zero3: zero2 still keeps the whole fp16 parameters."),
                  (Fraction(31640625, 10**6), "that is zero2's peak, with its whole gradient bucket; the "
                   "question asks for model state (persistent P + G + O).")),
        hint="2 bytes per parameter stay whole on every device; 2 + 12 are divided by N.", tolerance=1e-3),
    Exercise(
        "zero3-comm-ratio",
        "At N = 8, how many times dp's per-step communication does zero3 send (ZeRO's convention)?",
        lambda: compare(["dp", "zero3"], 70e9, 8).vs_dp(compare(["dp", "zero3"], 70e9, 8).reports[1])["comm"],
        "× dp",
        "zero3 gathers the parameters before forward and again before backward (2Ψ) and reduce-scatters "
        "the gradients (Ψ): 3Ψ against dp's all-reduce of 2Ψ, 1.5x at every N.",
        mistakes=((2, "that counts an all-reduce as Ψ: ZeRO counts it as 2Ψ (reduce-scatter + all-gather)."),
                  (1, "zero3 also gathers the parameters twice per step.")),
        hint="count each collective in Ψ: all-reduce 2Ψ, all-gather Ψ, reduce-scatter Ψ."),
    Exercise(
        "zero1-comm",
        "How many Ψ does zero1 (ZeRO §7's schedule) send per device per step?",
        lambda: analyze("zero1", 7.5e9, 64).volume_psi, "Ψ",
        "optimizer state is sliced, so gradients are reduce-scattered (Ψ) and the updated parameters "
        "all-gathered (Ψ): 2Ψ, the same as dp (SPEC §4 rule 1).",
        mistakes=((3, "3Ψ is PyTorch's ZeroRedundancyOptimizer schedule (all-reduce, then each owner "
                      "broadcasts): a real implementation, but not ZeRO §7's 2Ψ."),),
        hint="key the gradient reduction on the optimizer state's placement, not the gradients'."),
)
