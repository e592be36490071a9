"""Exercises of the notebook "Start here": reading a placement as bytes and copies."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.models import ModelSpec, Number
from placement_edu.placement import State
from placement_edu.report import analyze
from placement_edu.strategies import get_strategy


def _device_bytes(strategy: str, state: State, psi: int, n: int, rank: int = 0) -> Number:
    return analyze(strategy, ModelSpec(psi), n, rank=rank).memory.device[state]


def _full_copies(strategy: str, state: State, psi: int, n: int) -> int:
    """How many of the n ranks keep the whole state on their device (the core's bytes, rank by
    rank)."""
    whole = psi * analyze(strategy, ModelSpec(psi), n).precision.bytes_per(state)
    return sum(_device_bytes(strategy, state, psi, n, rank) == whole for rank in range(n))


EXERCISES = (
    Exercise(
        "start-here-zero2-grad-bytes",
        "Ψ = 1e9 parameters, N = 8 devices, `mixed_adam` (2 B per gradient element): how many "
        "bytes of gradients does one **zero2** rank keep between steps?",
        lambda: _device_bytes("zero2", State.GRADS, 10**9, 8),
        "bytes",
        "zero2 shards the gradients (S): each rank keeps its own 1/N slice, 2 B × 1e9 / 8 = "
        "250,000,000 bytes (0.25 GB). During backward it briefly holds an unreduced bucket before "
        "the reduce-scatter (a transient term, not model state).",
        mistakes=(
            (
                2 * 10**9,
                "that is the whole gradient, 2 B × Ψ: dp and zero1 keep it (G is R there); "
                "zero2 shards it. (It is also 16Ψ/N, zero3's whole model state per rank.)",
            ),
            (1_500_000_000, "that is 12Ψ/N, the optimizer-state slice, not the gradients."),
            (Fraction(1, 8), "that is the fraction 1/N; the question asks for bytes: 2 B × Ψ / N."),
        ),
        hint="G is S under zero2: 2 bytes per element, divided by N.",
        devices=8,
    ),
    Exercise(
        "start-here-zero3-param-mode",
        "Under **zero3**, what mode do the parameters have on the data axis? Answer with the "
        "mode's letters (R, S, SG, M or OFF), as a string.",
        lambda: get_strategy("zero3").placement.mode(State.PARAMS, "data").value,
        "",
        "SG, sharded-with-gather: each rank stores a 1/N slice, but a layer's forward needs the "
        "whole weights, so each unit is all-gathered just before use and freed right after.",
        mistakes=(
            (
                "S",
                "S keeps only the slice and never rebuilds it: that is zero3's gradients and "
                "optimizer state. The parameters are needed whole for forward and backward.",
            ),
            ("R", "R is zero1 and zero2's parameters: a whole copy on every device."),
            ("OFF", "OFF is zero3_offload: the slice lives in host memory."),
        ),
        hint="the parameters are stored sliced, but forward multiplies by whole layers.",
        also=("sharded with gather",),
    ),
    Exercise(
        "start-here-zero1-full-optimizer-copies",
        "Under **zero1** on N = 8 devices, how many devices hold a full copy of the optimizer "
        "state?",
        lambda: _full_copies("zero1", State.OPTIMIZER, 10**9, 8),
        "devices",
        "none: O is S, so its N slices are disjoint and cover the state once; no device holds it "
        "all (the whole exists only as the union of the slices). Under dp all 8 do.",
        mistakes=(
            (
                1,
                "there is no 'owner of everything': each rank owns 1/N, and "
                "updates only that slice.",
            ),
            (8, "that is dp (O replicated); zero1 shards exactly this state."),
        ),
        hint="S means disjoint 1/N slices.",
        devices=8,
        exact=True,
    ),
)
