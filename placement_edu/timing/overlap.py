"""How communication hides under compute (SPEC §9): the overlap models.

- ``overlapped``       the collectives "bucketed" overlaps unit by unit, with their units
- ``bucketed_exposed`` what one micro-batch's pass leaves exposed under "bucketed"
- ``exposed``          the overlap models, "none", "per_pass", "per_pass+tp" and "bucketed"
- ``bubble_time``      a pipeline stage's idle seconds
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Sequence

from placement_edu.errors import one_of, positive_int
from placement_edu.names import Word
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import Model, ModelOrPsi, as_model, stage_units
from placement_edu.placement import BATCH_AXES, GATHERED, State
from placement_edu.precision import Precision, get_precision
from placement_edu.schedule import (
    REDUCTIONS,
    Op,
    OpKind,
    Schedule,
    derive_schedule,
    model_axis_degree,
    pipeline_bubble,
)
from placement_edu.strategies import Strategy, get_strategy
from placement_edu.timing.communication import PASSES, op_link, op_time
from placement_edu.timing.hardware import Hardware, get_hardware


#: How communication may hide under compute (SPEC §9). "none": every collective waits for compute
#: and compute for it; "per_pass": each pass's collectives run under that pass's compute, except
#: tensor parallelism's, which the next matmul waits for (``on_critical_path``); "per_pass+tp":
#: those hide too, as Megatron's ``--tp-comm-overlap`` (Transformer Engine) arranges. "bucketed"
#: (and "bucketed+tp"): between the two extremes -- gradient reductions and parameter gathers
#: run unit by unit beside one micro-batch's compute, the last reduction bucket and the first
#: gathered unit exposed (``overlapped``, ``bucketed_exposed``).
class Overlap(Word):
    """The overlap models (a ``Word``: each equals, hashes and prints as its name)."""

    NONE = "none"
    PER_PASS = "per_pass"
    PER_PASS_TP = "per_pass+tp"
    BUCKETED = "bucketed"
    BUCKETED_TP = "bucketed+tp"


OVERLAPS: tuple[Overlap, ...] = tuple(Overlap)
#: The models that hide gradient reductions and parameter gathers unit by unit.
BUCKETED = frozenset({Overlap.BUCKETED, Overlap.BUCKETED_TP})
#: The models under which tensor parallelism's collectives on the critical path hide too.
HIDES_TENSOR = frozenset({Overlap.PER_PASS_TP, Overlap.BUCKETED_TP})
#: PyTorch DDP's default gradient bucket: ``bucket_cap_mb=25``, read as MiB
#: (``DistributedDataParallel``: ``bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)``).
#: Megatron-LM's default is max(40e6, 1e6·d) parameters per bucket (``DistributedDataParallelConfig
#: .bucket_size``); this model uses DDP's for every strategy whose parameters are whole on the
#: data axis (dp, zero1, zero2).
BUCKET_BYTES = 25 * 2**20


def overlaps_by_unit(op: Op) -> bool:
    """Whether "bucketed" overlaps ``op`` unit by unit: a gradient reduction (all-reduce or
    reduce-scatter of gradients) or a parameter all-gather, on a batch axis (data, replica)."""
    return op.axis in BATCH_AXES and (
        (op.state is State.GRADS and op.op in REDUCTIONS)
        or (op.state is State.PARAMS and op.op == OpKind.ALL_GATHER)
    )


@dataclass(frozen=True)
class Overlapped:
    """One kind of collective "bucketed" overlaps unit by unit: ``op`` on ``axis`` in ``phase``
    (as the schedule has it), ``seconds`` per step, run ``runs`` times per step (1, or m: once
    per micro-batch) in ``units`` units each -- buckets of ``BUCKET_BYTES``, or the gather units
    (layers) on rank 0's pipeline stage where the parameters are gathered (FSDP, ZeRO-3)."""

    op: str
    axis: str
    phase: str
    seconds: float
    runs: int
    units: int
    unit: str = "bucket"  # or "layer": a gather unit

    @property
    def hides_under(self) -> str:
        """The pass whose compute it runs beside: its own; for the optimizer step's parameter
        all-gather (ZeRO-1/2), the next step's first forward, where Megatron-LM's
        ``--overlap-param-gather`` moves it."""
        return "forward" if self.phase == "step" else self.phase

    @property
    def unit_s(self) -> float:
        """Seconds of one unit in each run, summed over the runs (A/u): what stays exposed --
        the first unit gathered before any compute, the last bucket reduced after it."""
        return self.seconds / self.units


def units_on_stage(model: Model, stages: int) -> int:
    """Gather units (FSDP's wrapped layers) on rank 0's pipeline stage (``stage_units``)."""
    return stage_units(model.gather_units, model.layers, stages, 0)


def overlapped(
    strategy: str | Strategy,
    model: ModelOrPsi,
    mesh: Mesh | str,
    precision: str | Precision,
    hw: str | Hardware,
    schedules: tuple[Schedule, Schedule] | None = None,
) -> tuple[Overlapped, ...]:
    """The collectives of one step that "bucketed" overlaps unit by unit (``overlaps_by_unit``),
    one ``Overlapped`` per (op, axis, phase). Seconds are affine in m (as
    ``planner.comm_seconds``): priced at m = 1 and m = 2 (``schedules``: those two, already
    derived) and extended; a kind whose seconds double from m = 1 to 2 runs once per
    micro-batch (ZeRO-2/3's reductions, resharded gathers), else once per step (dp and ZeRO-1's
    reduction after the last micro-batch, fsdp_grad_op's first forward gather, the step's
    all-gather). Units: the gather units on rank 0's stage (``units_on_stage``) where the
    parameters are gathered on that axis (FSDP reduce-scatters and gathers unit by unit), else
    ⌈bytes of one run / ``BUCKET_BYTES``⌉ (DDP's buckets; Megatron-LM's distributed optimizer
    gathers the parameters bucket by bucket too)."""
    strategy, model, mesh = get_strategy(strategy), as_model(model), as_mesh(mesh)
    precision, hw = get_precision(precision), get_hardware(hw)
    m = strategy.micro_batches
    if schedules is None:
        schedules = (
            derive_schedule(strategy.with_(micro_batches=1), model, mesh, precision),
            derive_schedule(strategy.with_(micro_batches=2), model, mesh, precision),
        )
    seconds: list[dict[tuple[str, str, str], float]] = [{}, {}]
    payload: dict[tuple[str, str, str], Fraction] = {}
    for at, schedule in zip(seconds, schedules):
        for op, times in schedule.counted():
            link = None if op.once or not overlaps_by_unit(op) else op_link(op, hw, mesh)
            if link is None:
                continue
            key: tuple[str, str, str] = (op.op, op.axis or "", op.phase)
            at[key] = at.get(key, 0.0) + times * op_time(op, link, hw.collectives)
            if at is seconds[0]:  # m = 1: one run
                payload[key] = payload.get(key, Fraction(0)) + times * op.payload_bytes
    one, two = seconds
    stages = model_axis_degree(strategy, mesh, "pipeline")
    out = []
    for key in sorted(one, key=lambda k: (PASSES.index(k[2]), k)):
        s1, s2 = one[key], two.get(key, 0.0)
        layers = strategy.placement.mode(State.PARAMS, key[1]) in GATHERED
        if layers:
            units = units_on_stage(model, stages)
        else:
            units = max(1, math.ceil(payload[key] / BUCKET_BYTES))
        runs = m if s2 > 1.5 * s1 else 1
        unit = "layer" if layers else "bucket"
        out.append(Overlapped(*key, s1 + (m - 1) * (s2 - s1), runs, units, unit))
    return tuple(out)


def bucketed_exposed(
    seconds: float, unit_s: float, units: int | None, compute_s: float, other_s: float = 0.0
) -> float:
    """Seconds exposed in one micro-batch's pass under "bucketed": ``seconds`` of unit-wise
    collectives in ``units`` units (None: none), of which ``unit_s`` (the first unit gathered, the
    last bucket reduced) cannot overlap ``compute_s`` of compute, and ``other_s`` of the pass's
    other overlappable collectives, which may run beside any of it.

    Derivation, one reduction of A seconds in k buckets of A/k behind backward compute of B
    seconds in k chunks of B/k (bucket j is ready when chunk j ends, and one stream sends the
    buckets in turn): the last bucket ends at max over j of (j·B/k + (k - j + 1)·A/k) =
    max(B + A/k, B/k + A), so the exposed time is A/k + max(0, (A - B)·(k - 1)/k): the last
    bucket alone while A <= B; k = 1 exposes all of A ("none"), k -> ∞ leaves max(0, A - B)
    ("per_pass"). Gathers are the mirror image: the first unit before any compute, unit j + 1
    beside chunk j. With other collectives beside them, two bounds: the unit-wise rest fits
    in the compute after the first chunk, and everything left fits in all of it --
    unit_s + max(0, seconds - unit_s - compute_s·(1 - 1/k), seconds - unit_s + other_s -
    compute_s); k the fewest units of the pass's unit-wise collectives."""
    if units is None:
        return max(0.0, seconds + other_s - compute_s)
    rest = seconds - unit_s
    return unit_s + max(0.0, rest - compute_s * (1 - 1 / units), rest + other_s - compute_s)


def bucketed_by_pass(
    compute: Mapping[str, float],
    comm: Mapping[str, float],
    waited: Mapping[str, float],
    streams: Sequence[Overlapped],
    m: int,
) -> dict[str, float]:
    """ "bucketed"'s exposed seconds per pass (``exposed`` sums them): m micro-batches of compute
    C/m each. A kind run once per micro-batch puts A/m beside each; one run once per step
    (``runs`` = 1) sits beside one micro-batch's compute only (the last backward, the first
    forward); the pass's other overlappable collectives spread A/m over each, hidden as
    "per_pass" hides them; ``waited`` (on the critical path) stays exposed."""
    out: dict[str, float] = {}
    moved = sum(s.seconds for s in streams if s.phase != s.hides_under)
    for p in sorted(set(comm) | set(compute)):  # one order: the same float every run
        if p not in ("forward", "backward"):  # the step: no compute; what is not moved waits
            out[p] = max(0.0, comm.get(p, 0.0) - (moved if p == "step" else 0.0))
            continue
        mine = [s for s in streams if s.hides_under == p]
        every = [s for s in mine if s.runs == m]
        once = [s for s in mine if s.runs != m]
        wait = waited.get(p, 0.0)
        other = comm.get(p, 0.0) - wait - sum(s.seconds for s in mine if s.phase == p)
        c, o = compute.get(p, 0.0) / m, other / m
        a = sum(s.seconds for s in every) / m
        tail = sum(s.unit_s for s in every) / m
        regular = bucketed_exposed(a, tail, min((s.units for s in every), default=None), c, o)
        if not once:
            out[p] = wait + m * regular
            continue
        last = bucketed_exposed(
            a + sum(s.seconds for s in once),
            tail + sum(s.unit_s for s in once),
            min(s.units for s in every + once),
            c,
            o,
        )
        out[p] = wait + (m - 1) * regular + last
    return out


def exposed(
    compute: Mapping[str, float],
    comm: Mapping[str, float],
    overlap: str,
    critical: Mapping[str, float] | None = None,
    streams: Sequence[Overlapped] = (),
    micro_batches: int = 1,
) -> float:
    """Seconds of communication not hidden under compute (SPEC §9). ``critical``: per pass, the
    seconds of ``comm`` that are ``on_critical_path`` (tensor parallelism's; none if not given).

    "none": all of it. "per_pass": the critical seconds, plus in each pass what the rest exceeds
    that pass's compute, max(0, comm - critical - compute); the step phase has no compute, so its
    collectives (zero1/zero2's parameter all-gather) stay exposed. "per_pass+tp": the critical
    seconds hide too, max(0, comm - compute).

    "bucketed" (``streams``: ``overlapped``'s collectives; ``micro_batches``: m): each micro-batch's
    pass hides its collectives as ``bucketed_exposed`` says, the first gathered unit and the last
    reduced bucket exposed; a reduction run once per step hides under the last micro-batch's
    backward only, and the step's parameter all-gather moves into the next step's first forward.
    Sources: PyTorch DDP (buckets of ``bucket_cap_mb`` = 25 all-reduced as backward fills them,
    the last one after backward; Li et al. 2020, "PyTorch Distributed", §3.2.3); Megatron-LM's
    ``--overlap-grad-reduce`` (only in the last micro-batch's backward) and
    ``--overlap-param-gather`` (the distributed optimizer's all-gather, bucket by bucket, in the
    next forward); FSDP's backward and forward prefetch (Zhao et al. 2023, "PyTorch FSDP", §3.3:
    unit by unit, the first unit's all-gather and the last unit's reduce-scatter exposed).
    "bucketed+tp": the critical seconds hide too, as under "per_pass+tp"."""
    one_of("overlap model", overlap, OVERLAPS)
    if overlap == Overlap.NONE:
        return sum(comm.values())
    waited = {} if critical is None or overlap in HIDES_TENSOR else critical
    if overlap in BUCKETED:
        m = positive_int("micro_batches", micro_batches)
        return sum(bucketed_by_pass(compute, comm, waited, streams, m).values())
    return sum(
        waited.get(p, 0.0) + max(0.0, comm.get(p, 0.0) - waited.get(p, 0.0) - compute.get(p, 0.0))
        for p in sorted(set(comm) | set(compute))  # one order: the same float every run
    )


def bubble_time(
    compute_s: float,
    stages: int,
    micro_batches: int,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
) -> float:
    """Seconds a pipeline stage idles: (p-1)/m of the ideal (bubble-free) time (``pipeline_bubble``,
    the of_ideal convention, Narayanan et al. 2021 §2.2); (p-1)/(v·m) under interleaved 1F1B
    (§2.2.2), (p-1)/(3m) under zero bubble (Qi et al. 2024, ZB-H1)."""
    bubble = pipeline_bubble(stages, micro_batches, schedule, virtual_stages)["of_ideal"]
    return float(bubble) * compute_s if stages > 1 else 0.0
