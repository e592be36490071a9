"""Exercises of the notebook "Composition and planning" (SPEC §6: memory multiplies, communication
adds, the replica axis; and the planner's choice for a 70B model on 64 devices)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from placement_edu.memory import derive_memory
from placement_edu.mesh import Mesh
from placement_edu.models import ModelSpec
from placement_edu.placement import State
from placement_edu.planner import default_transformer
from placement_edu.pricing import compose
from placement_edu.precision import get_precision
from placement_edu.report import analyze
from placement_edu.schedule import OpKind
from placement_edu.exercises import Exercise
from placement_edu.units import GB

#: Ψ = 70e9 as an abstract model that tensor and pipeline axes can price (80 layers,
#: b·s·h = 4096·8192).
PSI_70B = ModelSpec(psi=70_000_000_000, layers=80, boundary_elements=4096 * 8192)


def _optimizer_gb() -> Fraction:
    r = analyze("zero1×tp×pp", PSI_70B, mesh="data=4,tensor=8,pipeline=2")
    return Fraction(r.memory.device[State.OPTIMIZER]) / GB


def _data_reduction_elements() -> int:
    r = analyze("dp×tp", PSI_70B, mesh="data=8,tensor=8")
    [op] = [o for o in r.schedule.collectives if o.axis == "data"]
    return int(op.elements)


def _hsdp_divisor() -> int:
    r = analyze("hsdp", PSI_70B, mesh="replica=4,data=8")
    [scale] = [o for o in r.schedule.per_step if o.op == OpKind.SCALE]
    return scale.group


def _dp_over_gb() -> Fraction:
    """How far plain dp on 64 devices is over an 80 GB budget at its best (full recomputation), as
    the planner prices it: 1,024 sequences per step, m = 1024/64 micro-batches of one sequence."""
    model, _ = default_transformer(70 * 10**9)
    strategy = compose("dp", Mesh.of(data=64), 1024 // 64)
    peak = derive_memory(
        strategy, replace(model, recompute="full"), Mesh.of(data=64), get_precision("mixed_adam")
    ).peak
    return (Fraction(peak) - 80 * GB) / GB


EXERCISES = (
    Exercise(
        "composition-optimizer-gb",
        "`zero1×tp×pp` on data=4, tensor=8, pipeline=2 (64 devices), Ψ = 70e9, `mixed_adam`: "
        "how many GB of optimizer state does one device hold?",
        _optimizer_gb,
        "GB (1e9 bytes)",
        "O is S on all three axes, so memory multiplies: 12Ψ/(d·t·p) = 12 × 70e9 / 64 = 13.125 GB "
        "(the fp16 parameters, S on tensor and pipeline only, are 2Ψ/16 = 8.75 GB).",
        mistakes=(
            (
                Fraction(525, 10),
                "that is 12Ψ/(t·p): the optimizer state is also S on data (ZeRO-1), "
                "so divide by d too.",
            ),
            (Fraction(210), "that is 12Ψ/d: tensor and pipeline split the optimizer state too."),
        ),
        devices=64,
        hint="divide by the degree of every axis on which the state is S.",
    ),
    Exercise(
        "composition-data-reduction-elements",
        "`dp×tp` on data=8, tensor=8, Ψ = 70e9: how many elements does the data-axis gradient "
        "all-reduce carry per step on one device (S in SPEC §4's sense)?",
        _data_reduction_elements,
        "elements",
        "communication adds, each axis on what the others left: a tensor rank holds Ψ/t of the "
        "gradient, so the data-axis all-reduce moves Ψ/t = 8.75e9 elements, not Ψ (SPEC §6).",
        mistakes=(
            (
                70_000_000_000,
                "that is Ψ: each device holds only its tensor slice of the gradient, "
                "Ψ/t, and that is what the data axis reduces.",
            ),
            (
                70_000_000_000 // 64,
                "the data axis does not shard the gradient here (dp: G is R on data); "
                "only tensor divides it.",
            ),
        ),
        hint="what does one device hold of the gradient before the data-axis reduction?",
        devices=8,
    ),
    Exercise(
        "composition-hsdp-scale",
        "`hsdp` on replica=4, data=8 (32 devices): the summed gradient is divided once, by "
        "what number?",
        _hsdp_divisor,
        "",
        "both axes split the batch: reduce-scatter on data (8), all-reduce of the slice on replica "
        "(4), then one division by r·d = 32 -- every sample counted once, the same "
        "normalisation (SPEC §5, §6).",
        mistakes=(
            (
                8,
                "replica splits the batch too: its groups see different samples, so "
                "the mean is over r·d.",
            ),
            (4, "data splits the batch as well: divide by r·d."),
        ),
        hint="count the ways the batch is split.",
        exact=True,
    ),
    Exercise(
        "planning-dp-over-budget",
        "Ψ = 70e9 on 64 devices of 80 GB (the planner's Llama-2-70B-shaped model above, 1,024 "
        "sequences per step): by how many GB does plain dp exceed the budget at its best, "
        "with full recomputation?",
        _dp_over_gb,
        "GB (1e9 bytes)",
        "16Ψ = 1,119.99 GB of replicated model state on every device, plus the layer inputs full "
        "recomputation keeps (2·s·b·h per layer: 80 × 2 × 4096 × 8192 B = 5.37 GB) and, while "
        "one layer's backward runs, that layer's recomputed activations (s·b·h·(34 + 5as/h) = "
        "4096 × 8192 × 194 B = 6.51 GB): 1,131.9 GB, about 1,051.9 GB over. Only splitting the "
        "model state across devices can fit it.",
        mistakes=(
            (
                Fraction(1040),
                "that is 16 × 70 − 80: dp's peak also holds the activations of one micro-batch.",
            ),
            (
                _dp_over_gb() - Fraction(4096 * 8192 * 194, GB),
                "that leaves out the 6.51 GB of the recomputed layer's activations "
                "(s·b·h·(34 + 5as/h)), live while its backward runs.",
            ),
            (
                _dp_over_gb() - Fraction(80 * 2 * 4096 * 8192, GB),
                "that leaves out the 5.37 GB of layer inputs full recomputation keeps "
                "(2·s·b·h per layer, 80 layers).",
            ),
        ),
        hint="replicated P + G + O is 16 bytes per parameter; add one micro-batch's activations.",
        devices=64,
    ),
)
