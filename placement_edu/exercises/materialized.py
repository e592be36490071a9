"""Exercises of the notebook "Materialized: activations, made in forward and freed by backward"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.memory import derive_memory, in_flight
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.models.shapes import SEVEN_B_CLASS
from placement_edu.precision import get_precision
from placement_edu.report import analyze
from placement_edu.strategies import PipelineSchedule, Strategy, get_strategy
from placement_edu.units import GB

#: GPT-3 175B's shape (Brown et al. 2020; Korthikanti et al. 2022, Table 3), one sequence of 2048.
GPT3 = TransformerSpec(
    layers=96, hidden=12288, heads=96, seq=2048, vocab=51200, micro_batch=1, name="GPT-3 175B"
)
#: The live-set explorer's 7B-class model for the pipeline questions (32 layers, h = 4096),
#: selective recomputation.
SEVEN_B = SEVEN_B_CLASS


def _pipelined(schedule: str, micro_batches: int) -> Strategy:
    return get_strategy("pp").with_(micro_batches=micro_batches, pipeline_schedule=schedule)


def live_set_bytes(schedule: str, stages: int, micro_batches: int, stage: int = 0) -> Fraction:
    """Activation bytes pipeline ``stage`` holds at its peak (SEVEN_B, mixed_adam): the core's."""
    strategy = _pipelined(schedule, micro_batches)
    memory = derive_memory(
        strategy, SEVEN_B, Mesh.of(pipeline=stages), get_precision("mixed_adam"), stage
    )
    return Fraction(memory.transient_peak("activations"))


def micro_batches_held(schedule: str, stages: int, micro_batches: int) -> int | Fraction:
    """How many micro-batches' activations stage 0 holds at its peak: the core's count
    (``memory.in_flight``), which ``derive_memory`` multiplies one micro-batch's bytes by."""
    return in_flight(_pipelined(schedule, micro_batches), stages, 0)


def _activation_ratio(strategy: str, n: int) -> Fraction:
    model = TransformerSpec(layers=32, hidden=4096, heads=32, seq=2048, vocab=51200)
    ours, dp = (analyze(s, model, n).memory.transient_peak("activations") for s in (strategy, "dp"))
    return Fraction(ours, dp)


EXERCISES = (
    Exercise(
        "materialized-175b-layer-gb",
        "GPT-3 175B (h = 12288, a = 96), one sequence of s = 2048 (b = 1), no parallelism, no "
        "recomputation, 16-bit: how many GB (1e9 bytes) of activations does **one** layer "
        "keep for backward?",
        lambda: Fraction(GPT3.activation_bytes_per_layer(1)) / GB,
        "GB (1e9 bytes)",
        "s·b·h·(34 + 5as/h) = 25,165,824 × (34 + 80) bytes = 2.869 GB per layer, 275 GB for 96 "
        "layers: far more than the 80 GB of one GPU, before any model state. The 5as/h = 80 term "
        "(attention scores, quadratic in s) is the larger part at s = 2048.",
        mistakes=(
            (
                Fraction(GPT3.activation_bytes_per_layer(1) * 2, GB),
                "that multiplies by 2 bytes per element again: Korthikanti's coefficients are "
                "already bytes of 16-bit tensors (SPEC §3).",
            ),
            (
                Fraction(34 * 2048 * 12288, GB),
                "that is sbh·34 alone: without recomputation the attention scores, "
                "5as/h·sbh, are kept too.",
            ),
        ),
        hint="sbh(34 + 5as/h), with s·b·h = 2048 × 1 × 12288.",
    ),
    Exercise(
        "materialized-1f1b-stage0",
        "A pipeline of p = 4 stages runs m = 8 micro-batches with the 1F1B schedule. How many "
        "micro-batches' activations does stage 0 hold at its peak?",
        lambda: micro_batches_held(PipelineSchedule.ONE_F_ONE_B, 4, 8),
        "micro-batches",
        "1F1B starts a micro-batch's backward as soon as it can: stage 0 runs p = 4 forwards "
        "before its first backward arrives, then alternates, so it never holds more than p − stage "
        "= 4 (SPEC §4). The last stage holds 1.",
        mistakes=(
            (8, "8 = m is GPipe: all forwards first, then all backwards."),
            (
                1,
                "1 is the last stage (p − stage = 1), or gradient accumulation without a pipeline.",
            ),
        ),
        hint="min(p − stage, m).",
        exact=True,
    ),
    Exercise(
        "materialized-gpipe-over-1f1b",
        "Same pipeline (p = 4, m = 8, a 7B-class model, selective recomputation): how many "
        "times larger is stage 0's GPipe activation peak than its 1F1B peak (GPipe ÷ 1F1B)?",
        lambda: (
            live_set_bytes(PipelineSchedule.GPIPE, 4, 8)
            / live_set_bytes(PipelineSchedule.ONE_F_ONE_B, 4, 8)
        ),
        "×",
        "GPipe keeps m = 8 micro-batches in flight, 1F1B p = 4: 2×. Same bubble, (p − 1)/m of "
        "ideal time, for both: 1F1B's gain is memory, not time.",
        mistakes=(
            (Fraction(1, 2), "that is 1F1B over GPipe; the question asks GPipe over 1F1B."),
            (1, "the bubbles are equal; the live sets are not."),
        ),
        hint="m / min(p, m).",
    ),
    Exercise(
        "materialized-zero3-activations",
        "A transformer trained with `zero3` on N = 8 devices: what fraction of `dp`'s "
        "activation bytes per device does `zero3` keep (a number, e.g. `1/8`)?",
        lambda: _activation_ratio("zero3", 8),
        "× dp's",
        "1: activations are M under every ZeRO stage. ZeRO-3's N× is a model-state reduction; the "
        "activations and the peak are not divided by N (SPEC §8). Each device still runs its own "
        "micro-batch through every layer.",
        mistakes=(
            (
                Fraction(1, 8),
                "ZeRO shards P, G and O, not A: activations belong to the device's own "
                "samples, and it needs all of them for its backward.",
            ),
        ),
        hint="which of P, G, O, A does ZeRO-3 split?",
        devices=8,
    ),
)
