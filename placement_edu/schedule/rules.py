"""The rules of SPEC §4, one small function each, keyed on the modes along one axis, never on a
strategy's name. ``Device`` is what every rule reads: one device's view of the step.

- ``startup_broadcasts``     rule 4: replicated parameters start identical
- ``gather_before_use``      rule 3: sliced (SG, OFF) parameters are all-gathered just before use
- ``grad_reduction``         rule 1: which collective resolves a partial gradient (keyed on O)
- ``reduce_partial_grads``   rule 1: one reduction per batch-splitting axis, innermost first
                             (where ZeRO-2 reduce-scatters its gradients)
- ``scale_once``             SPEC §5: the summed gradient is divided once, by the batch split
- ``offload_grad_slice``     SPEC §7: an offloaded gradient slice goes down to the host
- ``owner_update_sync``      rule 2: after an owner-only step, the replicas are made whole again
- ``reduces_per_micro_batch`` rule 5: split gradients are reduced once per micro-batch (×m)
- ``tensor_parallel_collectives`` Megatron's f and g on the tensor axis (activations, not Ψ)
- ``sequence_parallel_norms`` SPEC §6 rule 3: tensor-replicated params under sequence parallelism
- ``pipeline_boundary``      boundary activations and their gradients between stages
- ``schedule.context``        ring attention's K/V rounds, Ulysses' all-to-alls (context axis)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from placement_edu.placement import STARTUP
from placement_edu.errors import PlacementError, expect
from placement_edu.mesh import Mesh
from placement_edu.models import Model, Number, UnitRun, stage_layers
from placement_edu.placement import (
    BATCH_AXES,
    EXPERT_AXIS,
    GATHERED,
    HOST_MODES,
    SPLIT_MODES,
    WHOLE,
    Mode,
    State,
)
from placement_edu.precision import Precision
from placement_edu.strategies import Strategy
from placement_edu.units import exact
from placement_edu.axes import model_axis_degree, split_axes
from placement_edu.schedule.costs import COLLECTIVES
from placement_edu.schedule.ops import Op, Repeat, Tag, held
from placement_edu.schedule.costs import OpKind


# --- what every rule reads -------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    """One device's view of the step: strategy, model, mesh, precision and its mesh coordinates."""

    strategy: Strategy
    model: Model
    mesh: Mesh
    precision: Precision
    rank: int
    coords: dict[str, int] = field(default_factory=dict)

    def mode(self, state: State, axis: str) -> Mode:
        return self.strategy.placement.mode(state, axis)

    @cached_property
    def batch_axes(self) -> tuple[str, ...]:
        """Axes that split the batch here (degree > 1), innermost first: gradients are reduced
        along each in turn."""
        return tuple(a for a in BATCH_AXES if self.mesh.degree(a) > 1)

    @property
    def stage(self) -> int:
        return self.coords.get("pipeline", 0)

    @cached_property  # (each rule asks: found once a device)
    def stages(self) -> int:
        return model_axis_degree(self.strategy, self.mesh, "pipeline")

    @cached_property
    def tensor(self) -> int:
        return model_axis_degree(self.strategy, self.mesh, "tensor")

    @property
    def boundary(self) -> Number:
        """b·s·h of this rank's tokens: the model's boundary activation, 1/c of it on a context
        axis of degree c (each context rank holds s/c tokens of each sequence)."""
        c, size = self.mesh.degree("context"), self.model.boundary_elements
        return size if c == 1 else exact(size, c)

    def size_on(self, state: State, axis: str, padded: bool) -> Number:
        """S for a collective on ``state`` along ``axis``: its size left after the other axes'
        splits (SPEC §6: the data-axis reduction moves Ψ/(t·p) elements, not Ψ)."""
        other = split_axes(self.strategy.placement, state, self.mesh, exclude=axis)
        flat = math.prod(other.pop(a, 1) for a in BATCH_AXES)  # batch axes slice the flat buffer
        if flat == 1:
            return self.model.traffic_elements(
                other, self.mesh.degree(axis) if padded else 1, self.coords
            )
        return exact(self.model.traffic_elements(other, flat, self.coords), flat)

    def units_on(self, state: State, axis: str) -> list[UnitRun]:
        """S of each gather unit's collective on ``state`` along ``axis``, in forward order, as
        runs of equal units (``models.UnitRun``): a concrete model's real units (exact, each
        padded by its rule), or Ψ-level equal parts, one run whatever their number."""
        other = split_axes(self.strategy.placement, state, self.mesh, exclude=axis)
        flat = math.prod(other.pop(a, 1) for a in BATCH_AXES)
        if flat == 1:
            return self.model.unit_runs(other, self.mesh.degree(axis), self.coords)
        return [(exact(u, flat), k) for u, k in self.model.unit_runs(other, flat, self.coords)]

    def params_wire(self, axis: str | None) -> Number:
        """Bytes a parameter element moves in a collective on ``axis``: the gather dtype's; under
        float8, the mean of this rank's converted weights and the rest, as the tensor axis splits
        them (``Precision.gather_bytes``)."""
        if self.precision.float8 is None:
            return self.precision.wire_bytes(State.PARAMS)
        split = split_axes(self.strategy.placement, State.PARAMS, self.mesh, exclude=axis)
        return self.precision.gather_bytes(self.model, split.get("tensor", 1))

    def op(
        self,
        op: OpKind,
        state: State,
        axis: str | None,
        phase: str,
        elements: Number,
        group: int = 1,
        why: str = "",
        **extra: Any,
    ) -> Op:
        element_bytes = (
            self.precision.activations
            if state is State.ACTIVATIONS
            else self.params_wire(axis)
            if state is State.PARAMS and op in COLLECTIVES
            else self.precision.wire_bytes(state)
            if op in COLLECTIVES  # what crosses the network travels in its wire dtype
            else self.precision.bytes_per(state)
        )
        return Op(op, state, axis, phase, elements, element_bytes, group, why, **extra)


# --- the rules ----------------------------------------------------------------------------
def startup_broadcasts(dev: Device) -> list[Op]:
    """SPEC §4 rule 4: replicated parameters start identical -- one broadcast at start-up along
    every axis they are whole on, not per step."""
    return [
        dev.op(
            OpKind.BROADCAST,
            State.PARAMS,
            axis,
            STARTUP,
            dev.size_on(State.PARAMS, axis, False),
            n,
            "replicated parameters start identical (rule 4)",
        )
        for axis, n in dev.mesh
        if n > 1 and axis in BATCH_AXES and dev.mode(State.PARAMS, axis) in WHOLE
    ]


def gather_before_use(dev: Device, phase: str, why: str) -> list[Op | Repeat]:
    """SPEC §4 rule 3: parameters stored as slices (SG; OFF, streamed up from the host first) are
    all-gathered along each axis they are sliced on, unit by unit, just before use (a run of
    equal units held once, with its count)."""
    ops: list[Op | Repeat] = []
    for axis, n in dev.mesh:
        if n == 1 or dev.mode(State.PARAMS, axis) not in GATHERED:
            continue
        for unit, count in dev.units_on(State.PARAMS, axis):
            one: list[Op] = []
            if dev.mode(State.PARAMS, axis) is Mode.OFF:
                one.append(
                    dev.op(
                        OpKind.H2D,
                        State.PARAMS,
                        axis,
                        phase,
                        exact(unit, n),
                        1,
                        "stream this unit's parameter slice up from host memory before its gather "
                        "(SPEC §7)",
                    )
                )
            one.append(dev.op(OpKind.ALL_GATHER, State.PARAMS, axis, phase, unit, n, why))
            ops += held(one, count)
    return ops


def grad_reduction(strategy: Strategy, axis: str) -> OpKind:
    """SPEC §4 rule 1: the collective that resolves a partial gradient on a batch-splitting axis.

    Keyed on O: if the optimizer state is whole there, every device needs the whole sum (all-
    reduce); if it is sliced, each owner needs only its slice (reduce-scatter). The other ZeRO-1
    schedule, PyTorch's ZeroRedundancyOptimizer, keys on G instead: G whole -> all-reduce, and the
    owners broadcast their updated slices after the step (``owner_update_sync``)."""
    pl = strategy.placement
    if pl.mode(State.OPTIMIZER, axis) in WHOLE:
        return OpKind.ALL_REDUCE
    if strategy.owner_update == "allreduce_broadcast" and pl.mode(State.GRADS, axis) in WHOLE:
        return OpKind.ALL_REDUCE
    return OpKind.REDUCE_SCATTER


def reduce_partial_grads(dev: Device, tag: Tag) -> list[Op | Repeat]:
    """SPEC §4 rule 1: a gradient leaves backward partial along every batch-splitting axis; it is
    reduced along each, innermost first, the later axes reducing only what the earlier left.
    A concrete model whose parameters are gathered unit by unit reduces unit by unit too, in
    backward order (the last unit's gradient is ready first; a run of equal units held once)."""
    ops: list[Op | Repeat] = []
    runs: list[UnitRun] | None = None
    for axis in dev.batch_axes:
        n = dev.mesh.degree(axis)
        if dev.mode(State.GRADS, axis) is Mode.M:
            continue  # breaks SPEC §6 rule 2; only derived with strict=False, for the checker
        op = grad_reduction(dev.strategy, axis)
        whole = op == OpKind.ALL_REDUCE
        if dev.mode(State.OPTIMIZER, axis) in WHOLE:
            why = (
                "optimizer state is whole on every device, so every device needs the whole "
                "summed gradient (rule 1)"
            )
        elif whole:
            why = (
                "grads are replicated, so the whole summed gradient is all-reduced to every "
                "device; each owner then updates its slice and broadcasts it (PyTorch's "
                "ZeroRedundancyOptimizer, rule 1)"
            )
        else:
            why = (
                "optimizer state is sliced, so each owner needs only its slice of the summed "
                "gradient (rule 1)"
            )
        if runs is None:  # the first reduction works on the whole local gradient
            split = split_axes(dev.strategy.placement, State.GRADS, dev.mesh, exclude=BATCH_AXES)
            if dev.model.reduces_per_unit and dev.mode(State.PARAMS, axis) in GATHERED:
                runs = dev.model.unit_runs(split, 1 if whole else n, dev.coords)[::-1]
            else:
                runs = [(dev.model.traffic_elements(split, 1 if whole else n, dev.coords), 1)]
        for size, count in runs:
            ops += held(
                [dev.op(op, State.GRADS, axis, "backward", size, n, why, micro_batches=tag)],
                count,
            )
        # later axes: this rank's slice
        runs = runs if whole else [(exact(size, n), count) for size, count in runs]
    return ops


def scale_once(dev: Device, tag: Tag) -> list[Op]:
    """SPEC §5 (gradient integrity): the summed gradient is divided once, by the product of the
    batch-splitting degrees, to become the batch mean. The expert axis, carved from data, splits
    the batch too (its ranks read other tokens)."""
    batch = dev.batch_axes + ((EXPERT_AXIS,) if dev.mesh.degree(EXPERT_AXIS) > 1 else ())
    if not batch:
        return []
    total = math.prod(dev.mesh.degree(a) for a in batch)
    ways = " × ".join(f"{a} {dev.mesh.degree(a)}" for a in batch)
    return [
        dev.op(
            OpKind.SCALE,
            State.GRADS,
            batch[0],
            "backward",
            0,
            total,
            f"divide the summed gradient by {total}, once, to get the batch mean"
            + (f" (the batch is split {ways} ways)" if len(batch) > 1 else ""),
            micro_batches=tag,
        )
    ]


def offload_grad_slice(dev: Device, tag: Tag) -> list[Op]:
    """SPEC §7: with offloaded gradients, the reduced gradient slice goes down to host memory,
    where the optimizer runs (ZeRO-Offload: 2Ψ/N bytes per device under mixed_adam)."""
    d = dev.mesh.degree("data")
    if d == 1 or dev.mode(State.GRADS, "data") is not Mode.OFF:
        return []
    return [
        dev.op(
            OpKind.D2H,
            State.GRADS,
            "data",
            "backward",
            exact(dev.size_on(State.GRADS, "data", True), d),
            1,
            "move the reduced gradient slice to host memory, where the optimizer runs",
            micro_batches=tag,
        )
    ]


def sequence_parallel_norms(dev: Device, tag: Tag) -> list[Op]:
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
    return [
        dev.op(
            OpKind.ALL_REDUCE,
            State.GRADS,
            "tensor",
            "backward",
            size,
            t,
            "parameters replicated across tensor ranks (norms) saw only their slice of the "
            "sequence: sum their gradients on tensor (SPEC §6 rule 3)",
            micro_batches=tag,
        )
    ]


def owner_update_sync(dev: Device) -> list[Op]:
    """SPEC §4 rule 2: when params are whole on a batch axis but the optimizer state is sliced,
    only owners update their slice; the replicas are made whole again after the step -- by an
    all-gather (ZeRO §7), or by each owner broadcasting its slice (ZeroRedundancyOptimizer).
    Sliced on several batch axes (data × context, Megatron's distributed optimizer over its
    data-parallel group with context parallel), the gathers undo the reductions in reverse:
    outermost first, each rebuilding the slice the axes inside it still leave."""
    ops: list[Op] = []
    owned = [
        axis
        for axis in dev.batch_axes
        if dev.mode(State.PARAMS, axis) in WHOLE and dev.mode(State.OPTIMIZER, axis) not in WHOLE
    ]
    for i, axis in reversed(list(enumerate(owned))):
        n = dev.mesh.degree(axis)
        if dev.strategy.owner_update == "allreduce_broadcast":
            mine = dev.coords.get(axis, 0)
            split = split_axes(dev.strategy.placement, State.OPTIMIZER, dev.mesh)
            for owner in range(n):
                elements = dev.model.local_elements(split, {**dev.coords, axis: owner})
                if elements:
                    ops.append(
                        dev.op(
                            OpKind.BROADCAST,
                            State.PARAMS,
                            axis,
                            "step",
                            elements,
                            n,
                            f"rank {owner} of the {axis} group owns this slice and updated it: it "
                            "broadcasts it to every replica (rule 2)",
                            root=owner == mine,
                        )
                    )
            continue
        total = dev.size_on(State.PARAMS, axis, True)
        inner = math.prod(dev.mesh.degree(a) for a in owned[:i])  # still sliced inside this axis
        total = total if inner == 1 else exact(total, inner)
        if dev.mode(State.OPTIMIZER, axis) in HOST_MODES:
            ops.append(
                dev.op(
                    OpKind.H2D,
                    State.PARAMS,
                    axis,
                    "step",
                    exact(total, n),
                    1,
                    "bring the updated parameter slice back from host memory",
                )
            )
        ops.append(
            dev.op(
                OpKind.ALL_GATHER,
                State.PARAMS,
                axis,
                "step",
                total,
                n,
                "only owners updated their slice of the replicated parameters: all-gather them "
                "(rule 2)",
            )
        )
    return ops


def reduces_per_micro_batch(dev: Device) -> tuple[bool, list[str]]:
    """SPEC §4 rule 5 / §6 rule 5: a gradient split on a batch axis cannot be accumulated locally
    over the m micro-batches, so it is reduced once per micro-batch (×m, priced and warned)."""
    m = dev.strategy.micro_batches
    split_on = [a for a in dev.batch_axes if dev.mode(State.GRADS, a) in SPLIT_MODES]
    if not split_on or m == 1:
        return False, []
    axis = split_on[0]
    return True, [
        f"grads are {dev.mode(State.GRADS, axis)} on the {axis} axis, so they cannot be "
        f"accumulated locally over the {m} micro-batches: the gradient reduction runs {m} times "
        f"per step ({m}x its traffic; DeepSpeed forbids ZeRO-2/3 with pipeline parallelism for "
        "this reason)"
    ]


def tensor_parallel_collectives(dev: Device, phase: str) -> list[Op | Repeat]:
    """Megatron tensor parallelism (SPEC §4), where params are S on tensor: per column-then-row
    block, g all-reduces the row-parallel partial output in forward and f the column-parallel
    input gradient in backward; with sequence parallelism each is an all-gather plus a reduce-
    scatter of the same bytes, and backward gathers the block input once more. Full
    recomputation replays forward's collectives in backward."""
    t = dev.tensor
    if t == 1:
        return []
    expect(
        dev.model.boundary_elements > 0,
        "tensor parallelism moves activations, not parameters: the model needs "
        "boundary_elements (b·s·h), e.g. a TransformerSpec",
    )
    blocks = dev.model.tp_blocks_per_layer * len(
        stage_layers(dev.model.layers, dev.stages, dev.stage)
    )
    size = dev.boundary
    passes = ["forward"] if phase == "forward" else ["backward"]
    if phase == "backward" and dev.model.recompute == "full":
        passes = ["forward (recomputed)", "backward"]
    ops: list[Op | Repeat] = []
    for kind in passes:  # the blocks of a pass: a run of equal units, held once
        block = [
            dev.op(collective, State.ACTIVATIONS, "tensor", phase, size, t, why)
            for collective, why in tensor_block_collectives(kind, dev.strategy.sequence_parallel)
        ]
        ops += held(block, blocks)
    return ops


def tensor_block_collectives(kind: str, sequence_parallel: bool) -> list[tuple[OpKind, str]]:
    """The collectives of one column-then-row block in pass ``kind`` ("forward", "forward
    (recomputed)" or "backward"), each with why it is there: Megatron's g (forward) and f
    (backward) all-reduces, or with sequence parallelism an all-gather plus a reduce-scatter --
    and in backward one all-gather more: Megatron keeps only its slice of the block input and
    gathers it again for the column-parallel weight gradient (Korthikanti et al. 2022, §4.2.2;
    ``LinearWithGradAccumulationAndAsyncCommunication``)."""
    if sequence_parallel and kind == "backward":
        return [
            (OpKind.ALL_GATHER, "backward: gather the sequence-split output gradient"),
            (
                OpKind.ALL_GATHER,
                "backward: gather the block input again for the weight gradient (Megatron saves "
                "only this rank's slice of the sequence)",
            ),
            (
                OpKind.REDUCE_SCATTER,
                "backward: the input gradient is a partial sum: reduce-scatter it along the "
                "sequence",
            ),
        ]
    if sequence_parallel:
        return [
            (
                OpKind.ALL_GATHER,
                f"{kind}: gather the sequence-split block input (sequence parallelism)",
            ),
            (
                OpKind.REDUCE_SCATTER,
                f"{kind}: the block output is a partial sum: reduce-scatter it along the sequence",
            ),
        ]
    if kind == "backward":
        return [
            (OpKind.ALL_REDUCE, "column-parallel input gradient is a partial sum: all-reduce it")
        ]
    if kind == "forward":
        return [(OpKind.ALL_REDUCE, "row-parallel output is a partial sum: all-reduce it")]
    return [
        (
            OpKind.ALL_REDUCE,
            "recomputation replays forward: the row-parallel output is all-reduced again",
        )
    ]


def pipeline_boundary(dev: Device, op: OpKind, phase: str, tag: Tag, chunk: int = 0) -> list[Op]:
    """Pipeline parallelism (SPEC §4), where params are S on pipeline: each micro-batch's boundary
    activation goes forward, and its gradient back, across each of the p-1 stage boundaries; under
    TP × PP split over the t tensor ranks (b·s·h/t each, SPEC §9).
    ``tag``: the micro-batch, (k,), or in a repeated run the range of them. ``chunk``: which of the
    rank's v model chunks (interleaved 1F1B: stage chunk·p + rank of v·p, so v·p - 1 boundaries)."""
    p, v = dev.stages, dev.strategy.virtual_stages
    stage = chunk * p + dev.stage
    if p == 1:
        return []
    if dev.model.layers < v * p:
        raise PlacementError(
            f"interleaved 1F1B splits the model into v·p = {v}·{p} = {v * p} chunks of whole "
            f"layers: the model has {dev.model.layers}"
        )
    expect(
        dev.model.boundary_elements > 0,
        "pipeline parallelism sends activations between stages: the model needs "
        "boundary_elements (b·s·h), e.g. a TransformerSpec",
    )
    towards_next = (op == OpKind.SEND) == (
        phase == "forward"
    )  # forward sends on, backward sends back
    if (towards_next and stage == v * p - 1) or (not towards_next and stage == 0):
        return []
    what = "activation" if phase == "forward" else "gradient"
    verb = {
        OpKind.SEND: "send the boundary " + what + (" on" if phase == "forward" else " back"),
        OpKind.RECV: "receive the boundary " + what,
    }[op]
    t, size = dev.tensor, dev.boundary
    if t == 1:
        return [dev.op(op, State.ACTIVATIONS, "pipeline", phase, size, p, verb, micro_batches=tag)]
    # Under TP × PP each of the t tensor ranks holds the whole b·s·h (or, with sequence
    # parallelism, its slice of the sequence): each sends only its 1/t chunk, and without sequence
    # parallelism the receivers all-gather the chunks on tensor (Megatron's scatter/gather,
    # Narayanan et al. 2021 §4.1).
    ops = [
        dev.op(
            op,
            State.ACTIVATIONS,
            "pipeline",
            phase,
            exact(size, t),
            p,
            f"{verb}: this tensor rank's 1/{t} of it",
            micro_batches=tag,
        )
    ]
    if op == OpKind.RECV and not dev.strategy.sequence_parallel:
        ops.append(
            dev.op(
                OpKind.ALL_GATHER,
                State.ACTIVATIONS,
                "tensor",
                phase,
                size,
                t,
                f"gather the boundary {what}'s {t} chunks from the tensor ranks (Megatron's "
                "scatter/gather)",
            )
        )
    return ops
