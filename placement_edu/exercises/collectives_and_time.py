"""Exercises of the notebook "Collectives and time": ring bytes, α–β seconds, compute-bound
tokens."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.mesh import Mesh
from placement_edu.models import ModelSpec
from placement_edu.placement import State
from placement_edu.schedule import Op, OpKind, ring_bytes
from placement_edu.timing import Hardware, Link, compute_bound_tokens, op_time

#: The link of the α–β exercise: α = 10 µs per ring step, W = 50 GB/s (InfiniBand NDR, one NIC
#: per GPU).
LINK = Link(10e-6, 50e9, "exercise: InfiniBand NDR-like")
#: The hardware of the threshold exercise: 400e12 FLOP/s achieved, W = 100 GB/s, no latency, every
#: device in one node.
THRESHOLD_HW = Hardware("exercise", 400e12, 80 * 2**30, Link(0.0, 100e9))


def _all_gather_ms() -> float:
    # S = 64e6 bytes of output: 32e6 bf16 elements, gathered over 8 devices.
    return (
        op_time(Op(OpKind.ALL_GATHER, State.PARAMS, "data", "forward", 32_000_000, 2, 8), LINK)
        * 1e3
    )


EXERCISES = (
    Exercise(
        "collectives-all-reduce-ring-bytes",
        "A ring all-reduce of S = 1e9 bytes over N = 8 devices: how many bytes does each "
        "device send?",
        lambda: ring_bytes(OpKind.ALL_REDUCE, 8, 10**9),
        "bytes",
        "2(N−1)/N · S = 2·7/8 · 1e9 = 1.75e9: a reduce-scatter ((N−1)/N · S) followed by an "
        "all-gather ((N−1)/N · S). Each of the 2(N−1) ring steps sends one chunk of S/N.",
        mistakes=(
            (
                2 * 10**9,
                "2S is ZeRO's convention (an all-reduce counts 2Ψ); a ring sends 2(N−1)/N · S, "
                "a little less.",
            ),
            (
                Fraction(7, 8) * 10**9,
                "that is half of it: one reduce-scatter or one all-gather. An all-reduce is both.",
            ),
            (
                10**9,
                "each device sends more than its own tensor: the reduce-scatter's (N−1)/N, then "
                "the all-gather's (N−1)/N.",
            ),
        ),
        hint="all-reduce = reduce-scatter + all-gather; each sends (N−1)/N of S.",
        devices=8,
    ),
    Exercise(
        "collectives-all-gather-time",
        "An all-gather whose full output is S = 64e6 bytes, over N = 8 devices, on a link of "
        "α = 10 µs per ring step and W = 50 GB/s (5e10 bytes per second): how many "
        "**milliseconds** does it take in the α–β model?",
        _all_gather_ms,
        "ms",
        "α·(N−1) + (N−1)/N · S / W = 7 × 10 µs + 7/8 × 64e6 / 5e10 s = 0.07 ms + 1.12 ms = 1.19 "
        "ms. At this size latency is 6% of the time; at 64 KB it would be most of it.",
        mistakes=(
            (
                1.12,
                "that is the bandwidth term only: add α for each of the N−1 ring steps (0.07 ms).",
            ),
            (1.35, "a device sends (N−1)/N of S, not all of S: its own slice is already there."),
            (2.38, "that is an all-reduce: 2(N−1) steps and 2(N−1)/N · S."),
        ),
        hint="α times the ring steps, plus the bytes this device sends over W.",
        devices=8,
    ),
    Exercise(
        "collectives-dp-threshold",
        "`dp` on N = 8 devices, `mixed_adam` (2-byte gradients), per-pass overlap, each "
        "device achieving 400e12 FLOP/s on a data link of W = 100 GB/s (1e11 bytes per "
        "second) with α = 0: above how many tokens per device is the step compute-bound?",
        lambda: compute_bound_tokens(
            "dp", ModelSpec(10**9), Mesh.of(data=8), "mixed_adam", THRESHOLD_HW, "per_pass"
        ),
        "tokens per device",
        "dp's all-reduce runs in backward, so it must hide under backward's 4Ψ·T/F: 4Ψ·T/F ≥ "
        "2·(7/8)·2Ψ/W, T ≥ (7/8)·F/W = 0.875 × 4000 = 3500 tokens. Ψ cancels: "
        "both sides grow with it.",
        mistakes=(
            (4000, "F/W is the large-N limit: at N = 8 the ring sends only (N−1)/N = 7/8 of it."),
            (
                Fraction(7000, 3),
                "that is the 'none' view (comm against the whole 6Ψ·T/F step); under "
                "per-pass overlap the all-reduce hides only under backward's 4Ψ·T/F.",
            ),
            (
                1750,
                "that is zero1/zero2's per-pass threshold: their reduce-scatter is half of dp's "
                "all-reduce (their parameter all-gather after the step stays exposed).",
            ),
        ),
        hint="per pass: backward's compute 4Ψ·T/F against dp's all-reduce, 2(N−1)/N · 2Ψ / W.",
        devices=8,
    ),
)
