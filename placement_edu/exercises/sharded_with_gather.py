"""Exercises of the notebook "Sharded-with-gather (SG): ZeRO-3 and FSDP"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.schedule import OpKind
from placement_edu.implementations import DEFAULT_MODEL, TorchRefConfig, fsdp2_order, predict
from placement_edu.models import ModelSpec
from placement_edu.report import analyze
from placement_edu.strategies import get_strategy
from placement_edu.units import GB, GiB


def peak_gap_gb(psi: int, n: int, units: int) -> Fraction:
    """zero3's peak minus zero2's, in GB, for an abstract model gathered in ``units`` units."""
    model = ModelSpec(psi, gather_units=units)
    return (
        Fraction(analyze("zero3", model, n).memory.peak - analyze("zero2", model, n).memory.peak)
        / GB
    )


def fsdp2_last_rank_params(n: int = 3) -> int:
    """Parameter bytes the last of ``n`` ranks stores under FSDP2's dim-0 chunks (float64),
    unpadded."""
    return predict(TorchRefConfig("fsdp2", n, steps=1))[n - 1]["params"]


EXERCISES = (
    Exercise(
        "sg-zero3-gib",
        "Ψ = 70e9 on N = 8 devices, `zero3`, `mixed_adam`: 16Ψ/N = 140 GB of model state per "
        "device. How many **GiB** (2^30 bytes) is that (within 0.1%)?",
        lambda: Fraction(analyze("zero3", 70e9, 8).memory.model_state) / GiB,
        "GiB (2^30 bytes)",
        "140e9 / 2^30 = 130.39 GiB. A GiB is 7.4% larger than a GB, so the GiB figure is the "
        "smaller number; nvidia-smi and DeepSpeed's estimators print GiB "
        '(DeepSpeed labels it "GB").',
        mistakes=(
            (133, "133 GiB is a popular guide's conversion (SPEC §8): 140e9 / 2^30 = 130.39."),
            (140, "140 is the figure in GB (1e9 bytes); the question asks GiB (2^30 bytes)."),
            (
                Fraction(140 * GB * 8, GiB),
                "that is dp's 1,120 GB in GiB: zero3 divides all of P, G and O by N.",
            ),
        ),
        hint="GiB = bytes / 2^30.",
        tolerance=1e-3,
        devices=8,
    ),
    Exercise(
        "sg-micro-batch-volume",
        "`zero3` with gradient accumulation over m = 4 micro-batches per optimizer step, each "
        "micro-batch gathering the parameters before forward and again before backward and "
        "reduce-scattering its gradient (no unsharded accumulator). How many Ψ per device per "
        "optimizer step (ZeRO's convention)?",
        lambda: analyze(get_strategy("zero3").with_(micro_batches=4), 7.5e9, 64).volume_psi,
        "Ψ",
        "every micro-batch repeats the whole 3Ψ: two all-gathers (the parameters were freed again) "
        "and one reduce-scatter (the gradient slice is accumulated sharded): 4 × 3Ψ = 12Ψ, against "
        "dp's 2Ψ, which accumulates its whole gradient locally and all-reduces "
        "once (SPEC §4 rule 5).",
        mistakes=(
            (
                3,
                "3Ψ is one micro-batch: an SG parameter is freed after use, so every micro-batch "
                "gathers it again, and a sharded gradient is reduced as it is produced.",
            ),
            (
                6,
                "that repeats the gathers but reduces once: without an unsharded accumulator the "
                "reduce-scatter runs per micro-batch too.",
            ),
        ),
        hint="rule 5: what repeats per micro-batch?",
    ),
    Exercise(
        "sg-peak-gap",
        "A small model with Ψ = 1e9 that FSDP wraps as **one** gather unit (the whole model), "
        "N = 8, `mixed_adam`. By how many GB does `zero3`'s **peak** exceed `zero2`'s?",
        lambda: peak_gap_gb(10**9, 8, 1),
        "GB (1e9 bytes)",
        "zero3: 16Ψ/N + a gather window of 2Ψ + a gradient bucket of 2Ψ = 6 GB; zero2: 2Ψ + 14Ψ/N "
        "+ its 2Ψ bucket = 5.75 GB. The gap is 2Ψ/N = 0.25 GB: zero3's own parameter slice, kept "
        "while the whole is gathered. Model state shrinks 8×, the peak does not (SPEC §8).",
        mistakes=(
            (
                Fraction(-1, 1),
                "zero3's model state is smaller, but its peak adds the whole gathered model.",
            ),
            (
                2,
                "the gather window (2Ψ) is matched by zero2's whole-gradient bucket; what is left?",
            ),
        ),
        hint="write both peaks: persistent + the largest phase (backward); subtract.",
        devices=8,
    ),
    Exercise(
        "sg-fsdp2-last-rank",
        f"FSDP2 shards each tensor of the MLP `{DEFAULT_MODEL}` along dim 0 into chunks of "
        "ceil(rows/N) rows, N = 3. Weights (128, 64), (128, 128), (16, 128) and biases of "
        "128, 128 and 16; float64 (8 bytes). How many bytes of parameters does the **last** "
        "rank store (its real rows, no padding; exactly)?",
        fsdp2_last_rank_params,
        "bytes",
        "128 rows → chunks of 43, 43, 42; 16 rows → 6, 6, 4. Rank 2: 42·64 + 42 + 42·128 + 42 + "
        "4·128 + 4 = 8,664 elements = 69,312 B. Its collectives still move the padded 43- and "
        "6-row chunks (72,928 B of storage each): the padding is reported, not hidden.",
        mistakes=(
            (
                72928,
                "72,928 B is the padded chunk the collectives move (storage_params); the last rank "
                "holds fewer real rows.",
            ),
            (
                Fraction(215168, 3),
                "that is the ideal |P|/N: FSDP2 cuts whole rows, ceil(rows/N) at a time.",
            ),
        ),
        hint="per tensor: rows on the last rank = rows − 2·ceil(rows/3).",
        devices=3,
        exact=True,
    ),
    Exercise(
        "sg-root-kept-gathers",
        "FSDP2 with its default `reshard_after_forward=None` on a 3-Linear MLP: each Linear "
        "is one unit, the root owns the last. How many all-gathers does one training step "
        "issue?",
        lambda: sum(op == OpKind.ALL_GATHER for op, _ in fsdp2_order(3, None)),
        "all-gathers",
        "forward gathers all 3 units; backward gathers again the 2 that were resharded after "
        "forward, but not the root, which FSDP2 keeps (its backward runs first, right after "
        "forward): 3 + 2 = 5, one fewer than reshard_after_forward=True's 6.",
        mistakes=(
            (
                6,
                "6 is reshard_after_forward=True: None keeps the root unit gathered into backward.",
            ),
            (
                3,
                "3 is reshard_after_forward=False (SHARD_GRAD_OP): every unit "
                "kept through backward.",
            ),
        ),
        hint="count forward's gathers, then backward's re-gathers of the units that were freed.",
        exact=True,
    ),
)
