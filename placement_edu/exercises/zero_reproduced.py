"""Exercises of the notebook "ZeRO, reproduced from placements"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.exercises.derived import model_state_gb
from placement_edu.report import analyze, compare
from placement_edu.units import GB


def zero3_comm_ratio(n: int) -> float:
    """zero3's per-step volume over dp's (ZeRO's convention) at N = ``n``."""
    both = compare(["dp", "zero3"], 70e9, n)
    ratio = both.vs_dp(both.reports[1])["comm"]
    assert ratio is not None  # dp all-reduces 2Ψ: never zero
    return ratio


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "zero2-memory",
        "Ψ = 7.5e9, N = 64, `mixed_adam`: how many GB of model state does one **zero2** "
        "device hold (3 significant figures, as ZeRO's Table 1 prints it)?",
        lambda: model_state_gb("zero2", 7.5e9, 64),
        "GB (1e9 bytes)",
        "2Ψ of replicated fp16 parameters plus 14Ψ/N of sharded gradients and optimizer state: "
        "15 + 1.640625 GB (ZeRO Table 1 prints 16.6).",
        mistakes=(
            (
                Fraction(120, 64),
                "that is 16Ψ/N, zero3: zero2 still keeps the whole fp16 parameters.",
            ),
            (
                Fraction(31640625, 10**6),
                "that is zero2's peak, with its whole gradient bucket; the "
                "question asks for model state (persistent P + G + O).",
            ),
        ),
        hint="2 bytes per parameter stay whole on every device; 2 + 12 are divided by N.",
        devices=64,
        figures=3,
    ),
    Exercise(
        "zero3-comm-ratio",
        "At N = 8, how many times dp's per-step communication does zero3 send (ZeRO's convention)?",
        lambda: zero3_comm_ratio(8),
        "× dp",
        "zero3 gathers the parameters before forward and again before backward (2Ψ) and "
        "reduce-scatters the gradients (Ψ): 3Ψ against dp's all-reduce of 2Ψ, 1.5x at every N.",
        mistakes=(
            (
                2,
                "that counts an all-reduce as Ψ: ZeRO counts it as 2Ψ "
                "(reduce-scatter + all-gather).",
            ),
            (1, "zero3 also gathers the parameters twice per step."),
        ),
        hint="count each collective in Ψ: all-reduce 2Ψ, all-gather Ψ, reduce-scatter Ψ.",
        devices=8,
    ),
    Exercise(
        "zero1-comm",
        "How many Ψ does zero1 (ZeRO §7's schedule) send per device per step?",
        lambda: analyze("zero1", 7.5e9, 64).volume_psi,
        "Ψ",
        "optimizer state is sliced, so gradients are reduce-scattered (Ψ) and the updated "
        "parameters all-gathered (Ψ): 2Ψ, the same as dp (SPEC §4 rule 1).",
        mistakes=(
            (
                3,
                "3Ψ is PyTorch's ZeroRedundancyOptimizer schedule (all-reduce, then each owner "
                "broadcasts): a real implementation, but not ZeRO §7's 2Ψ.",
            ),
        ),
        hint="key the gradient reduction on the optimizer state's placement, not the gradients'.",
    ),
)


def _extra_gb_with_fp32_grads(strategy: str, psi: float, n: int) -> Fraction:
    """GB of model state a device gains when gradients go from 2 B (mixed_adam) to 4 B
    (mixed_adam_fp32_grads, Megatron's 18 B/param)."""
    return (
        Fraction(analyze(strategy, psi, n, "mixed_adam_fp32_grads").memory.model_state)
        - Fraction(analyze(strategy, psi, n, "mixed_adam").memory.model_state)
    ) / GB


def _grad_op_extra_peak_gb(psi: int, n: int, units: int) -> Fraction:
    """GB of peak that fsdp_grad_op (P kept gathered through backward) adds over zero3."""
    from placement_edu.models import ModelSpec

    model = ModelSpec(psi, gather_units=units)
    return (
        Fraction(analyze("fsdp_grad_op", model, n).memory.peak)
        - Fraction(analyze("zero3", model, n).memory.peak)
    ) / GB


EXERCISES = EXERCISES + (
    Exercise(
        "zero-fp32-grads-extra-gb",
        "Set the explorer's precision to `mixed_adam_fp32_grads` (Megatron's 18 B per "
        "parameter: 4 B gradients, where `mixed_adam` has 2 B). In *absolute* terms, at Ψ = "
        "7.5e9 and N = 64: how many GB more model state does one **zero2** device hold? (Then "
        "look at the ratios in the table: which saving over dp does not move at all?)",
        lambda: _extra_gb_with_fp32_grads("zero2", 7.5e9, 64),
        "GB (1e9 bytes)",
        "zero2 shards the gradients, so the 2 extra bytes per parameter cost 2Ψ/N = 15/64 = "
        "0.234375 GB per device; dp and zero1 keep them whole and pay 2Ψ = 15 GB. zero3's "
        "saving stays exactly N×.",
        mistakes=(
            (
                15,
                "that is dp's and zero1's extra (2Ψ): they keep the gradients "
                "whole; zero2 shards them.",
            ),
            (
                Fraction(15, 32),
                "that counts 4 extra bytes: the gradient grows from 2 to 4 B, by 2 B.",
            ),
        ),
        hint="only the gradient row changes; ask whether zero2 keeps G whole or divides it by N.",
        devices=64,
    ),
    Exercise(
        "zero-grad-op-extra-peak-gb",
        "Gather units matter only for the peak. Take Ψ = 1e9 split into **32** equal gather "
        "units (`ModelSpec(10**9, gather_units=32)`), N = 8, `mixed_adam`, and compare zero3 "
        "with `fsdp_grad_op` (FSDP's SHARD_GRAD_OP: the gathered parameters kept from forward "
        "through backward, one all-gather per step instead of two). How many GB higher is its "
        "peak than zero3's? (Gathered as one unit, `ModelSpec(10**9)`, you would see no "
        "difference: both windows are already the whole model. A bare `1e9` is spread over "
        "the 48 layers of the nearest published shape, GPT-2 XL's.)",
        lambda: _grad_op_extra_peak_gb(10**9, 8, 32),
        "GB (1e9 bytes)",
        "zero3's window is two gathered units, the one computing and the next, prefetched "
        "(2 × 2Ψ/32 = 0.125 GB); fsdp_grad_op holds every gathered unit until backward frees "
        "it, the whole fp16 model (2Ψ = 2 GB): 2 − 0.125 = 1.875 GB more, for 1Ψ less traffic.",
        mistakes=(
            (
                0,
                "with one gather unit (the whole model) the two windows are the same; at 32 units "
                "zero3 gathers a unit at a time, prefetching the next.",
            ),
            (2, "that is fsdp_grad_op's whole window; zero3 already holds two units of it."),
            (
                Fraction(31, 16),
                "that counts one unit in zero3's window; FSDP gathers the next unit while one "
                "computes (its prefetch), so two are live.",
            ),
        ),
        hint=(
            "the window is what is gathered at once: two units for zero3 (the one computing and "
            "the one prefetched), all of them for fsdp_grad_op."
        ),
        devices=8,
    ),
)
