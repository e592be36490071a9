"""Exercises of the notebook "Sharded (S): ZeRO-1 and ZeRO-2"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.exercises.derived import model_state_gb
from placement_edu.implementations import DEFAULT_MODEL, mlp_model, parse_model
from placement_edu.memory import derive_memory
from placement_edu.mesh import Mesh
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.report import analyze, compare
from placement_edu.strategies import get_strategy
from placement_edu.units import GB


def greedy_optimizer_bytes(rank: int, n: int = 4, model: str = DEFAULT_MODEL) -> int:
    """Optimizer bytes ``rank`` holds under ZeroRedundancyOptimizer's greedy rule (float64 Adam:
    16 bytes per element) for ``model``: the core's derivation of zero1_allreduce."""
    concrete = mlp_model(parse_model(model), "greedy", "model")
    memory = derive_memory(
        get_strategy("zero1_allreduce"), concrete, Mesh.of(data=n), get_precision("fp64_adam"), rank
    )
    return int(memory.device[State.OPTIMIZER])


def _memory_ratio(strategy: str, psi: float, n: int) -> Fraction:
    c = compare([strategy], psi, n)
    return Fraction(c.baseline.memory.model_state) / Fraction(c.reports[0].memory.model_state)


EXERCISES = (
    Exercise(
        "sharded-zero1-memory",
        "Ψ = 70e9 parameters on N = 8 devices, `zero1` (optimizer state sharded), "
        "`mixed_adam`: how many GB (1e9 bytes) of model state does one device hold?",
        lambda: model_state_gb("zero1", 70e9, 8),
        "GB (1e9 bytes)",
        "P and G stay whole (2Ψ + 2Ψ = 280 GB); only the 12Ψ of fp32 master weights, m and v is "
        "split: 840/8 = 105 GB. 4Ψ + 12Ψ/N = 385 GB.",
        mistakes=(
            (Fraction(1120, 8), "140 GB is 16Ψ/N, zero3: zero1 splits only the optimizer state."),
            (Fraction(2625, 10), "262.5 GB is zero2 (2Ψ + 14Ψ/N): zero1 keeps the whole gradient."),
        ),
        hint="R costs |s|, S costs |s|/N: which of P, G, O are S in zero1?",
        devices=8,
    ),
    Exercise(
        "sharded-zero2-vs-dp",
        'ZeRO\'s paper says ZeRO-2 cuts model-state memory by "8×". At N = 64 (Ψ = 7.5e9, '
        "`mixed_adam`), by how many times exactly does `zero2` hold less model state than "
        "`dp` (within 0.1%)?",
        lambda: _memory_ratio("zero2", 7.5e9, 64),
        "× (dp / zero2)",
        '16Ψ / (2Ψ + 14Ψ/N) = 16 / (2 + 14/64) = 7.21×. The "8×" is this ratio\'s limit as N '
        "grows: the whole 2Ψ of fp16 parameters stays on every device (SPEC §8).",
        mistakes=(
            (
                8,
                "8× is the limit 16/2 for N → ∞; at N = 64 the 14Ψ/N term "
                "still counts. Compute it.",
            ),
            (64, "64× is zero3 (16Ψ/N): zero2 keeps the parameters whole."),
        ),
        hint="divide dp's 16Ψ by zero2's 2Ψ + 14Ψ/N.",
        tolerance=1e-3,
        devices=64,
    ),
    Exercise(
        "sharded-zero1-allreduce-volume",
        "PyTorch's `ZeroRedundancyOptimizer` under DDP (`zero1_allreduce`) all-reduces the "
        "gradient, then each owner broadcasts its updated parameters. How many Ψ per device "
        "per step is that (ZeRO's convention)?",
        lambda: analyze("zero1_allreduce", 7.5e9, 64).volume_psi,
        "Ψ",
        "all-reduce 2Ψ + broadcasts Ψ (every parameter is sent once, by its owner) = 3Ψ. ZeRO §7's "
        "schedule reduce-scatters (Ψ) and all-gathers (Ψ): 2Ψ for the same placement. Both are "
        "real ZeRO-1s; say which schedule a figure belongs to (SPEC §4 rule 1, §8).",
        mistakes=(
            (
                2,
                "2Ψ is ZeRO §7's schedule (reduce-scatter + all-gather), keyed on O's placement; "
                "ZeroRedundancyOptimizer keys on G: G is whole, so it all-reduces.",
            ),
            (1, "the broadcast alone: the gradient still has to be summed first."),
        ),
        hint="all-reduce counts 2Ψ; each parameter is broadcast once by its owner.",
    ),
    Exercise(
        "sharded-greedy-last-rank",
        f"`ZeroRedundancyOptimizer` on N = 4 ranks trains the MLP above, `{DEFAULT_MODEL}` "
        "(tensors of 8192, 128, 16384, 128, 2048 and 16 elements), with float64 Adam (m and "
        "v: 16 bytes per element). It gives whole tensors, largest first, to the least-loaded "
        "rank. How many bytes of optimizer state does **rank 3** hold (exactly)? Work it out "
        "by hand first.",
        lambda: greedy_optimizer_bytes(3),
        "bytes",
        "16384 → rank 0, 8192 → rank 1, 2048 → rank 2, then rank 3 (empty) takes 128, is still the "
        "least loaded and takes the other 128, and then the 16: 272 elements × 16 B = 4,352 B, "
        "against 262,144 B on rank 0. Whole tensors cannot be cut evenly: the largest "
        "tensor sets the peak.",
        mistakes=(
            (
                430336 // 4,
                "that is the ideal |O|/N: the greedy rule gives whole tensors, so slices "
                "are uneven.",
            ),
            (
                128 * 16,
                "after the first 128, rank 3 (128 elements) is still less loaded than rank 2 "
                "(2048): it takes the second 128 and the 16 too.",
            ),
        ),
        hint="place 16384, 8192, 2048, 128, 128, 16 one by one on the least-loaded of 4 ranks.",
        devices=4,
        exact=True,
    ),
    Exercise(
        "sharded-zero2-peak",
        "Ψ = 7.5e9, N = 64, `zero2`, `mixed_adam`. Its model state is 16.640625 GB. What is "
        "its **peak** in GB, counting the gradient bucket that backward holds unreduced "
        "before its reduce-scatter? (A bare Ψ is Llama-2-7B's L = 32 layers, each layer's "
        "gradient reduce-scattered as soon as backward has made it.)",
        lambda: Fraction(analyze("zero2", 7.5e9, 64).memory.peak) / GB,
        "GB (1e9 bytes)",
        'S for gradients means "kept as a slice between steps": backward still produces each '
        "layer's whole partial gradient (2Ψ/32 = 0.46875 GB) before its reduce-scatter leaves each "
        "device its 1/N. Peak = 16.640625 + 0.46875 = 17.109375 GB. Reduced all at once (one "
        "unit, ModelSpec(7.5e9)) the bucket would be the whole 2Ψ = 15 GB: 31.640625 GB.",
        mistakes=(
            (
                Fraction(16640625, 10**6),
                "that is the persistent model state; the transient bucket "
                "comes on top (SPEC §2: S's transient bytes).",
            ),
            (
                Fraction(31640625, 10**6),
                "that holds the whole 2Ψ gradient unreduced at once (a one-unit model); each of "
                "the 32 layers is reduce-scattered on its own: the bucket is 2Ψ/32.",
            ),
        ),
        hint="peak = persistent + the largest transient term, here one layer's gradient bucket "
        "(2Ψ/L, L = 32).",
        devices=64,
    ),
)
