"""Exercises of the notebook "Activations and recomputation" (Korthikanti et al. 2022, arXiv
2205.05198)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from placement_edu.exercises import Exercise
from placement_edu.models import TransformerSpec
from placement_edu.timing import flops_per_token
from placement_edu.units import GB


def gpt3(**changes: Any) -> TransformerSpec:
    """GPT-3 175B (Korthikanti et al. 2022, Table 3): L = 96, h = 12288, a = 96, s = 2048, b = 1."""
    return TransformerSpec(
        **{
            "layers": 96,
            "hidden": 12288,
            "heads": 96,
            "seq": 2048,
            "vocab": 51200,
            "micro_batch": 1,
            **changes,
        }
    )


EXERCISES = (
    Exercise(
        "activations-175b-t8-gb",
        "GPT-3 175B at tensor-parallel degree t = 8, no sequence parallelism, no "
        "recomputation: how many GB (1e9 bytes) of activations does one layer keep on one "
        "tensor rank, per sequence?",
        lambda: Fraction(gpt3().activation_bytes_per_layer(8)) / GB,
        "GB (1e9 bytes)",
        "sbh(10 + 24/t + 5as/(ht)) = sbh(10 + 3 + 10) = 23·sbh = 0.579 GB. The 10·sbh outside the "
        "tensor-parallel blocks (layernorm and block inputs, dropout masks) is whole on every "
        "rank: tensor parallelism alone divides 114·sbh by 4.96, not by 8.",
        mistakes=(
            (
                # = gpt3(sequence_parallel=True).activation_bytes_per_layer(8), the same number
                Fraction(gpt3().activation_bytes_per_layer(1), 8 * GB),
                "that divides everything by t, sbh(34/t + 5as/(ht)): that is with sequence "
                "parallelism; tensor parallelism alone leaves 10·sbh replicated.",
            ),
        ),
        hint="sbh(10 + 24/t + 5as/(ht)), sbh = 2048 × 12288.",
        devices=8,
    ),
    Exercise(
        "activations-sp-selective-factor",
        "GPT-3 175B at t = 8: by what factor do sequence parallelism plus selective "
        "recomputation shrink the activations of the tensor-parallel baseline (within 1%)?",
        lambda: Fraction(
            gpt3().activation_bytes_per_layer(8),
            gpt3(sequence_parallel=True, recompute="selective").activation_bytes_per_layer(8),
        ),
        "×",
        "23·sbh / (34/8)·sbh = 92/17 ≈ 5.4×: the paper's headline 'reduces activation memory by "
        "5x'. Sequence parallelism splits the 10·sbh, selective recomputation drops the 5as/(ht) "
        "term (the attention scores, cheap to recompute and the largest term at long s).",
        mistakes=(
            (
                8,
                "8 = t: the baseline is already tensor-parallel; the factor is over that baseline.",
            ),
        ),
        hint="sbh(10 + 24/t + 5as/(ht)) ÷ sbh·34/t.",
        tolerance=1e-2,
        devices=8,
    ),
    Exercise(
        "activations-full-recompute-flops",
        "A dense transformer costs 6Ψ FLOPs per token per step (2Ψ forward, 4Ψ backward). How "
        "many Ψ with **full** recomputation?",
        lambda: Fraction(sum(flops_per_token(1, "full").values())),
        "Ψ per token",
        "8Ψ: backward replays the forward (2Ψ) before its own 4Ψ: 33% more compute for a layer's "
        "activations shrinking to its 2sbh input. Selective recomputation replays only attention's "
        "softmax and dropout, not counted in 6Ψ: it costs ~nothing (Korthikanti: 2.7% of FLOPs at "
        "GPT-3 scale).",
        mistakes=(
            (12, "only the forward is replayed, not the backward."),
            (6, "6Ψ is without recomputation."),
        ),
        hint="forward 2Ψ, backward 4Ψ, and the replayed forward.",
    ),
    Exercise(
        "activations-zero3-divides",
        "True or False: at N = 8, ZeRO-3 divides a device's activation bytes by 8.",
        lambda: False,
        "",
        "False: ZeRO-3's N× is a model-state reduction. Activations belong to each device's own "
        "samples and are materialized (M) under every ZeRO stage; only tensor/sequence "
        "parallelism, pipeline stages, smaller micro-batches or recomputation "
        "shrink them (SPEC §8).",
        hint="which states does ZeRO-3 shard?",
    ),
)
