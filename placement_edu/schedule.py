"""The per-step communication schedule, derived from the placement alone (SPEC §4).

Each entry is one operation one device performs, in execution order: a collective (all-reduce,
reduce-scatter, all-gather, send, recv, broadcast), a host transfer of offloaded state (h2d, d2h),
or a local step that matters for correctness (scale, optimizer_step).

Read top to bottom: SPEC §4's cost table (one table, read by the exact scalar path and by the
numpy sweep), the ``Op`` and ``Schedule`` values, what a placement leaves open on each axis, then
one small function per rule, and ``derive_schedule``, which calls them in execution order. Every
rule keys on the modes along one axis, never on a strategy's name:

- ``startup_broadcasts``     rule 4: replicated parameters start identical
- ``gather_before_use``      rule 3: sliced (SG, OFF) parameters are all-gathered just before use
- ``grad_reduction``         rule 1: which collective resolves a partial gradient (keyed on O)
- ``reduce_partial_grads``   rule 1: one reduction per batch-splitting axis, innermost first
- ``scale_once``             SPEC §5: the summed gradient is divided once, by the batch split
- ``offload_grad_slice``     SPEC §7: an offloaded gradient slice goes down to the host
- ``owner_update_sync``      rule 2: after an owner-only step, the replicas are made whole again
- ``reduces_per_micro_batch`` rule 5: split gradients are reduced once per micro-batch (×m)
- ``tensor_parallel_collectives`` Megatron's f and g on the tensor axis (activations, not Ψ)
- ``sequence_parallel_norms`` SPEC §6 rule 3: tensor-replicated params under sequence parallelism
- ``pipeline_boundary``      boundary activations and their gradients between stages
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from placement_edu.composition import safety_violations
from placement_edu.errors import expect, positive_int
from placement_edu.mesh import Mesh
from placement_edu.models import Model, Number, stage_layers
from placement_edu.placement import (BATCH_AXES, GATHERED, HOST_MODES, SPLIT_MODES, WHOLE, Mode,
                                     State)
from placement_edu.precision import Precision


# --- SPEC §4's cost table ------------------------------------------------------------------
def _over(numerator: Any, n: Any) -> Any:
    """numerator / n: an exact Fraction for whole numbers, float division for numpy arrays."""
    return Fraction(numerator, n) if isinstance(n, int) else numerator / n


@dataclass(frozen=True)
class OpCost:
    """What one kind of op costs over a group of N (SPEC §4, §9), one row of ``OP_COSTS``.

    ``ring``: bytes one device sends, as a multiple of the payload S. It takes an int N (exact
    Fractions) or a numpy array of N (floats): the scalar derivation and the vectorised sweep read
    this one table. ``zero``: the ZeRO paper's volume convention (all-reduce moves 2S, the others
    S). ``steps``: the latency-bound steps of a ring over N > 1 devices (each one α)."""

    ring: Callable[[Any], Any]
    zero: int
    steps: Callable[[int], int]


OP_COSTS: Mapping[str, OpCost] = MappingProxyType({
    "all_reduce": OpCost(lambda n: _over(2 * (n - 1), n), 2, lambda n: 2 * (n - 1)),  # reduce-scatter + all-gather
    "all_gather": OpCost(lambda n: _over(n - 1, n), 1, lambda n: n - 1),           # S = the full output
    "reduce_scatter": OpCost(lambda n: _over(n - 1, n), 1, lambda n: n - 1),       # S = the full input
    "send": OpCost(lambda n: 1 + 0 * n, 1, lambda n: 1),                           # point to point: S by the sender
    # the root sends S to each of the N-1 others; the message passes N-1 hops, every member waits
    "broadcast": OpCost(lambda n: n - 1, 1, lambda n: n - 1),
    # a host transfer crosses the host link, not the network: no ring bytes, one message
    "h2d": OpCost(lambda n: 0 * n, 0, lambda n: 1),
    "d2h": OpCost(lambda n: 0 * n, 0, lambda n: 1),
})
#: Two columns of ``OP_COSTS`` for the network collectives, as notebook 01 prints them.
RING_FACTOR = MappingProxyType({op: c.ring for op, c in OP_COSTS.items() if c.zero})
ZERO_FACTOR = MappingProxyType({op: c.zero for op, c in OP_COSTS.items() if c.zero})
COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "send", "recv", "broadcast"})
HOST_TRANSFERS = frozenset({"h2d", "d2h"})


def ring_factor(op: str, n: int) -> Fraction:
    """Bytes this device sends for ``op`` as a multiple of its payload (recv: counted by the
    sender; a broadcast: by its root, see ``Op.ring_bytes``; local ops: nothing)."""
    return Fraction(OP_COSTS[op].ring(n)) if op in OP_COSTS else Fraction(0)


@dataclass(frozen=True)
class Op:
    """One scheduled operation on one device.

    ``elements``: for a collective, S in SPEC §4's sense (all-gather: the full output; reduce-
    scatter: the full input; all-reduce: the tensor; send/recv/broadcast: the message), padding
    included. ``element_bytes``: bytes per element of that state under the precision preset.
    ``group``: the size of the axis group it runs over (1 for local ops); for ``scale``, the
    divisor (the number of ranks whose contributions were summed).
    ``micro_batches``: for an op that belongs to one micro-batch (a pipeline send or recv; a
    gradient reduction or scale that runs once per micro-batch), that micro-batch, ``(k,)``; ()
    means the step as a whole (e.g. the gradient accumulated over every micro-batch). In a
    ``Repeat`` it is the ``range`` of micro-batches, one per repetition.
    ``stale``: a gather that returns the previous step's slices (the stale-gather fault, SPEC §5).
    ``root``: for a broadcast, this device is its root (it sends; the others receive).
    """

    op: str
    state: State
    axis: str | None
    phase: str
    elements: Number
    element_bytes: int
    group: int = 1
    why: str = ""
    micro_batches: tuple[int, ...] | range = ()
    stale: bool = False
    root: bool = False

    @property
    def is_collective(self) -> bool:
        return self.op in COLLECTIVES

    def key(self) -> tuple:
        """What a measurement sees of the op, and what "measured = predicted" compares."""
        return (self.op, str(self.state), self.axis, self.phase, self.payload_bytes, self.ring_bytes, self.group)

    def describe(self) -> str:
        return (f"{self.phase} {self.op} {self.state} on {self.axis} (group {self.group}){self.for_micro_batches}: "
                f"{self.payload_bytes} B payload, {self.ring_bytes} B sent")

    @property
    def for_micro_batches(self) -> str:
        """" for micro-batch 3", " for micro-batches 0..99" (a repeated op), or ""."""
        ks = self.micro_batches
        if not ks:
            return ""
        one = ks[0] == ks[-1]                      # (a range: no len() beyond 2^63)
        return f" for micro-batch {ks[0]}" if one else f" for micro-batches {ks[0]}..{ks[-1]}"

    @property
    def payload_bytes(self) -> Number:
        return self.elements * self.element_bytes

    @property
    def ring_bytes(self) -> Number:
        """Exact bytes this device sends for the op per step (what a measurement sees)."""
        if self.phase == "startup" or (self.op == "broadcast" and not self.root):
            return 0
        return ring_factor(self.op, self.group) * self.payload_bytes

    @property
    def zero_volume_elements(self) -> Number:
        """Elements moved in the ZeRO paper's convention (all-reduce counts 2S)."""
        if self.phase == "startup":
            return 0
        return OP_COSTS[self.op].zero * self.elements if self.op in OP_COSTS else 0


#: The most operations ``Schedule.ops`` lists one by one (a display's list, a runtime's comparison).
#: The totals never need the list: they read each repeated op once, times its count.
MAX_LISTED_OPS = 100_000


@dataclass(frozen=True)
class Repeat:
    """A run of identical micro-batch passes, held once: ``ops`` run ``times`` times in a row.

    An op of the run that belongs to a micro-batch holds the ``range`` of them, one per
    repetition (``Schedule.ops`` gives repetition i the micro-batch ``range[i]``). A pipeline of
    m micro-batches is then a handful of entries, not a list that grows with m."""

    ops: tuple[Op, ...]
    times: int

    def expand(self) -> Iterator[Op]:
        for i in range(self.times):
            for o in self.ops:
                yield replace(o, micro_batches=(o.micro_batches[i],)) if isinstance(o.micro_batches, range) else o


@dataclass(frozen=True)
class Schedule:
    """The ordered operations of one optimizer step on one device, plus start-up and warnings.

    ``entries``: operations, and runs of identical micro-batch passes held once (``Repeat``).
    ``ops`` lists them one by one (up to ``MAX_LISTED_OPS``); the totals read each entry once."""

    entries: tuple[Op | Repeat, ...]
    warnings: tuple[str, ...] = ()

    def counted(self) -> Iterator[tuple[Op, int]]:
        """Each operation once, with how many times it runs in a row: (op, 1), or (op, times)
        for an op of a ``Repeat`` (its ``micro_batches`` the range it stands for)."""
        for e in self.entries:
            if isinstance(e, Repeat):
                yield from ((o, e.times) for o in e.ops)
            else:
                yield e, 1

    @property
    def length(self) -> int:
        """How many operations the step runs, repeats counted (``len(ops)`` without listing them)."""
        return sum(times for _, times in self.counted())

    @property
    def ops(self) -> tuple[Op, ...]:
        """Every operation, one by one, in execution order; refused above ``MAX_LISTED_OPS``."""
        n = self.length
        expect(n <= MAX_LISTED_OPS,
               f"this step runs {n:,} operations (repeated once per micro-batch); listing them one by one "
               f"stops at {MAX_LISTED_OPS:,}: read the totals (ring_bytes, host_link_bytes, volume_psi) or "
               "counted(), which holds each repeated operation once with its count")
        return tuple(o for e in self.entries for o in (e.expand() if isinstance(e, Repeat) else (e,)))

    def edited(self, edit: Callable[[tuple[Op, ...]], tuple[Op, ...]]) -> "Schedule":
        """The schedule with ``edit`` (ops -> ops, op by op, e.g. a fault) applied to every stretch of
        single ops and to the body of every repeated run."""
        out: list[Op | Repeat] = []
        single: list[Op] = []
        for e in self.entries + (None,):
            if isinstance(e, Op):
                single.append(e)
                continue
            out += edit(tuple(single))
            single = []
            if isinstance(e, Repeat):
                out.append(Repeat(edit(e.ops), e.times))
        return Schedule(tuple(out), self.warnings)

    @property
    def per_step(self) -> tuple[Op, ...]:
        return tuple(o for o in self.ops if o.phase != "startup")

    @property
    def collectives(self) -> tuple[Op, ...]:
        return tuple(o for o in self.per_step if o.is_collective)

    @property
    def ring_bytes(self) -> Number:
        return sum((o.ring_bytes * n for o, n in self.counted() if o.phase != "startup"), 0)

    @property
    def host_link_bytes(self) -> Number:
        """Bytes moved between this device and its host per step (offloaded state, SPEC §7):
        their own total, never counted as network ring bytes."""
        return sum((o.payload_bytes * n for o, n in self.counted()
                    if o.phase != "startup" and o.op in HOST_TRANSFERS), 0)

    def volume_psi(self, psi: int) -> Number:
        """Per-step volume in units of Ψ elements, ZeRO convention (dp: 2, zero3: 3)."""
        return Fraction(sum((o.zero_volume_elements * n for o, n in self.counted()), 0), psi)

    def differences(self, other: "Schedule") -> list[str]:
        """The entries where this schedule and ``other`` (e.g. predicted and measured) differ, by
        ``Op.key``; the first difference is named, then a count. Empty when they agree."""
        mine, theirs = [o.key() for o in self.ops], [o.key() for o in other.ops]
        if mine == theirs:
            return []
        at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        left = self.ops[at].describe() if at < len(mine) else "nothing"
        right = other.ops[at].describe() if at < len(theirs) else "nothing"
        return [f"entry {at} of {max(len(mine), len(theirs))}: {left} vs {right}"
                + (f" ({len(mine)} vs {len(theirs)} entries)" if len(mine) != len(theirs) else "")]

    def ring_bytes_by_axis(self) -> dict[str, Number]:
        out: dict[str, Number] = {}
        for o, n in self.counted():
            if o.phase != "startup" and o.axis is not None and o.is_collective:
                out[o.axis] = out.get(o.axis, 0) + o.ring_bytes * n
        return out


# --- what the placement says along each axis -------------------------------------------------
def split_axes(strategy_placement, state: State, mesh: Mesh, modes=SPLIT_MODES,
               exclude: str | tuple[str, ...] | None = None) -> dict[str, int]:
    """Degrees of the axes along which ``state`` is divided (S, SG or OFF), degree > 1 only."""
    excluded = (exclude,) if isinstance(exclude, str) else tuple(exclude or ())
    return {axis: degree for axis, degree in mesh
            if degree > 1 and axis not in excluded and strategy_placement.mode(state, axis) in modes}


def model_axis_degree(strategy, mesh: Mesh, axis: str) -> int:
    """The degree by which ``axis`` (tensor or pipeline) splits the model's work: the mesh degree
    where the placement splits the parameters there, 1 where it splits nothing (SPEC §6: an axis
    on which nothing is split costs nothing and splits nothing)."""
    n = mesh.degree(axis)
    return n if n > 1 and strategy.placement.mode(State.PARAMS, axis) in SPLIT_MODES else 1


def layers_on_stage(model: Model, stages: int, stage: int) -> int:
    """How many layers pipeline ``stage`` holds (``models.stage_layers``)."""
    return len(stage_layers(model.layers, stages, stage))


def pipeline_runs(schedule: str, stages: int, stage: int, micro_batches: int) -> list[tuple[tuple[tuple[str, int], ...], int]]:
    """``pipeline_order`` held compactly: (pattern, times) runs, in order. Repetition i of a run
    runs the pattern's passes, each ("F" | "B", k) with micro-batch k + i.

    GPipe: [F 0] × m, then [B 0] × m. 1F1B, with w = min(p - stage - 1, m) warm-up forwards:
    [F 0] × w, then [F w, B 0] × (m - w), then [B m-w] × w. A few runs, whatever m is."""
    m = micro_batches
    if schedule == "gpipe" or stages == 1:
        runs = [((("F", 0),), m), ((("B", 0),), m)]
    else:
        w = min(stages - stage - 1, m)
        runs = [((("F", 0),), w), ((("F", w), ("B", 0)), m - w), ((("B", m - w),), w)]
    return [(pattern, times) for pattern, times in runs if times > 0]


def pipeline_order(schedule: str, stages: int, stage: int, micro_batches: int) -> list[tuple[str, int]]:
    """The order in which pipeline ``stage`` runs forward ("F", k) and backward ("B", k) passes.

    GPipe: all m forwards, then all m backwards. 1F1B: min(p - stage - 1, m) warm-up forwards,
    then one forward / one backward alternating, then the remaining backwards. A list of 2m
    passes: refused above ``MAX_LISTED_OPS`` (``pipeline_runs`` holds any m in a few runs).
    """
    expect(2 * micro_batches <= MAX_LISTED_OPS,
           f"listing the {2 * micro_batches:,} passes of m = {micro_batches:,} micro-batches one by one stops at "
           f"{MAX_LISTED_OPS:,}; pipeline_runs holds them in a few runs")
    return [(kind, k + i) for pattern, times in pipeline_runs(schedule, stages, stage, micro_batches)
            for i in range(times) for kind, k in pattern]


def pipeline_bubble(stages: int, micro_batches: int) -> dict[str, Fraction]:
    """The idle fraction of a pipeline of p stages and m micro-batches (GPipe and 1F1B alike).

    Two conventions, both exact -- say which one you quote:
    ``of_ideal``: bubble time over ideal (bubble-free) time, (p-1)/m (Narayanan et al. 2021, §2.2);
    ``of_total``: bubble time over total time, (p-1)/(m+p-1) (Huang et al. 2019, GPipe).
    """
    p, m = stages, micro_batches
    return {"of_ideal": Fraction(p - 1, m), "of_total": Fraction(p - 1, m + p - 1)}


def pipeline_timeline(schedule: str, stages: int, micro_batches: int, forward: int = 1,
                      backward: int = 2) -> list[list[tuple[str, int, int, int]]]:
    """When each stage runs each pass: per stage, (pass "F" | "B", micro-batch, start, end) in time
    units, in ``pipeline_order``'s order. A pass starts once its stage is free and its input has
    arrived: forward k after forward k on the stage before; backward k after backward k on the
    stage after (on the last stage, after its own forward k). Sends take no time; a forward takes
    ``forward`` units, a backward ``backward`` (2: twice the FLOPs). The idle share of the picture
    is ``pipeline_bubble``'s ``of_total``, (p-1)/(m+p-1), for GPipe and 1F1B alike."""
    p, m = positive_int("stages", stages), positive_int("micro_batches", micro_batches)
    expect(2 * p * m <= MAX_LISTED_OPS, f"a timeline of p = {p:,} stages and m = {m:,} micro-batches has "
           f"{2 * p * m:,} passes; it draws at most {MAX_LISTED_OPS:,}")
    orders = [pipeline_order(schedule, p, s, m) for s in range(p)]
    done: dict[tuple[str, int, int], int] = {}          # (pass, micro-batch, stage) -> end time
    rows: list[list[tuple[str, int, int, int]]] = [[] for _ in range(p)]
    free, nxt = [0] * p, [0] * p
    while any(nxt[s] < len(orders[s]) for s in range(p)):
        moved = False
        for s in range(p):
            if nxt[s] == len(orders[s]):
                continue
            kind, k = orders[s][nxt[s]]
            needs = (("F", k, s - 1) if s > 0 else None) if kind == "F" else \
                    (("B", k, s + 1) if s < p - 1 else ("F", k, s))
            if needs is not None and needs not in done:
                continue
            start = max(free[s], done[needs] if needs is not None else 0)
            end = start + (forward if kind == "F" else backward)
            rows[s].append((kind, k, start, end))
            done[(kind, k, s)], free[s], nxt[s], moved = end, end, nxt[s] + 1, True
        expect(moved, f"pipeline schedule {schedule!r} deadlocks at p = {p}, m = {m}")
    return rows


def validate(strategy, mesh: Mesh, strict: bool = True) -> None:
    """Refuse placements that cannot run, with the reason (einops-style teaching errors).

    ``strict`` (what pricing uses) also refuses compositions that break a safety rule of SPEC §6:
    they are not priced silently. The checker derives them with ``strict=False`` and reports the
    rule, the state and the axes instead.
    """
    pl = strategy.placement
    for axis in strategy.axes:
        expect(axis in dict(mesh.degrees),
               f"strategy {strategy.name!r} places states on the {axis} axis, "
               f"but the mesh ({mesh}) has no {axis} axis")
    for axis, n in mesh:
        for state in State:
            mode = pl.mode(state, axis)
            if state is State.ACTIVATIONS:
                expect(mode is Mode.M, f"activations on the {axis} axis must be M (materialized), got {mode}")
                continue
            if state is State.GRADS and axis in BATCH_AXES:
                continue  # grads M on a batch-splitting axis breaks SPEC §6 rule 2: see below
            expect(mode is not Mode.M,
                   f"{state} cannot be M (materialized) on the {axis} axis: only activations are "
                   "produced and freed within a step; use R, S, SG, OFF or OFF-R")
        if axis not in BATCH_AXES:
            expect(n == 1 or pl.mode(State.PARAMS, axis) in SPLIT_MODES,
                   f"{strategy.name!r} keeps params whole on the {axis} axis ({n} ranks): nothing is "
                   f"split there, so the {n} {axis} ranks would repeat the same work (SPEC §6: "
                   f"an axis on which nothing is split costs nothing and splits nothing); put those "
                   f"devices on the data axis, or split params on {axis}")
            continue
        p, g, o = (pl.mode(s, axis) for s in (State.PARAMS, State.GRADS, State.OPTIMIZER))
        expect(p is not Mode.S,
               f"params sharded (S) on the {axis} axis: every {axis} rank runs the whole model on "
               "its slice of the batch, so it needs whole parameters; use SG (gather before use) or R")
        expect(g is not Mode.SG,
               f"grads cannot be SG on the {axis} axis: nothing gathers gradients; use S (reduce-"
               "scattered to owners) or R (all-reduced)")
        expect(not (o in WHOLE and g in SPLIT_MODES),
               f"optimizer state is {o} (whole) on the {axis} axis but grads are {g} (sliced): the "
               "optimizer would read a gradient it does not have; shard the optimizer state too")
    if strict:
        broken = safety_violations(strategy, mesh)
        expect(not broken, (str(broken[0]) if broken else "")
               + "; it is not priced: check() lists every rule a strategy breaks")


# --- what every rule reads -------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    """One device's view of the step: strategy, model, mesh, precision and its mesh coordinates."""

    strategy: Any
    model: Model
    mesh: Mesh
    precision: Precision
    rank: int
    coords: dict[str, int] = field(default_factory=dict)

    def mode(self, state: State, axis: str) -> Mode:
        return self.strategy.placement.mode(state, axis)

    @property
    def batch_axes(self) -> tuple[str, ...]:
        """Axes that split the batch here (degree > 1), innermost first: gradients are reduced
        along each in turn."""
        return tuple(a for a in BATCH_AXES if self.mesh.degree(a) > 1)

    @property
    def stage(self) -> int:
        return self.coords.get("pipeline", 0)

    @property
    def stages(self) -> int:
        return model_axis_degree(self.strategy, self.mesh, "pipeline")

    @property
    def tensor(self) -> int:
        return model_axis_degree(self.strategy, self.mesh, "tensor")

    def size_on(self, state: State, axis: str, padded: bool) -> Number:
        """S for a collective on ``state`` along ``axis``: its size left after the other axes'
        splits (SPEC §6: the data-axis reduction moves Ψ/(t·p) elements, not Ψ)."""
        other = split_axes(self.strategy.placement, state, self.mesh, exclude=axis)
        flat = math.prod(other.pop(a, 1) for a in BATCH_AXES)  # batch axes slice the flat buffer
        if flat == 1:
            return self.model.traffic_elements(other, self.mesh.degree(axis) if padded else 1, self.coords)
        return Fraction(self.model.traffic_elements(other, flat, self.coords), flat)

    def units_on(self, state: State, axis: str) -> list[Number]:
        """S of each gather unit's collective on ``state`` along ``axis``, in forward order: a
        concrete model's real units (exact, each padded by its rule), or Ψ-level equal parts."""
        other = split_axes(self.strategy.placement, state, self.mesh, exclude=axis)
        flat = math.prod(other.pop(a, 1) for a in BATCH_AXES)
        if flat == 1:
            return self.model.unit_elements(other, self.mesh.degree(axis), self.coords)
        return [Fraction(u, flat) for u in self.model.unit_elements(other, flat, self.coords)]

    def op(self, op: str, state: State, axis: str | None, phase: str, elements: Number, group: int = 1,
           why: str = "", **extra: Any) -> Op:
        element_bytes = self.precision.activations if state is State.ACTIVATIONS else self.precision.bytes_per(state)
        return Op(op, state, axis, phase, elements, element_bytes, group, why, **extra)


# --- the rules ----------------------------------------------------------------------------
def startup_broadcasts(dev: Device) -> list[Op]:
    """SPEC §4 rule 4: replicated parameters start identical -- one broadcast at start-up along
    every axis they are whole on, not per step."""
    return [dev.op("broadcast", State.PARAMS, axis, "startup", dev.size_on(State.PARAMS, axis, False), n,
                   "replicated parameters start identical (rule 4)")
            for axis, n in dev.mesh if n > 1 and axis in BATCH_AXES and dev.mode(State.PARAMS, axis) in WHOLE]


def gather_before_use(dev: Device, phase: str, why: str) -> list[Op]:
    """SPEC §4 rule 3: parameters stored as slices (SG; OFF, streamed up from the host first) are
    all-gathered along each axis they are sliced on, unit by unit, just before use."""
    ops: list[Op] = []
    for axis, n in dev.mesh:
        if n == 1 or dev.mode(State.PARAMS, axis) not in GATHERED:
            continue
        for unit in dev.units_on(State.PARAMS, axis):
            if dev.mode(State.PARAMS, axis) is Mode.OFF:
                ops.append(dev.op("h2d", State.PARAMS, axis, phase, Fraction(unit, n), 1,
                                  "stream this unit's parameter slice up from host memory before its gather (SPEC §7)"))
            ops.append(dev.op("all_gather", State.PARAMS, axis, phase, unit, n, why))
    return ops


def grad_reduction(strategy, axis: str) -> str:
    """SPEC §4 rule 1: the collective that resolves a partial gradient on a batch-splitting axis.

    Keyed on O: if the optimizer state is whole there, every device needs the whole sum (all-
    reduce); if it is sliced, each owner needs only its slice (reduce-scatter). The other ZeRO-1
    schedule, PyTorch's ZeroRedundancyOptimizer, keys on G instead: G whole -> all-reduce, and the
    owners broadcast their updated slices after the step (``owner_update_sync``)."""
    pl = strategy.placement
    if pl.mode(State.OPTIMIZER, axis) in WHOLE:
        return "all_reduce"
    if strategy.owner_update == "allreduce_broadcast" and pl.mode(State.GRADS, axis) in WHOLE:
        return "all_reduce"
    return "reduce_scatter"


def reduce_partial_grads(dev: Device, tag: tuple[int, ...]) -> list[Op]:
    """SPEC §4 rule 1: a gradient leaves backward partial along every batch-splitting axis; it is
    reduced along each, innermost first, the later axes reducing only what the earlier left.
    A concrete model whose parameters are gathered unit by unit reduces unit by unit too, in
    backward order (the last unit's gradient is ready first)."""
    ops: list[Op] = []
    sizes: list[Number] | None = None
    for axis in dev.batch_axes:
        n = dev.mesh.degree(axis)
        if dev.mode(State.GRADS, axis) is Mode.M:
            continue  # breaks SPEC §6 rule 2; only derived with strict=False, for the checker
        op = grad_reduction(dev.strategy, axis)
        whole = op == "all_reduce"
        if dev.mode(State.OPTIMIZER, axis) in WHOLE:
            why = "optimizer state is whole on every device, so every device needs the whole summed gradient (rule 1)"
        elif whole:
            why = ("grads are replicated, so the whole summed gradient is all-reduced to every device; each "
                   "owner then updates its slice and broadcasts it (PyTorch's ZeroRedundancyOptimizer, rule 1)")
        else:
            why = "optimizer state is sliced, so each owner needs only its slice of the summed gradient (rule 1)"
        if sizes is None:  # the first reduction works on the whole local gradient
            split = split_axes(dev.strategy.placement, State.GRADS, dev.mesh, exclude=BATCH_AXES)
            if dev.model.reduces_per_unit and dev.mode(State.PARAMS, axis) in GATHERED:
                sizes = dev.model.unit_elements(split, 1 if whole else n, dev.coords)[::-1]
            else:
                sizes = [dev.model.traffic_elements(split, 1 if whole else n, dev.coords)]
        ops += [dev.op(op, State.GRADS, axis, "backward", size, n, why, micro_batches=tag) for size in sizes]
        sizes = sizes if whole else [Fraction(size, n) for size in sizes]  # later axes: this rank's slice
    return ops


def scale_once(dev: Device, tag: tuple[int, ...]) -> list[Op]:
    """SPEC §5 (gradient integrity): the summed gradient is divided once, by the product of the
    batch-splitting degrees, to become the batch mean."""
    batch = dev.batch_axes
    if not batch:
        return []
    total = math.prod(dev.mesh.degree(a) for a in batch)
    ways = " × ".join(f"{a} {dev.mesh.degree(a)}" for a in batch)
    return [dev.op("scale", State.GRADS, batch[0], "backward", 0, total,
                   f"divide the summed gradient by {total}, once, to get the batch mean"
                   + (f" (the batch is split {ways} ways)" if len(batch) > 1 else ""), micro_batches=tag)]


def offload_grad_slice(dev: Device, tag: tuple[int, ...]) -> list[Op]:
    """SPEC §7: with offloaded gradients, the reduced gradient slice goes down to host memory,
    where the optimizer runs (ZeRO-Offload: 2Ψ/N bytes per device under mixed_adam)."""
    d = dev.mesh.degree("data")
    if d == 1 or dev.mode(State.GRADS, "data") is not Mode.OFF:
        return []
    return [dev.op("d2h", State.GRADS, "data", "backward", Fraction(dev.size_on(State.GRADS, "data", True), d), 1,
                   "move the reduced gradient slice to host memory, where the optimizer runs", micro_batches=tag)]


def sequence_parallel_norms(dev: Device, tag: tuple[int, ...]) -> list[Op]:
    """SPEC §6 rule 3: under sequence parallelism, parameters tensor parallelism leaves whole
    (norms, row-parallel biases) see only their tensor rank's slice of the sequence, so their
    gradients are partial on tensor and need an all-reduce there. Plain TP needs none."""
    t = dev.tensor
    if t == 1 or not dev.strategy.sequence_parallel:
        return []
    layers = stage_layers(dev.model.layers, dev.stages, dev.stage)
    size = dev.model.tensor_replicated_elements(layers, dev.stage == dev.stages - 1)
    if not size:
        return []
    return [dev.op("all_reduce", State.GRADS, "tensor", "backward", size, t,
                   "parameters replicated across tensor ranks (norms) saw only their slice of the "
                   "sequence: sum their gradients on tensor (SPEC §6 rule 3)", micro_batches=tag)]


def owner_update_sync(dev: Device) -> list[Op]:
    """SPEC §4 rule 2: when params are whole on a batch axis but the optimizer state is sliced,
    only owners update their slice; the replicas are made whole again after the step -- by an
    all-gather (ZeRO §7), or by each owner broadcasting its slice (ZeroRedundancyOptimizer)."""
    ops: list[Op] = []
    for axis in dev.batch_axes:
        n = dev.mesh.degree(axis)
        if dev.mode(State.PARAMS, axis) not in WHOLE or dev.mode(State.OPTIMIZER, axis) in WHOLE:
            continue
        if dev.strategy.owner_update == "allreduce_broadcast":
            mine = dev.coords.get(axis, 0)
            split = split_axes(dev.strategy.placement, State.OPTIMIZER, dev.mesh)
            for owner in range(n):
                elements = dev.model.local_elements(split, {**dev.coords, axis: owner})
                if elements:
                    ops.append(dev.op("broadcast", State.PARAMS, axis, "step", elements, n,
                                      f"rank {owner} of the {axis} group owns this slice and updated it: it "
                                      "broadcasts it to every replica (rule 2)", root=owner == mine))
            continue
        total = dev.size_on(State.PARAMS, axis, True)
        if dev.mode(State.OPTIMIZER, axis) in HOST_MODES:
            ops.append(dev.op("h2d", State.PARAMS, axis, "step", Fraction(total, n), 1,
                              "bring the updated parameter slice back from host memory"))
        ops.append(dev.op("all_gather", State.PARAMS, axis, "step", total, n,
                          "only owners updated their slice of the replicated parameters: all-gather them (rule 2)"))
    return ops


def reduces_per_micro_batch(dev: Device) -> tuple[bool, list[str]]:
    """SPEC §4 rule 5 / §6 rule 5: a gradient split on a batch axis cannot be accumulated locally
    over the m micro-batches, so it is reduced once per micro-batch (×m, priced and warned)."""
    m = dev.strategy.micro_batches
    split_on = [a for a in dev.batch_axes if dev.mode(State.GRADS, a) in SPLIT_MODES]
    if not split_on or m == 1:
        return False, []
    axis = split_on[0]
    return True, [f"grads are {dev.mode(State.GRADS, axis)} on the {axis} axis, so they cannot be accumulated "
                  f"locally over the {m} micro-batches: the gradient reduction runs {m} times per step ({m}x its "
                  "traffic; DeepSpeed forbids ZeRO-2/3 with pipeline parallelism for this reason)"]


def tensor_parallel_collectives(dev: Device, phase: str) -> list[Op]:
    """Megatron tensor parallelism (SPEC §4), where params are S on tensor: per column-then-row
    block, g all-reduces the row-parallel partial output in forward and f the column-parallel
    input gradient in backward; with sequence parallelism each is an all-gather plus a reduce-
    scatter of the same bytes. Full recomputation replays forward's collectives in backward."""
    t = dev.tensor
    if t == 1:
        return []
    expect(dev.model.boundary_elements > 0,
           "tensor parallelism moves activations, not parameters: the model needs "
           "boundary_elements (b·s·h), e.g. a TransformerSpec")
    blocks = dev.model.tp_blocks_per_layer * len(stage_layers(dev.model.layers, dev.stages, dev.stage))
    size = dev.model.boundary_elements
    passes = ["forward"] if phase == "forward" else ["backward"]
    if phase == "backward" and getattr(dev.model, "recompute", "none") in (True, "full"):
        passes = ["forward (recomputed)", "backward"]
    ops: list[Op] = []
    for kind in passes:
        for _ in range(blocks):
            if dev.strategy.sequence_parallel:
                ops.append(dev.op("all_gather", State.ACTIVATIONS, "tensor", phase, size, t,
                                  f"{kind}: gather the sequence-split block input (sequence parallelism)"))
                ops.append(dev.op("reduce_scatter", State.ACTIVATIONS, "tensor", phase, size, t,
                                  f"{kind}: the block output is a partial sum: reduce-scatter it along the sequence"))
            elif kind == "backward":
                ops.append(dev.op("all_reduce", State.ACTIVATIONS, "tensor", phase, size, t,
                                  "column-parallel input gradient is a partial sum: all-reduce it"))
            else:
                ops.append(dev.op("all_reduce", State.ACTIVATIONS, "tensor", phase, size, t,
                                  "row-parallel output is a partial sum: all-reduce it" if kind == "forward" else
                                  "recomputation replays forward: the row-parallel output is all-reduced again"))
    return ops


def pipeline_boundary(dev: Device, op: str, phase: str, tag: tuple[int, ...] | range) -> list[Op]:
    """Pipeline parallelism (SPEC §4), where params are S on pipeline: each micro-batch's boundary
    activation goes forward, and its gradient back, across each of the p-1 stage boundaries.
    ``tag``: the micro-batch, (k,), or in a repeated run the range of them."""
    p, stage = dev.stages, dev.stage
    if p == 1:
        return []
    expect(dev.model.boundary_elements > 0,
           "pipeline parallelism sends activations between stages: the model needs "
           "boundary_elements (b·s·h), e.g. a TransformerSpec")
    towards_next = (op == "send") == (phase == "forward")   # forward sends on, backward sends back
    if (towards_next and stage == p - 1) or (not towards_next and stage == 0):
        return []
    what = "activation" if phase == "forward" else "gradient"
    verb = {"send": "send the boundary " + what + (" on" if phase == "forward" else " back"),
            "recv": "receive the boundary " + what}[op]
    return [dev.op(op, State.ACTIVATIONS, "pipeline", phase, dev.model.boundary_elements, p, verb,
                   micro_batches=tag)]


# --- the schedule ----------------------------------------------------------------------------
def passes_held_once(runs: list[tuple[tuple[tuple[str, int], ...], int]], m: int,
                     one_pass: Callable[[str, int, tuple[int, ...] | range], list[Op]],
                     differs: Callable[[str, int], bool]) -> list[Op | Repeat]:
    """The ops of every pass of ``runs`` (``pipeline_runs``), in order. ``one_pass(kind, k, tag)``:
    the ops of pass (kind, k), its own ops tagged ``tag``; ``differs(kind, k)``: whether that pass
    runs ops the other passes of its kind do not (k is 0 or m - 1). Those passes are listed one by
    one; each stretch of identical repetitions between them is held once, as a ``Repeat``."""
    entries: list[Op | Repeat] = []
    for pattern, times in runs:
        odd = {k - k0 for kind, k0 in pattern for k in (0, m - 1) if 0 <= k - k0 < times and differs(kind, k)}
        cuts = sorted({0, times} | odd | {i + 1 for i in odd})
        for i0, i1 in zip(cuts, cuts[1:]):
            if i1 - i0 == 1:                       # one repetition: its ops, one by one
                entries += [o for kind, k0 in pattern for o in one_pass(kind, k0 + i0, (k0 + i0,))]
                continue
            body = tuple(o for kind, k0 in pattern for o in one_pass(kind, k0 + i0, range(k0 + i0, k0 + i1)))
            if body:
                entries.append(Repeat(body, i1 - i0))
    return entries


def derive_schedule(strategy, model: Model, mesh: Mesh, precision: Precision,
                    rank: int = 0, strict: bool = True) -> Schedule:
    """The operations one device (``rank`` of ``mesh``) performs in one optimizer step, in order:
    start-up, then each pipeline pass (forward, backward) of each micro-batch, the optimizer step,
    and the re-synchronisation of replicated parameters. Passes that repeat identically (all but
    the first forward, which gathers parameters kept after it, and the last backward, which reduces
    the accumulated gradient) are held once with their count: the cost does not grow with m.
    ``strict=False`` derives compositions that break a safety rule too (for the checker)."""
    validate(strategy, mesh, strict)
    dev = Device(strategy, model, mesh, precision, rank, mesh.coords(rank))
    m, reshard = strategy.micro_batches, strategy.reshard_after_forward
    per_micro_batch, warnings = reduces_per_micro_batch(dev)
    entries: list[Op | Repeat] = list(startup_broadcasts(dev))

    def one_pass(kind: str, k: int, tag: tuple[int, ...] | range) -> list[Op]:
        if kind == "F":
            ops = pipeline_boundary(dev, "recv", "forward", tag)
            if k == 0 or reshard:
                ops += gather_before_use(dev, "forward", "parameters are stored as slices: gather them "
                                                         "just before forward uses them (rule 3)")
            return ops + tensor_parallel_collectives(dev, "forward") + pipeline_boundary(dev, "send", "forward", tag)
        ops = pipeline_boundary(dev, "recv", "backward", tag)
        if reshard:
            ops += gather_before_use(dev, "backward", "parameters were freed after forward: gather "
                                                      "them again for backward (rule 3)")
        ops += tensor_parallel_collectives(dev, "backward") + pipeline_boundary(dev, "send", "backward", tag)
        if per_micro_batch or k == m - 1:
            tag = tag if per_micro_batch else ()
            ops += sequence_parallel_norms(dev, tag) + reduce_partial_grads(dev, tag)
            ops += scale_once(dev, tag) + offload_grad_slice(dev, tag)
        return ops

    def differs(kind: str, k: int) -> bool:
        return (kind == "F" and k == 0 and not reshard) or (kind == "B" and k == m - 1 and not per_micro_batch)

    runs = pipeline_runs(strategy.pipeline_schedule, dev.stages, dev.stage, m)
    entries += passes_held_once(runs, m, one_pass, differs)
    entries.append(dev.op("optimizer_step", State.OPTIMIZER, None, "step", 0, 1,
                          "each device updates the optimizer state and parameters it owns"))
    entries += owner_update_sync(dev)
    return Schedule(tuple(entries), tuple(warnings))
