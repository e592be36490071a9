"""The engines, one per idea, and which one executes a strategy -- chosen by its *placement*, never
by its name: a user-defined Strategy with zero2's placement runs on the zero2 engine.

Read them in this order (each file says which collectives its placement implies, and why):
  dp.py               everything replicated; one all-reduce
  zero1_allreduce.py  optimizer state sharded, PyTorch's way: all-reduce, owners broadcast (3Ψ)
  zero1.py            the same placement, ZeRO's way: reduce-scatter, all-gather (2Ψ)
  zero2.py            gradients sharded too
  zero3.py            parameters sharded-with-gather: gathered per use (also fsdp, fsdp_grad_op)
  offload.py          zero2 with the gradient and optimizer slices on the host (zero2_offload)
  zero3_offload.py    zero3 with every slice on the host
  hsdp.py             zero3 inside each data group, replicated across replica groups
  tp.py               tensor parallel, alone or under dp / zero3 on the data axis
  pp.py               pipeline stages, alone or under dp on the data axis

What they share: ``engine.py`` (mesh position, batch slice, flat layout, ledgers, faults),
``flat.py`` (ZeRO's sharding rule), ``adam.py`` (element-wise Adam); what they train: ``toy.py``
(``toy_shapes.py``: its sizes without torch), and ``reference.py``, one process's run.

This module imports no torch: the engines are imported when a run starts.
"""

from __future__ import annotations

import importlib
from typing import Callable

from placement_edu.errors import PlacementError
from placement_edu.mesh import Mesh
from placement_edu.placement import MODEL_STATES, Mode
from placement_edu.strategies import COMPOSITIONS, STRATEGIES, Strategy, example_mesh

#: Which engine executes which placement. A row matches when the modes of params, grads and
#: optimizer state on the data axis are ``data``; ``other`` names the one other axis of size > 1
#: (split by every state for tensor and pipeline, replicated by every state for replica), or None;
#: ``owner_update`` (where params are whole and optimizer state sliced) is the strategy's choice,
#: None for any.
ENGINES: tuple[tuple[tuple[str, str, str], str | None, str | None, str], ...] = (
    # data: P,  G,     O       other       owner_update           engine
    (("R", "R", "R"), None, None, "dp.DataParallel"),
    (("R", "R", "S"), None, "allreduce_broadcast", "zero1_allreduce.Zero1AllReduce"),
    (("R", "R", "S"), None, "scatter_gather", "zero1.Zero1"),
    (("R", "S", "S"), None, None, "zero2.Zero2"),
    (("SG", "S", "S"), None, None, "zero3.Zero3"),
    (("R", "OFF", "OFF"), None, None, "offload.Zero2Offload"),
    (("OFF", "OFF", "OFF"), None, None, "zero3_offload.Zero3Offload"),
    (("SG", "S", "S"), "replica", None, "hsdp.HybridShard"),
    (("R", "R", "R"), "tensor", None, "tp.TensorParallel"),
    (("SG", "S", "S"), "tensor", None, "tp.TensorParallelZero3"),
    (("R", "R", "R"), "pipeline", None, "pp.Pipeline"),
)

#: What every state must be on the ``other`` axis for the row to apply.
OTHER_AXIS_MODE = {"tensor": Mode.S, "pipeline": Mode.S, "replica": Mode.R}


def _match(strategy: Strategy, mesh: Mesh) -> tuple[str | None, str]:
    """(the engine's "module.Class", or None; a sentence saying why none fits)."""
    pl = strategy.placement
    data = tuple(str(pl.mode(s, "data")) for s in MODEL_STATES)
    others = [a for a, n in mesh if a != "data" and n > 1]
    if len(others) > 1:
        return (
            None,
            f"the engines use at most one axis besides data; {mesh} has {', '.join(others)}",
        )
    other = others[0] if others else None
    if other is not None and other not in OTHER_AXIS_MODE:
        return None, f"no engine runs the {other} axis (the core derives it: analyze(), check())"
    if other is not None and any(
        pl.mode(s, other) is not OTHER_AXIS_MODE[other] for s in MODEL_STATES
    ):
        want = OTHER_AXIS_MODE[other]
        return None, f"on the {other} axis the engines need every state {want}"
    if strategy.sequence_parallel:
        return None, "the engines do not run sequence parallelism (the core prices it: analyze())"
    if strategy.shard_dims:
        return None, (
            "the engines shard with their own rules (flat on data, Megatron's plan on tensor, "
            "layers on pipeline); shard_dims is priced by analyze() only"
        )
    if strategy.micro_batches > 1 and other != "pipeline":
        return None, "only the pipeline engine splits a step into micro-batches"
    for modes, axis, owner_update, engine in ENGINES:
        if modes == data and axis == other and owner_update in (None, strategy.owner_update):
            return engine, ""
    return None, f"no engine executes P, G, O = {', '.join(data)} on the data axis" + (
        f" with the {other} axis" if other else ""
    )


def runnable(strategy: Strategy, mesh: Mesh) -> str:
    """The engine ("module.Class") that executes ``strategy``'s placement on ``mesh``, named
    without importing it (torch); a PlacementError saying why and listing what runs, where none
    does."""
    engine, why = _match(strategy, mesh)
    if engine is None:
        raise PlacementError(
            f"the runtime cannot execute {strategy.name} ({strategy.placement}) on {mesh}: "
            f"{why}. It runs these placements: {', '.join(RUNNABLE)}; analyze() and "
            "check() derive any placement",
            in_context=True,
        )
    return engine


def engine_for(strategy: Strategy, mesh: Mesh) -> Callable:
    """The engine class that executes ``strategy``'s placement on ``mesh`` (``runnable``)."""
    module, name = runnable(strategy, mesh).split(".")
    return getattr(importlib.import_module(f"placement_edu.runtime.engines.{module}"), name)


#: The named strategies and compositions the runtime executes (on their example meshes), in the
#: order they are listed.
RUNNABLE: tuple[str, ...] = tuple(
    s.name
    for s in (*STRATEGIES.values(), *COMPOSITIONS.values())
    if _match(s, example_mesh(s))[0] is not None
)
