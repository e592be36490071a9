"""Exercises of the notebook "Why the published numbers disagree"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.estimators import accelerate_training, deepspeed_zero2
from placement_edu.exercises import Exercise
from placement_edu.models import ModelSpec
from placement_edu.report import analyze
from placement_edu.units import GB, GiB

T5_3B = 2851 * 10**6  # DeepSpeed's docs example (t5-3b)


def _peak_gap(psi: int, n: int, units: int) -> Fraction:
    """zero3's peak minus zero2's, in bytes (mixed_adam)."""
    model = ModelSpec(psi, gather_units=units)
    return Fraction(analyze("zero3", model, n).memory.peak) - Fraction(
        analyze("zero2", model, n).memory.peak
    )


def _saving(strategy: str, n: int) -> Fraction:
    return Fraction(analyze("dp", 7.5e9, n).memory.model_state) / Fraction(
        analyze(strategy, 7.5e9, n).memory.model_state
    )


EXERCISES = (
    Exercise(
        "disagree-140gb-in-gib",
        'A popular guide writes "140 GB = 133 GiB". How many GiB (2^30 bytes) are 140 GB '
        "(10^9 bytes)? (2 decimals)",
        lambda: Fraction(140 * GB, GiB),
        "GiB",
        "140e9 / 2^30 = 130.39 GiB: a GiB is 7.4% larger than a GB, not 5%.",
        mistakes=(
            (
                133,
                "that is the guide's figure; 2^30 = 1.0737e9 bytes, so divide by "
                "1.0737, not by 1.05.",
            ),
            (
                Fraction(140 * 2**30, GB),
                "that converts the wrong way: GiB are larger, so there are fewer.",
            ),
        ),
        decimals=2,
        hint="divide the bytes (140 × 10^9) by 2^30.",
    ),
    Exercise(
        "disagree-deepspeed-zero2-printed",
        "DeepSpeed's `estimate_zero2_model_states_mem_needs` today (PR #5099) for t5-3b (Ψ = "
        "2.851e9) on 8 GPUs without offload: 2Ψ + 18Ψ/8 bytes per GPU. What number does it "
        'print before "GB"? (2 decimals)',
        lambda: Fraction(
            deepspeed_zero2(T5_3B, 8, 1, offload_optimizer=False).gpu.total_bytes, GiB
        ),
        "",
        "12,116,750,000 bytes = 12.12 GB, but DeepSpeed divides by 2^30 and labels it "
        "GB: it prints 11.28GB.",
        mistakes=(
            (
                Fraction(12_116_750_000, GB),
                "that is the figure in GB (10^9); DeepSpeed divides by 2^30.",
            ),
            (
                Fraction(
                    deepspeed_zero2(
                        T5_3B, 8, 1, offload_optimizer=False, formula="pr965"
                    ).gpu.total_bytes,
                    GiB,
                ),
                "15.93 is the docs' table, printed by the first formula (PR #965, 4Ψ + 16Ψ/N).",
            ),
        ),
        decimals=2,
        hint='compute the bytes, then divide by 2^30: DeepSpeed\'s "GB" is a GiB.',
        devices=8,
    ),
    Exercise(
        "disagree-zero2-saving-at-8",
        "The ZeRO paper's \"8×\" is ZeRO-2's limit 16/(2 + 14/N) for large N. What is ZeRO-2's "
        "model-state saving over dp at N = 8 (×)?",
        lambda: _saving("zero2", 8),
        "×",
        "16/(2 + 14/8) = 16/3.75 = 4.27×: the 8× is approached only as N grows (7.2× at N = 64). "
        "ZeRO-3's saving is N×: 8× at N = 8, which is where the popular \"ZeRO-3 "
        'saves 8×" comes from.',
        mistakes=(
            (
                8,
                "8× is ZeRO-2's large-N limit, and ZeRO-3's saving at N = 8 — "
                "not ZeRO-2's at N = 8.",
            ),
        ),
        hint="2Ψ of fp16 parameters stay whole on every device.",
        devices=8,
    ),
    Exercise(
        "disagree-zero3-above-zero2-bytes",
        "Ψ = 1e6 parameters gathered as **one** unit (the whole model), N = 2, `mixed_adam`. "
        "By how many bytes does zero3's peak exceed zero2's?",
        lambda: _peak_gap(10**6, 2, 1),
        "bytes",
        "zero3: 16Ψ/N + gather window 2Ψ + gradient bucket 2Ψ; zero2: 2Ψ + 14Ψ/N + bucket 2Ψ. The "
        "gap is 2Ψ/N = 1,000,000 B. With u units it is 2Ψ/N + 2Ψ/u − 2Ψ: positive only when the "
        "unit is (almost) the whole model, as on a small model wrapped once.",
        mistakes=(
            (
                -1_000_000,
                "that is model state (zero3 holds less); the question is the peak, with the "
                "gather window and the bucket.",
            ),
        ),
        hint=(
            "write both peaks as persistent + transient terms; the 2Ψ bucket appears on both sides."
        ),
        devices=2,
    ),
    Exercise(
        "disagree-accelerate-fp16-per-param",
        '`accelerate estimate-memory`, float16, "Training using Adam": how many bytes per '
        "parameter does it print (the model has no buffers)?",
        lambda: Fraction(accelerate_training(10**9, "float16").total_bytes, 10**9),
        "B/param",
        "Accelerate prints the largest of four phases (the optimizer's 2 × 4Ψ = 8Ψ), not what is "
        "alive at once: mixed-precision Adam keeps 16Ψ (mixed_adam) through the step.",
        mistakes=(
            (
                16,
                "16 B/param is the sum alive at once (mixed_adam); Accelerate "
                "prints its largest phase.",
            ),
        ),
        hint="B = 4Ψ (the fp32 model); the phases are B, 1.5B, 2B, 2B — and it prints one of them.",
    ),
)
