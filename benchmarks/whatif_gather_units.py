"""What two proposed changes to the abstract memory model would move (issue 25, item 2): nothing
in the package changes; this prints the figures today and under each change, for the lead.

(k) An abstract model given only as Ψ gathers the whole model as one unit (``ModelSpec``'s
    ``gather_units=1``), so README's first table shows zero3's peak above zero2's. Per-layer units
    instead: the same Ψ as L units (L from ``default_transformer``, the shape the planner assumes).
(l) The gather window holds one unit; FSDP's forward and backward prefetch keep the next unit's
    gathered parameters alive too (Zhao et al. 2023, "PyTorch FSDP", §3.3). With two units live
    the window is min(2 units, the whole state) for strategies that reshard after forward.

Run: .venv/bin/python benchmarks/whatif_gather_units.py
"""

from __future__ import annotations

from placement_edu import (
    ModelSpec,
    analyze,
    default_transformer,
    derive_memory,
    get_precision,
    plan,
)
from placement_edu.memory import GATHER_WINDOW, REDUCE_BUCKET, Memory
from placement_edu.placement import PHASES, State
from placement_edu.planner import _shaped
from placement_edu.units import GB

STRATEGIES = ("dp", "zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op")


def prefetched_peak(memory: Memory, data_degree: int, stages: int = 1) -> float:
    """The peak with one more unit gathered in each phase whose window is a single unit (never
    more than the whole of this device's parameters, its slice times the data degree). With
    ``stages`` > 1, each unit is first made a stage's layer: ``IdealSlices.unit_runs`` divides
    the stage's share by all L units, not by the L/p the stage holds, so a one-unit window and
    the reduce bucket come out p times too small under pipeline parallelism."""
    whole = memory.device[State.PARAMS] * data_degree
    totals = []
    for phase in PHASES:
        terms = memory.transient.get(phase, {})
        window, bucket = terms.get(GATHER_WINDOW, 0), terms.get(REDUCE_BUCKET, 0)
        one_unit = window < whole  # resharded after forward: one unit, not the whole state
        extra = (stages - 1) * (bucket + (window if one_unit else 0))
        if one_unit:
            window *= stages
            extra += min(window, whole - window)
        totals.append(memory.phase_total(phase) + extra)
    return float(memory.model_state + max(totals))


def readme_table(psi: int, devices: int) -> None:
    shape, _ = default_transformer(psi)
    units = shape.layers
    print(f"(k) README's table, Ψ = {psi:,}, N = {devices}: peak in GB")
    print(f"{'strategy':14s} {'one unit':>12s} {f'{units} units':>12s} {'+ prefetch':>12s}")
    for name in STRATEGIES:
        one = analyze(name, ModelSpec(psi), devices).memory
        per_layer = analyze(name, ModelSpec(psi, layers=units, gather_units=units), devices)
        prefetched = prefetched_peak(per_layer.memory, devices)
        print(
            f"{name:14s} {float(one.peak) / GB:12.6g} {float(per_layer.memory.peak) / GB:12.6g} "
            f"{prefetched / GB:12.6g}"
        )


def planner_top(psi: int, devices: int, budget: int) -> None:
    shape, assumption = default_transformer(psi)
    result = plan(shape, devices, budget, "h100-nvlink-ib", assumption=assumption)
    print(f"\n(l) the planner's top 5, Ψ = {psi:.3g}, {devices} H100s, {budget / GB:g} GB: peak GB")
    over = over_units = 0
    for choice in result.ranked:
        shaped = _shaped(shape, choice.recompute, choice.strategy.sequence_parallel)
        memory = derive_memory(choice.strategy, shaped, choice.mesh, get_precision("mixed_adam"))
        data, stages = choice.mesh.degree("data"), choice.mesh.degree("pipeline")
        after = prefetched_peak(memory, data)
        units = prefetched_peak(memory, data, stages)
        over += after > budget
        over_units += units > budget
        if choice in result.ranked[:5]:
            print(
                f"  {choice.label():84s} {float(memory.peak) / GB:7.2f} -> {after / GB:7.2f}"
                f" (stage units: {units / GB:7.2f})"
            )
    print(f"  plans that fit today and would not with the prefetched unit: {over}")
    print(f"  ... with units of a stage's layers and the prefetched unit: {over_units}")


if __name__ == "__main__":
    readme_table(7_500_000_000, 64)
    planner_top(70 * 10**9, 64, 80 * 10**9)
