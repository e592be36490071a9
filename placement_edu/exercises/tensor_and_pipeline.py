"""Exercises of the notebook "Tensor and pipeline parallelism" (SPEC §4: Megatron TP, pipeline
bubbles, micro-batches in flight, and ZeRO-2/3 under micro-batching)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.memory import in_flight
from placement_edu.models import TransformerSpec
from placement_edu.report import Report, analyze
from placement_edu.schedule import OpKind, pipeline_bubble
from placement_edu.strategies import PipelineSchedule, get_strategy

#: The transformer of the TP exercises: GPT-2-XL-like widths, 24 layers, b = 2 sequences of 2,048.
TP_MODEL = TransformerSpec(layers=24, hidden=4096, heads=32, seq=2048, vocab=50257, micro_batch=2)


def _tp_report(recompute: str = "none") -> Report:
    return analyze("tp", replace(TP_MODEL, recompute=recompute), mesh="tensor=4")


def _all_reduces(recompute: str) -> int:
    return sum(o.op == OpKind.ALL_REDUCE for o in _tp_report(recompute).schedule.collectives)


def _payload() -> int:
    return int(_tp_report().schedule.collectives[0].payload_bytes)


def _in_flight(stages: int, m: int, schedule: str, stage: int = 0) -> int | Fraction:
    """Micro-batches whose activations ``stage`` holds at its peak: the core's count
    (``memory.in_flight``, which ``derive_memory`` multiplies one micro-batch's bytes by)."""
    return in_flight(
        get_strategy("pp").with_(micro_batches=m, pipeline_schedule=schedule), stages, stage
    )


EXERCISES = (
    Exercise(
        "tp-allreduces-full-recompute",
        "A 24-layer transformer runs Megatron tensor parallelism on `tensor=4` with **full** "
        "activation recomputation, one micro-batch per step. How many all-reduces does one "
        "device issue per step?",
        lambda: _all_reduces("full"),
        "all-reduces",
        "2 per layer in forward (g after attention and after the MLP), 2 in backward (f's input "
        "gradients), and full recomputation replays the 2 forward ones before backward: 6 per "
        "layer, 144 for 24 layers (Korthikanti et al. 2022, §4).",
        mistakes=(
            (
                96,
                "that is 4 per layer, without recomputation: full recomputation reruns each "
                "layer's forward in backward, and with it the forward's 2 all-reduces.",
            ),
            (
                192,
                "recomputation replays the forward only: the backward all-reduces are not doubled.",
            ),
            (
                48,
                "that counts forward only: each forward all-reduce has a backward partner (f and g "
                "are conjugate).",
            ),
        ),
        hint="count per layer: forward, recomputed forward, backward -- two blocks each.",
        devices=4,
        exact=True,
    ),
    Exercise(
        "tp-ring-bytes-per-step",
        "The same model (b = 2, s = 2,048, h = 4,096, 16-bit activations) without "
        "recomputation, `tensor=4`: how many bytes does one device **send** for tensor "
        "parallelism per step (exact ring bytes)?",
        lambda: int(_tp_report().ring_bytes),
        "bytes",
        "96 all-reduces of b·s·h·2 = 33,554,432 bytes each, and a ring all-reduce sends 2(t−1)/t = "
        "1.5 times its payload: 96 × 1.5 × 33,554,432 = 4,831,838,208 bytes -- about 4.8 GB per "
        "micro-batch, whatever Ψ is: tensor-parallel traffic scales with the activations.",
        mistakes=(
            (
                96 * 33_554_432,
                "that counts each all-reduce's payload once: a ring all-reduce sends "
                "2(t−1)/t of it (a reduce-scatter and an all-gather).",
            ),
            (
                96 * 2 * 33_554_432,
                "that is ZeRO's convention (an all-reduce counts 2S); the exact ring "
                "bytes are 2(t−1)/t·S, 1.5·S at t = 4.",
            ),
            (
                96 * 16_777_216 * 3 // 2,
                "that counts elements, not bytes: activations are 2 bytes each.",
            ),
            (
                24 * 6 * 3 * 33_554_432 // 2,
                "that counts 6 all-reduces per layer, full recomputation's count (its replay adds "
                "two); without recomputation a layer has 4: f and g, forward and backward.",
            ),
        ),
        hint=(
            "bytes of one payload = b·s·h·2; count the all-reduces; a ring all-reduce sends "
            "2(t−1)/t of its payload."
        ),
        devices=4,
    ),
    Exercise(
        "pp-bubble-of-total",
        "A pipeline of p = 8 stages runs m = 32 micro-batches per step. What fraction of the "
        "**total** step time is bubble (as a fraction or a decimal)?",
        lambda: pipeline_bubble(8, 32)["of_total"],
        "of total time",
        "(p−1)/(m+p−1) = 7/39 ≈ 17.9% of total time -- the same bubble is (p−1)/m = 7/32 ≈ 21.9% "
        "of the ideal, bubble-free time (Narayanan et al. 2021 quote this one). "
        "Say which you quote.",
        mistakes=(
            (
                Fraction(7, 32),
                "that is (p−1)/m, the bubble as a fraction of the ideal (bubble-free) "
                "time; the question asks for a fraction of the total.",
            ),
        ),
        hint="total = ideal + bubble, in units of one micro-batch's pass: m + p − 1.",
    ),
    Exercise(
        "pp-1f1b-in-flight",
        "p = 8 stages, m = 32 micro-batches, 1F1B: how many micro-batches' activations does "
        "stage 0 hold at its peak?",
        lambda: _in_flight(8, 32, PipelineSchedule.ONE_F_ONE_B),
        "micro-batches",
        "1F1B runs p − 1 = 7 warm-up forwards, then one more forward before its first backward: p "
        "= 8 in flight on stage 0, whatever m is (Narayanan et al. 2021, §2.2.1). "
        "GPipe would hold all 32.",
        mistakes=(
            (32, "that is GPipe, which runs every forward before any backward."),
            (
                7,
                "that counts the warm-up forwards only: stage 0 runs one more forward before the "
                "first backward frees micro-batch 0.",
            ),
        ),
        hint="follow stage 0's order: warm-up forwards, then forward/backward pairs.",
        exact=True,
    ),
    Exercise(
        "pp-zero3-micro-batched-volume",
        "`zero3` on `data=8` with m = 8 micro-batches per step (pipeline or gradient "
        "accumulation, no local unsharded accumulator): how many Ψ does one device send per "
        "step (ZeRO's convention)?",
        lambda: analyze(get_strategy("zero3").with_(micro_batches=8), 7.5e9, 8).volume_psi,
        "Ψ",
        "each micro-batch gathers the parameters for forward (Ψ) and again for backward (Ψ) and "
        "reduce-scatters its gradient slice (Ψ): 3Ψ × 8 = 24Ψ (SPEC §4 rule 5) -- why DeepSpeed "
        "forbids ZeRO-2/3 with pipeline parallelism, and why FSDP's no_sync trades +|G| of "
        "memory for one reduction.",
        mistakes=(
            (
                3,
                "that is zero3 with one micro-batch: a sharded gradient cannot be accumulated "
                "locally, so the reduce-scatter -- and the gathers -- repeat per micro-batch.",
            ),
            (
                9,
                "that is zero2 at m = 8 (8 reduce-scatters and one all-gather after the step); "
                "zero3 also gathers the parameters twice per micro-batch.",
            ),
            (
                10,
                "the gathers repeat per micro-batch too: each micro-batch's forward and backward "
                "needs the whole parameters.",
            ),
        ),
        hint="count one micro-batch's collectives in Ψ, then multiply.",
        devices=8,
    ),
)
