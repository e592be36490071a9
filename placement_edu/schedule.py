"""The per-step communication schedule, derived from the placement alone (SPEC §4).

Each entry is one operation one device performs, in execution order: a collective (all-reduce,
reduce-scatter, all-gather, send, recv, broadcast at start-up), a host transfer for offloaded
state (h2d, d2h), or a local step that matters for correctness (scale, optimizer_step). The
rules key on modes, never on the strategy's name:

1. Gradients leave backward partial along each batch-splitting axis (data; replica for hybrid
   sharding). If O is R there they are all-reduced; if O is S, SG or OFF they are reduce-scattered
   (each owner needs only its slice). Data first, then replica on what is left; scaled once by the
   product of the batch-splitting degrees.
2. If P is R but O is split on a batch-splitting axis, only owners update their slice: all-gather
   P there after the step.
3. If P is SG (or OFF): all-gather before forward, and again before backward when freed after
   forward (reshard_after_forward).
4. Replicated parameters start identical: one broadcast at start-up, not per step.
5. A reduction is per optimizer step; a gradient that is split on the data axis cannot be
   accumulated locally, so under m micro-batches it is reduced m times (a priced warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator

from placement_edu.composition import safety_violations
from placement_edu.errors import expect
from placement_edu.mesh import Mesh
from placement_edu.models import Model, Number
from placement_edu.placement import BATCH_AXES, HOST_MODES, SPLIT_MODES, Mode, State
from placement_edu.precision import Precision

#: Ring bytes each device sends, as a multiple of the op's payload S over a group of N (exact).
def ring_factor(op: str, n: int) -> Fraction:
    if op == "all_reduce":
        return Fraction(2 * (n - 1), n)
    if op in ("all_gather", "reduce_scatter"):
        return Fraction(n - 1, n)
    if op == "send":
        return Fraction(1)
    return Fraction(0)  # recv (counted by the sender), broadcast at start-up, local ops


#: ZeRO's convention: all-reduce moves 2S, all-gather and reduce-scatter S, send S.
ZERO_FACTOR = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "send": 1}
COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "send", "recv", "broadcast"})


@dataclass(frozen=True)
class Op:
    """One scheduled operation on one device.

    ``elements``: for a collective, S in SPEC §4's sense (all-gather: the full output; reduce-
    scatter: the full input; all-reduce: the tensor; send/recv: the message), padding included.
    ``element_bytes``: bytes per element of that state under the precision preset.
    ``group``: the size of the axis group it runs over (1 for local ops); for ``scale``, the
    divisor (the number of ranks whose contributions were summed).
    ``micro_batches``: for a gradient reduction or scale that runs once per micro-batch, the
    micro-batch whose gradient it acts on; () means the gradient accumulated over the whole step.
    ``stale``: a gather that returns the previous step's slices (the stale-gather fault, SPEC §5).
    """

    op: str
    state: State
    axis: str | None
    phase: str
    elements: Number
    element_bytes: int
    group: int = 1
    why: str = ""
    micro_batches: tuple[int, ...] = ()
    stale: bool = False

    @property
    def is_collective(self) -> bool:
        return self.op in COLLECTIVES

    @property
    def payload_bytes(self) -> Number:
        return self.elements * self.element_bytes

    @property
    def ring_bytes(self) -> Number:
        """Exact bytes this device sends for the op (what a measurement sees)."""
        if self.phase == "startup":
            return 0
        return ring_factor(self.op, self.group) * self.payload_bytes

    @property
    def zero_volume_elements(self) -> Number:
        """Elements moved in the ZeRO paper's convention (all-reduce counts 2S)."""
        if self.phase == "startup":
            return 0
        return ZERO_FACTOR.get(self.op, 0) * self.elements


@dataclass(frozen=True)
class Schedule:
    """The ordered operations of one optimizer step on one device, plus start-up and warnings."""

    ops: tuple[Op, ...]
    warnings: tuple[str, ...] = ()

    @property
    def per_step(self) -> tuple[Op, ...]:
        return tuple(o for o in self.ops if o.phase != "startup")

    @property
    def collectives(self) -> tuple[Op, ...]:
        return tuple(o for o in self.per_step if o.is_collective)

    @property
    def ring_bytes(self) -> Number:
        return sum((o.ring_bytes for o in self.per_step), 0)

    def volume_psi(self, psi: int) -> Number:
        """Per-step volume in units of Ψ elements, ZeRO convention (dp: 2, zero3: 3)."""
        return Fraction(sum((o.zero_volume_elements for o in self.per_step), 0), psi)

    def ring_bytes_by_axis(self) -> dict[str, Number]:
        out: dict[str, Number] = {}
        for o in self.per_step:
            if o.axis is not None and o.is_collective:
                out[o.axis] = out.get(o.axis, 0) + o.ring_bytes
        return out


def split_axes(strategy_placement, state: State, mesh: Mesh, modes=SPLIT_MODES,
               exclude: str | tuple[str, ...] | None = None) -> dict[str, int]:
    """Degrees of the axes along which ``state`` is divided (S, SG or OFF), degree > 1 only."""
    excluded = (exclude,) if isinstance(exclude, str) else tuple(exclude or ())
    return {axis: degree for axis, degree in mesh
            if degree > 1 and axis not in excluded and strategy_placement.mode(state, axis) in modes}


def pipeline_order(schedule: str, stages: int, stage: int, micro_batches: int) -> list[tuple[str, int]]:
    """The order in which pipeline ``stage`` runs forward ("F", k) and backward ("B", k) passes.

    GPipe: all m forwards, then all m backwards. 1F1B: min(p - stage - 1, m) warm-up forwards,
    then one forward / one backward alternating, then the remaining backwards.
    """
    m = micro_batches
    if schedule == "gpipe" or stages == 1:
        return [("F", k) for k in range(m)] + [("B", k) for k in range(m)]
    warmup = min(stages - stage - 1, m)
    order = [("F", k) for k in range(warmup)]
    f, b = warmup, 0
    while b < m:
        if f < m:
            order.append(("F", f))
            f += 1
        order.append(("B", b))
        b += 1
    return order


def pipeline_bubble(stages: int, micro_batches: int) -> dict[str, Fraction]:
    """The idle fraction of a pipeline of p stages and m micro-batches (GPipe and 1F1B alike).

    Two conventions, both exact -- say which one you quote:
    ``of_ideal``: bubble time over ideal (bubble-free) time, (p-1)/m (Narayanan et al. 2021, §2.2);
    ``of_total``: bubble time over total time, (p-1)/(m+p-1) (Huang et al. 2019, GPipe).
    """
    p, m = stages, micro_batches
    return {"of_ideal": Fraction(p - 1, m), "of_total": Fraction(p - 1, m + p - 1)}


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
    for axis, _ in mesh:
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
        if axis in BATCH_AXES:
            p, g, o = (pl.mode(s, axis) for s in (State.PARAMS, State.GRADS, State.OPTIMIZER))
            expect(p is not Mode.S,
                   f"params sharded (S) on the {axis} axis: every {axis} rank runs the whole model on "
                   "its slice of the batch, so it needs whole parameters; use SG (gather before use) or R")
            expect(g is not Mode.SG,
                   f"grads cannot be SG on the {axis} axis: nothing gathers gradients; use S (reduce-"
                   "scattered to owners) or R (all-reduced)")
            expect(not (o in (Mode.R, Mode.OFF_R) and g in SPLIT_MODES),
                   f"optimizer state is {o} (whole) on the {axis} axis but grads are {g} (sliced): the "
                   "optimizer would read a gradient it does not have; shard the optimizer state too")
    if strict:
        broken = safety_violations(strategy, mesh)
        expect(not broken, f"strategy {strategy.name!r} on {mesh}: "
               + (str(broken[0]) if broken else "") + "; `placement-edu check` explains every rule")


def derive_schedule(strategy, model: Model, mesh: Mesh, precision: Precision,
                    rank: int = 0, strict: bool = True) -> Schedule:
    """The operations one device (``rank`` of ``mesh``) performs in one optimizer step.

    ``strict=False`` derives compositions that break a safety rule too (for the checker).
    """
    validate(strategy, mesh, strict)
    pl = strategy.placement
    coords = mesh.coords(rank)
    d, t, p = mesh.degree("data"), mesh.degree("tensor"), mesh.degree("pipeline")
    m = strategy.micro_batches
    stage = coords["pipeline"]
    ops: list[Op] = []
    warnings: list[str] = []
    mode = {s: {axis: pl.mode(s, axis) for axis, _ in mesh} for s in (State.PARAMS, State.GRADS, State.OPTIMIZER)}
    P, G, O = mode[State.PARAMS], mode[State.GRADS], mode[State.OPTIMIZER]
    #: Axes that split the batch here, innermost first: gradients are reduced along each in turn.
    batch = [axis for axis in BATCH_AXES if mesh.degree(axis) > 1]

    def size_on(state: State, axis: str, padded: bool) -> Number:
        """S for a collective on ``state`` along ``axis``: its size left after the other axes'
        splits (SPEC §6: the data-axis reduction moves Ψ/(t·p) elements, not Ψ)."""
        other = split_axes(pl, state, mesh, exclude=axis)
        flat = math.prod(other.pop(a, 1) for a in BATCH_AXES)  # batch axes slice the flat buffer
        if flat == 1:
            return model.traffic_elements(other, mesh.degree(axis) if padded else 1, coords)
        return Fraction(model.traffic_elements(other, flat, coords), flat)

    # Rule 4: replicated parameters start identical.
    for axis, n in mesh:
        if n > 1 and P[axis] in (Mode.R, Mode.OFF_R):
            ops.append(Op("broadcast", State.PARAMS, axis, "startup", size_on(State.PARAMS, axis, False),
                          precision.params, n, "replicated parameters start identical (rule 4)"))

    # Rule 3: parameters stored as slices are gathered along each axis they are SG (or OFF) on.
    gather_axes = [axis for axis, n in mesh if n > 1 and P[axis] in (Mode.SG, Mode.OFF)]

    def gather_params(phase: str, why: str) -> Iterator[Op]:
        units = model.gather_units
        for axis in gather_axes:
            n = mesh.degree(axis)
            total = size_on(State.PARAMS, axis, True)
            if P[axis] is Mode.OFF:
                yield Op("h2d", State.PARAMS, axis, phase, Fraction(total, n), precision.params, 1,
                         "bring this device's parameter slice from host memory")
            for _ in range(units):
                yield Op("all_gather", State.PARAMS, axis, phase, Fraction(total, units) if units > 1 else total,
                         precision.params, n, why)

    # Rule 1, per batch-splitting axis. Split gradients cannot wait for local accumulation: they are
    # reduced once per micro-batch, and those ops name their micro-batch; the others act on the
    # gradient accumulated over the whole step (micro_batches=()).
    split_on = [axis for axis in batch if G[axis] in SPLIT_MODES]
    per_micro_batch = bool(split_on) and m > 1
    sp_norms = t > 1 and strategy.sequence_parallel and P.get("tensor") in (Mode.R, Mode.OFF_R)

    def reduce_grads(k: int) -> Iterator[Op]:
        tag = (k,) if per_micro_batch else ()
        if sp_norms:
            yield Op("all_reduce", State.GRADS, "tensor", "backward", size_on(State.GRADS, "tensor", False),
                     precision.grads, t, "parameters replicated across tensor ranks (e.g. norms) saw only "
                     "their slice of the sequence: sum their gradients on tensor (SPEC §6 rule 3)", tag)
        size: Number | None = None
        for axis in batch:
            n = mesh.degree(axis)
            if G[axis] is Mode.M:
                continue  # breaks SPEC §6 rule 2; only derived with strict=False, for the checker
            whole = O[axis] in (Mode.R, Mode.OFF_R)
            op = "all_reduce" if whole else "reduce_scatter"
            why = ("optimizer state is whole on every device, so every device needs the whole summed "
                   "gradient (rule 1)" if whole else
                   "optimizer state is sliced, so each owner needs only its slice of the summed "
                   "gradient (rule 1)")
            if size is None:  # the first reduction works on the whole local gradient
                size = model.traffic_elements(split_axes(pl, State.GRADS, mesh, exclude=BATCH_AXES),
                                              1 if whole else n, coords)
            yield Op(op, State.GRADS, axis, "backward", size, precision.grads, n, why, tag)
            size = size if whole else Fraction(size, n)  # later axes reduce only this rank's slice
        if batch:
            total = math.prod(mesh.degree(axis) for axis in batch)
            ways = " × ".join(f"{axis} {mesh.degree(axis)}" for axis in batch)
            yield Op("scale", State.GRADS, batch[0], "backward", 0, precision.grads, total,
                     f"divide the summed gradient by {total}, once, to get the batch mean"
                     + (f" (the batch is split {ways} ways)" if len(batch) > 1 else ""), tag)
        if d > 1 and G.get("data") is Mode.OFF:
            yield Op("d2h", State.GRADS, "data", "backward",
                     Fraction(size_on(State.GRADS, "data", True), d), precision.grads, 1,
                     "move the reduced gradient slice to host memory, where the optimizer runs", tag)

    tp_blocks = 0
    if t > 1:
        expect(model.boundary_elements > 0,
               "tensor parallelism moves activations, not parameters: the model needs "
               "boundary_elements (b·s·h), e.g. a TransformerSpec")
        layers_here = layers_on_stage(model, p, stage)
        tp_blocks = model.tp_blocks_per_layer * layers_here
    if p > 1:
        expect(model.boundary_elements > 0,
               "pipeline parallelism sends activations between stages: the model needs "
               "boundary_elements (b·s·h), e.g. a TransformerSpec")
    act_bytes = precision.activations

    if per_micro_batch:
        axis = split_on[0]
        warnings.append(
            f"grads are {G[axis]} on the {axis} axis, so they cannot be accumulated locally over the {m} "
            f"micro-batches: the gradient reduction runs {m} times per step ({m}x its traffic; "
            "DeepSpeed forbids ZeRO-2/3 with pipeline parallelism for this reason)")

    for kind, k in pipeline_order(strategy.pipeline_schedule, p, stage, m):
        if kind == "F":
            if p > 1 and stage > 0:
                ops.append(Op("recv", State.ACTIVATIONS, "pipeline", "forward", model.boundary_elements,
                              act_bytes, p, f"micro-batch {k}: receive the boundary activation"))
            if k == 0 or strategy.reshard_after_forward:
                ops.extend(gather_params("forward", "parameters are stored as slices: gather them "
                                         "just before forward uses them (rule 3)"))
            for _ in range(tp_blocks):
                ops.append(Op("all_reduce", State.ACTIVATIONS, "tensor", "forward", model.boundary_elements,
                              act_bytes, t, "row-parallel output is a partial sum: all-reduce it"))
            if p > 1 and stage < p - 1:
                ops.append(Op("send", State.ACTIVATIONS, "pipeline", "forward", model.boundary_elements,
                              act_bytes, p, f"micro-batch {k}: send the boundary activation on"))
        else:
            if p > 1 and stage < p - 1:
                ops.append(Op("recv", State.ACTIVATIONS, "pipeline", "backward", model.boundary_elements,
                              act_bytes, p, f"micro-batch {k}: receive the boundary gradient"))
            if strategy.reshard_after_forward:
                ops.extend(gather_params("backward", "parameters were freed after forward: gather "
                                         "them again for backward (rule 3)"))
            for _ in range(tp_blocks):
                ops.append(Op("all_reduce", State.ACTIVATIONS, "tensor", "backward", model.boundary_elements,
                              act_bytes, t, "column-parallel input gradient is a partial sum: all-reduce it"))
            if p > 1 and stage > 0:
                ops.append(Op("send", State.ACTIVATIONS, "pipeline", "backward", model.boundary_elements,
                              act_bytes, p, f"micro-batch {k}: send the boundary gradient back"))
            if per_micro_batch or k == m - 1:
                ops.extend(reduce_grads(k))

    ops.append(Op("optimizer_step", State.OPTIMIZER, None, "step", 0, precision.optimizer, 1,
                  "each device updates the optimizer state and parameters it owns"))
    for axis in batch:  # Rule 2: after an owner-only update, re-gather the replicated parameters.
        n = mesh.degree(axis)
        if P[axis] in (Mode.R, Mode.OFF_R) and O[axis] not in (Mode.R, Mode.OFF_R):
            total = size_on(State.PARAMS, axis, True)
            if O[axis] in HOST_MODES:
                ops.append(Op("h2d", State.PARAMS, axis, "step", Fraction(total, n), precision.params, 1,
                              "bring the updated parameter slice back from host memory"))
            ops.append(Op("all_gather", State.PARAMS, axis, "step", total, precision.params, n,
                          "only owners updated their slice of the replicated parameters: "
                          "all-gather them (rule 2)"))
    return Schedule(tuple(ops), tuple(warnings))


def layers_on_stage(model: Model, stages: int, stage: int) -> int:
    """How many layers pipeline ``stage`` holds (earlier stages take the extra layers)."""
    if hasattr(model, "stage_layers"):
        return len(model.stage_layers(stages, stage))  # type: ignore[union-attr]
    base, extra = divmod(model.layers, stages)
    expect(model.layers >= stages,
           f"{model.layers} layers cannot fill {stages} pipeline stages (one layer at least each)")
    return base + (1 if stage < extra else 0)

