"""Exercises of the notebook "Replicated (R): data parallelism"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.exercises.derived import model_state_gb
from placement_edu.implementations import ddp_buckets, mlp_model, parse_model
from placement_edu.precision import get_precision
from placement_edu.report import analyze

#: The MLP the notebook trains with DistributedDataParallel: six 1024-wide hidden layers, so that
#: its float64 gradient (42.6 MB) fills DDP's 1 MiB first bucket, a 25 MiB bucket, and a remainder.
DDP_MODEL = "mlp:64,1024,1024,1024,1024,1024,1024,16"
#: The exercise's MLP: another shape, so that the learner applies the bucket rule themselves.
EXERCISE_MODEL = "mlp:256,2048,2048,2048,256"


def ddp_bucket_bytes(model: str = DDP_MODEL, step: int = 1) -> list[int]:
    """Bytes of each all-reduce DDP issues at ``step`` for ``model`` in float64: the core's tensors,
    ``implementations.ddp_buckets``'s rule."""
    element = get_precision("fp64_adam").grads
    tensors = mlp_model(parse_model(model), "zero", "model").tensors
    return ddp_buckets([t.numel * element for t in tensors], step)


def _startup_payload(psi: float, n: int) -> Fraction:
    """Bytes the start-up broadcasts carry (rule 4): the core's schedule, start-up phase only."""
    return sum(
        (Fraction(o.payload_bytes) for o in analyze("dp", psi, n).schedule.ops if o.once),
        Fraction(0),
    )


EXERCISES = (
    Exercise(
        "replicated-model-state",
        "Ψ = 70e9 parameters on N = 8 devices with plain data parallelism (`dp`, "
        "`mixed_adam`): how many GB (1e9 bytes) of model state does **one** device hold?",
        lambda: model_state_gb("dp", 70e9, 8),
        "GB (1e9 bytes)",
        "every state is replicated: each device holds the whole 2Ψ + 2Ψ + 12Ψ = 16Ψ = 1,120 GB, "
        "whatever N is. Adding devices to dp adds throughput, never memory headroom.",
        mistakes=(
            (
                140,
                "140 GB is 16Ψ/N: that is zero3 (SG), where every state is "
                "split. A replica is whole.",
            ),
            (
                Fraction(1120 * 10**9, 2**30),
                "that is the same bytes in GiB (2^30): the question asks GB.",
            ),
            (
                280,
                "280 GB is 4Ψ, parameters and gradients only: the optimizer's "
                "12Ψ is replicated too.",
            ),
        ),
        hint=(
            "R: persistent bytes per device = |s|. Add P, G and O at 2, 2 and 12 "
            "bytes per parameter."
        ),
        devices=8,
    ),
    Exercise(
        "replicated-ring-bytes",
        "Ψ = 1e9 parameters, 2-byte gradients, N = 4 devices, `dp`. How many bytes does "
        "**one** device send in the ring all-reduce of the gradients, per step (exact ring "
        "bytes, SPEC §4)?",
        lambda: int(analyze("dp", 1e9, 4).ring_bytes),
        "bytes",
        "a ring all-reduce of S bytes is a reduce-scatter then an all-gather, each sending "
        "(N−1)/N·S: 2·(3/4)·2e9 = 3e9 bytes. ZeRO's convention rounds this up to 2S = 2Ψ "
        "elements = 4e9 bytes.",
        mistakes=(
            (
                4 * 10**9,
                "4e9 is ZeRO's convention, 2S: the exact ring sends 2(N−1)/N·S, which approaches "
                "2S only as N grows.",
            ),
            (2 * 10**9, "2e9 is S, the payload: an all-reduce sends about twice its payload."),
            (
                Fraction(3, 2) * 10**9,
                "that is one ring pass, (N−1)/N·S: an all-reduce is two passes "
                "(reduce-scatter, then all-gather).",
            ),
        ),
        hint="ring all-reduce: 2(N−1)/N · S, with S = Ψ × 2 bytes.",
        devices=4,
    ),
    Exercise(
        "replicated-startup-broadcast",
        "Ψ = 1e9 parameters (2-byte working copy), N = 8, `dp`, a run of 1,000 optimizer "
        "steps. How many bytes of payload do the parameter broadcasts carry over the **whole "
        "run** (SPEC §4 rule 4)?",
        lambda: int(_startup_payload(1e9, 8)),
        "bytes",
        "one broadcast at start-up makes the replicas identical; after that, identical updates "
        "(from the same all-reduced gradient) keep them identical, so no broadcast is needed "
        "again: 2e9 bytes in total.",
        mistakes=(
            (
                2 * 10**12,
                "that broadcasts every step: replicas that start identical and get identical "
                "updates stay identical (state consistency, SPEC §5).",
            ),
            (
                0,
                "skipping it is the fault unsynced-init: ranks that start from different seeds "
                "never agree, however well the gradients are reduced.",
            ),
        ),
        hint="rule 4: replicated states start identical -- how often must that be done?",
        devices=8,
    ),
    Exercise(
        "replicated-ddp-buckets",
        f"DistributedDataParallel trains `{EXERCISE_MODEL}` (Linears 256→2048→2048→2048→256 "
        "with biases; float64, 8 bytes per gradient element) with its default buckets. How "
        "many all-reduces does it issue at the **second** step (step index 1)? Use the rule "
        "above, not a run.",
        lambda: len(ddp_bucket_bytes(EXERCISE_MODEL)),
        "all-reduces",
        "from the second step DDP fills buckets in reverse parameter order. The last Linear "
        "(4,196,352 B) already passes 1 MiB: bucket 1. The next bucket closes at 25 MiB = "
        "26,214,400 B, which one 2048×2048 Linear (33,570,816 B with its bias) passes alone: "
        "buckets 2 and 3. The first Linear (4,210,688 B) is the remainder: 4 all-reduces, the same "
        "bytes as one all-reduce of the whole gradient, split so that "
        "communication overlaps backward.",
        mistakes=(
            (
                1,
                "one bucket is the FIRST step (DDP starts with a single bucket and rebuilds its "
                "buckets once it has seen the order gradients become ready), or the placement's "
                "ideal schedule.",
            ),
            (8, "that is one all-reduce per tensor: DDP packs tensors into buckets."),
            (
                3,
                "the 25 MiB cap closes a bucket as soon as it is passed, so each 2048×2048 Linear "
                "(32 MiB) fills one on its own.",
            ),
        ),
        hint=(
            "ddp_buckets: reverse parameter order; close the first bucket at ≥ 1 MiB, the "
            "later ones at ≥ 25 MiB."
        ),
        exact=True,
    ),
)
