"""``derive_schedule``: the rules called in execution order for one device, the repeated
micro-batch passes held once (``passes_held_once``)."""

from __future__ import annotations

from collections.abc import Callable

from placement_edu.mesh import Mesh
from placement_edu.models import Model
from placement_edu.models.ideal import IdealSlices
from placement_edu.placement import State
from placement_edu.precision import Precision
from placement_edu.strategies import Strategy
from placement_edu.axes import validate
from placement_edu.schedule.context import context_attention_collectives
from placement_edu.schedule.costs import OpKind
from placement_edu.schedule.ops import Op, Repeat, Schedule, Tag, held
from placement_edu.experts import check_expert_axis
from placement_edu.schedule.expert_parallel import (
    dense_startup_broadcast,
    expert_all_to_alls,
    expert_degree,
    expert_parallel_grads,
)
from placement_edu.schedule.pipeline import pipeline_runs
from placement_edu.schedule.rules import (
    Device,
    gather_before_use,
    offload_grad_slice,
    owner_update_sync,
    pipeline_boundary,
    reduce_partial_grads,
    reduces_per_micro_batch,
    scale_once,
    sequence_parallel_norms,
    startup_broadcasts,
    tensor_parallel_collectives,
)


# --- the schedule ----------------------------------------------------------------------------
def passes_held_once(
    runs: list[tuple[tuple[tuple[str, int], ...], int]],
    m: int,
    one_pass: Callable[[str, int, tuple[int, ...] | range], list[Op | Repeat]],
    differs: Callable[[str, int], bool],
) -> list[Op | Repeat]:
    """The ops of every pass of ``runs`` (``pipeline_runs``), in order. ``one_pass(kind, k, tag)``:
    the ops of pass (kind, k), its own ops tagged ``tag``; ``differs(kind, k)``: whether that pass
    runs ops the other passes of its kind do not (k is 0 or m - 1). Those passes are listed one by
    one; each stretch of identical repetitions between them is held once, as a ``Repeat``."""
    entries: list[Op | Repeat] = []
    for pattern, times in runs:
        odd = {
            k - k0
            for kind, k0 in pattern
            for k in (0, m - 1)
            if 0 <= k - k0 < times and differs(kind, k)
        }
        cuts = sorted({0, times} | odd | {i + 1 for i in odd})
        for i0, i1 in zip(cuts, cuts[1:]):
            if i1 - i0 == 1:  # one repetition: its ops, one by one
                entries += [o for kind, k0 in pattern for o in one_pass(kind, k0 + i0, (k0 + i0,))]
                continue
            body = tuple(
                o for kind, k0 in pattern for o in one_pass(kind, k0 + i0, range(k0 + i0, k0 + i1))
            )
            if body:
                entries.append(Repeat(body, i1 - i0))
    return entries


def chunk_boundaries(
    dev: Device, op: OpKind, phase: str, tag: tuple[int, ...] | range
) -> list[Op | Repeat]:
    """The boundary ``op`` ("send" or "recv") of ``phase`` for each of the rank's v model chunks,
    in chunk order (``rules.pipeline_boundary``). Only the first chunk (which holds stage 0 on
    rank 0) and the last (stage v·p - 1 on the last rank) can differ; the v - 2 between are one
    chunk's ops held once with their count (``ops.held``), so the cost does not grow with v."""
    v = dev.strategy.virtual_stages
    if v == 1:
        return boundary(dev, op, phase, tag, 0)
    middle = boundary(dev, op, phase, tag, 1) if v > 2 else []
    return [
        *boundary(dev, op, phase, tag, 0),
        *held(middle, v - 2),  # type: ignore[arg-type]
        *boundary(dev, op, phase, tag, v - 1),
    ]


#: Ops of one pass that the planner's candidates share, by everything their rule reads: the
#: activations' collectives (every data placement and m share them), the parameters' gathers
#: (every m, recomputation and schedule of one placement share them); a few thousand kept.
_SHARED_OPS: dict[tuple, tuple[Op | Repeat, ...]] = {}


def _kept(key: tuple, rule: Callable[[], list[Op | Repeat]]) -> list[Op | Repeat]:
    """``rule()``'s ops, derived once for ``key`` (its ops being values) and shared."""
    ops = _SHARED_OPS.get(key)
    if ops is None:
        if len(_SHARED_OPS) >= 4096:
            _SHARED_OPS.clear()
        ops = _SHARED_OPS[key] = tuple(rule())
    return list(ops)


def shared(
    rule: Callable[[Device, str], list[Op | Repeat]], dev: Device, phase: str
) -> list[Op | Repeat]:
    """``rule(dev, phase)`` for a rule of activations' collectives (tensor parallelism's, the
    context axis'): what they read is the model, the mesh, the precision, this rank's stage, the
    degrees splitting the model, sequence parallelism and the context attention -- never the data
    placement or m -- so each is derived once for those (a Ψ-level model's: a concrete model
    hashes slowly) and shared, its ops being values."""
    if not isinstance(dev.model, IdealSlices):
        return rule(dev, phase)
    strategy, model = dev.strategy, dev.model
    key: tuple = (rule, phase, model, dev.mesh, dev.precision, dev.tensor, dev.stages, dev.stage)
    key += (strategy.sequence_parallel, strategy.context_attention)
    return _kept(key, lambda: rule(dev, phase))


def kept_gather_before_use(dev: Device, phase: str, why: str) -> list[Op | Repeat]:
    """``gather_before_use(dev, phase, why)``: it reads the placement, the model, the mesh, the
    precision and this rank -- never m, the schedule or the activations' choices -- so it is
    derived once for those (a Ψ-level model's) and shared."""
    if not isinstance(dev.model, IdealSlices):
        return gather_before_use(dev, phase, why)
    key: tuple = (gather_before_use, phase, why, dev.strategy.placement, dev.model, dev.mesh)
    key += (dev.precision, dev.rank)
    return _kept(key, lambda: gather_before_use(dev, phase, why))


def boundary(dev: Device, op: OpKind, phase: str, tag: Tag, chunk: int) -> list[Op | Repeat]:
    """``pipeline_boundary``: it reads the model, the mesh, the precision, this rank's stage, the
    degrees splitting the model, the chunks a rank holds, sequence parallelism and the micro-batch
    ``tag`` -- never the data placement or m -- so it is kept for those (a Ψ-level model's)."""
    if not isinstance(dev.model, IdealSlices):
        return list(pipeline_boundary(dev, op, phase, tag, chunk))
    key: tuple = (pipeline_boundary, op, phase, tag, chunk, dev.model, dev.mesh, dev.precision)
    key += (dev.tensor, dev.stages, dev.stage, dev.strategy.virtual_stages)
    key += (dev.strategy.sequence_parallel,)
    return _kept(key, lambda: list(pipeline_boundary(dev, op, phase, tag, chunk)))


def kept_reduce_partial_grads(dev: Device, tag: Tag) -> list[Op | Repeat]:
    """``reduce_partial_grads``: it reads the placement, how owners update, the model, the mesh,
    the precision, this rank and the micro-batch ``tag`` -- never m or the schedule -- so it is
    kept for those (a Ψ-level model's)."""
    if not isinstance(dev.model, IdealSlices):
        return reduce_partial_grads(dev, tag)
    strategy = dev.strategy
    key: tuple = (reduce_partial_grads, tag, strategy.placement, strategy.owner_update)
    key += (dev.model, dev.mesh, dev.precision, dev.rank)
    return _kept(key, lambda: reduce_partial_grads(dev, tag))


#: Why a parameter freed after forward is gathered again (rule 3).
FREED_AFTER_FORWARD = "parameters were freed after forward: gather them again for backward (rule 3)"


def derive_schedule(
    strategy: Strategy,
    model: Model,
    mesh: Mesh,
    precision: Precision,
    rank: int = 0,
    strict: bool = True,
) -> Schedule:
    """The operations one device (``rank`` of ``mesh``) performs in one optimizer step, in order:
    start-up, then each pipeline pass (forward, backward) of each micro-batch, the optimizer step,
    and the re-synchronisation of replicated parameters. Passes that repeat identically (all but
    the first forward, which gathers parameters kept after it, and the last backward, which reduces
    the accumulated gradient) are held once with their count: the cost does not grow with m.
    ``strict=False`` derives compositions that break a safety rule too (for the checker)."""
    validate(strategy, mesh, strict)
    check_expert_axis(model, mesh, strategy)
    dev = Device(strategy, model, mesh, precision, rank, mesh.coords(rank))
    m, reshard = strategy.micro_batches, strategy.reshard_after_forward
    per_micro_batch, warnings = reduces_per_micro_batch(dev)
    entries: list[Op | Repeat] = [*startup_broadcasts(dev), *dense_startup_broadcast(dev)]

    # Interleaved 1F1B: a pass of micro-batch k is its v chunks' passes, held together here (their
    # boundaries: v× the sends and receives; the order the chunks run in is looped_order's).
    def one_pass(kind: str, k: int, tag: tuple[int, ...] | range) -> list[Op | Repeat]:
        if kind == "F":
            ops: list[Op | Repeat] = chunk_boundaries(dev, OpKind.RECV, "forward", tag)
            if k == 0 or reshard:
                ops += kept_gather_before_use(
                    dev,
                    "forward",
                    "parameters are stored as slices: gather them "
                    "just before forward uses them (rule 3)",
                )
            return (
                ops
                + shared(tensor_parallel_collectives, dev, "forward")
                + expert_all_to_alls(dev, "forward")
                + shared(context_attention_collectives, dev, "forward")
                + chunk_boundaries(dev, OpKind.SEND, "forward", tag)
            )
        ops = [
            *chunk_boundaries(dev, OpKind.RECV, "backward", tag),
            *(kept_gather_before_use(dev, "backward", FREED_AFTER_FORWARD) if reshard else []),
            *shared(tensor_parallel_collectives, dev, "backward"),
            *expert_all_to_alls(dev, "backward"),
            *shared(context_attention_collectives, dev, "backward"),
            *chunk_boundaries(dev, OpKind.SEND, "backward", tag),
        ]
        if per_micro_batch or k == m - 1:
            tag = tag if per_micro_batch else ()
            ops += sequence_parallel_norms(dev, tag)
            # expert parallelism reduces two groups (expert_parallel.py)
            reduce = expert_parallel_grads if expert_degree(dev) > 1 else kept_reduce_partial_grads
            ops += reduce(dev, tag)
            ops += scale_once(dev, tag) + offload_grad_slice(dev, tag)
        return ops

    def differs(kind: str, k: int) -> bool:
        return (kind == "F" and k == 0 and not reshard) or (
            kind == "B" and k == m - 1 and not per_micro_batch
        )

    # The looped schedules (interleaved, zero bubble) run each micro-batch's passes in 1F1B's
    # pattern here: the same ops per step, in micro-batch order (zero bubble's W passes move
    # compute only; their exact order is looped_order's).
    runs = pipeline_runs(strategy.pipeline_schedule, dev.stages, dev.stage, m)
    entries += passes_held_once(runs, m, one_pass, differs)
    entries.append(
        dev.op(
            OpKind.OPTIMIZER_STEP,
            State.OPTIMIZER,
            None,
            "step",
            0,
            1,
            "each device updates the optimizer state and parameters it owns",
        )
    )
    entries += owner_update_sync(dev)
    return Schedule(tuple(entries), tuple(warnings))
