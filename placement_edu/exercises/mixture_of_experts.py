"""Exercises of the notebook "Mixture of experts" (issue 26, item 4): expert placement, the
all-to-all's bytes, the gradient groups, load imbalance. Mixtral 8x7B (``MIXTRAL_8X7B``: T = 4,096
tokens a micro-batch, h = 4,096, E = 8, top-2, capacity factor 1) on data=2,expert=4, mixed
precision (16 B of model state a parameter, 2-byte activations)."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.experts import MIXTRAL_8X7B, rank_load
from placement_edu.memory import derive_memory
from placement_edu.mesh import Mesh
from placement_edu.precision import get_precision
from placement_edu.schedule import OpKind, derive_schedule
from placement_edu.strategies import get_strategy
from placement_edu.units import GB

MESH = Mesh.of(data=2, expert=4)
MIXED = get_precision("mixed_adam")


def _sent_per_all_to_all() -> int:
    """Bytes one rank sends in one MoE all-to-all: the ring bytes of the core's op."""
    schedule = derive_schedule(get_strategy("dp"), MIXTRAL_8X7B, MESH, MIXED)
    return int(next(o.ring_bytes for o in schedule.ops if o.op == OpKind.ALL_TO_ALL))


def _all_to_alls_per_micro_batch() -> int:
    schedule = derive_schedule(get_strategy("dp"), MIXTRAL_8X7B, MESH, MIXED)
    return sum(o.op == OpKind.ALL_TO_ALL for o in schedule.ops)


EXERCISES = (
    Exercise(
        "moe-all-to-all-sent",
        "Mixtral 8x7B on data=2,expert=4 (T = 4,096 tokens, top-2, capacity factor 1, h = 4,096, "
        "2-byte activations): how many bytes does one rank send in one MoE all-to-all?",
        _sent_per_all_to_all,
        "bytes",
        "The buffer holds E·C slots of h: C = ⌈k·cf·T/E⌉ = ⌈2·4096/8⌉ = 1,024, so 8·1,024·4,096 "
        "elements, 67,108,864 B. The rank keeps the quarter bound for its own experts and sends "
        "(e-1)/e of it: 50,331,648 B (3 steps of α on the ring's row of the cost table).",
        mistakes=(
            (67_108_864, "that is the whole buffer: the 1/e bound for this rank's experts stays."),
            (25_165_824, "that is top-1: each token goes to k = 2 experts, twice the slots."),
        ),
        hint="C = ⌈k·cf·T/E⌉; the buffer E·C·h elements of 2 B; (e-1)/e of it leaves the rank.",
        devices=4,
    ),
    Exercise(
        "moe-all-to-alls-per-micro-batch",
        "Mixtral 8x7B (32 MoE layers) on an expert axis: how many all-to-alls does one rank run "
        "per micro-batch?",
        _all_to_alls_per_micro_batch,
        "all-to-alls",
        "4 per MoE layer: dispatch and combine in forward, the same two reversed in backward "
        "(autograd's backward of an all-to-all is an all-to-all); 4 × 32 = 128.",
        mistakes=(
            (64, "that is forward only: backward runs the two all-to-alls again, reversed."),
            (32, "each MoE layer runs more than one: dispatch and combine, forward and backward."),
        ),
        hint="dispatch, combine; forward, backward; × layers.",
        exact=True,
    ),
    Exercise(
        "moe-model-state-gb",
        "Mixtral 8x7B on data=2,expert=4 with dp's placement (16 B of model state a parameter): "
        "how many GB (1e9 bytes) of model state does one rank hold?",
        lambda: Fraction(
            derive_memory(get_strategy("dp"), MIXTRAL_8X7B, MESH, MIXED, 0).model_state, GB
        ),
        "GB (1e9 bytes)",
        "16 B × (dense + expert/e) = 16 × (1,605,636,096 + 45,097,156,608/4) = 206.08 GB: the "
        "dense weights (attention, router, norms, embeddings) stay whole on every rank (R on "
        "expert), only the experts are split (S). E/e = 2 = k: a rank holds exactly the active "
        "parameters, 12.9B.",
        mistakes=(
            (
                Fraction(747_244_683_264, 4 * GB),
                "that divides everything by e: the dense weights are R on the expert axis, whole.",
            ),
            (
                Fraction(747_244_683_264, GB),
                "that is the whole model: the experts are S on expert.",
            ),
            (
                Fraction(16 * 45_097_156_608, 4 * GB),
                "that is the experts only: the dense weights (attention, router, norms, "
                "embeddings) are on every rank too, whole.",
            ),
        ),
        hint="dense elements whole, expert elements ÷ e, × 16 B.",
        devices=4,
    ),
    Exercise(
        "moe-dropped-tokens",
        "Mixtral 8x7B on 4 expert ranks, capacity factor 1: the busiest rank is chosen by half of "
        "all the routed tokens (balanced: a quarter). How many routed tokens does it drop per MoE "
        "layer and micro-batch?",
        lambda: rank_load(MIXTRAL_8X7B, 4, Fraction(1, 2)).dropped,
        "tokens",
        "The 4 ranks route 4·4,096·2 = 32,768 copies; half, 16,384, want the busiest rank. Its 2 "
        "experts take C = 1,024 from each of the 4 ranks: E·C = 8,192 slots. It runs 8,192 and "
        "drops 8,192 (their tokens skip the experts: the residual carries them on). Dropless "
        "(Megatron's default) it would run all 16,384: twice the balanced time, which every rank "
        "waits for at the combine.",
        mistakes=(
            (0, "that is dropless: under a capacity factor each expert takes at most C tokens."),
            (16_384, "that is what it is sent; it runs E·C = 8,192 of them."),
        ),
        hint="copies routed: e·T·k; the busiest wants half; it keeps E·C.",
        devices=4,
        exact=True,
    ),
)
