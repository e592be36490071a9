"""The five named faults of SPEC §5, and expert parallelism's two, as edits of a derived schedule.

Each fault removes, repeats or spoils one operation and so breaks one correctness condition
directly (``Fault.condition``); where it makes copies or parameters differ, the other fails too
from the next step on, as a consequence, and the checker says both (SPEC §5). The static checker
analyses the edited schedule; the runtime executes the same edit
for real and watches the run diverge. Whether a fault applies is decided from the placement (not
the strategy's name): skip-param-sync needs an owner-only update of replicated parameters, so it
applies to zero1 and zero2 but not to dp, whose update is already everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Callable, Mapping

from placement_edu.errors import PlacementError
from placement_edu.memory import GATHER_BUFFER
from placement_edu.mesh import Mesh
from placement_edu.names import Word, by_name
from placement_edu.placement import EXPERT_AXIS
from placement_edu.placement import BATCH_AXES, GATHERED, SPLIT_MODES, WHOLE, State
from placement_edu.schedule import PARAM_SYNCS, REDUCTIONS, Op, OpKind, Schedule
from placement_edu.strategies import Strategy

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["FAULTS", "FaultName", "applicable_faults", "strategies_for"]


class FaultName(Word):
    """The faults' names, as ``--fault``, ``check(fault=...)`` and ``RunConfig(fault=...)`` take
    them (a ``Word``: each equals, hashes and prints as its name, "skip-grad-reduce")."""

    SKIP_GRAD_REDUCE = "skip-grad-reduce"
    DOUBLE_SCALE = "double-scale"
    SKIP_PARAM_SYNC = "skip-param-sync"
    UNSYNCED_INIT = "unsynced-init"
    STALE_GATHER = "stale-gather"
    DROP_ROUTED_TOKENS = "drop-routed-tokens"
    SKIP_EXPERT_GRAD_REDUCE = "skip-expert-grad-reduce"


# --- where a fault applies: read from the placement ---------------------------------------------
def _data_axis(strategy: Strategy, mesh: Mesh) -> bool:
    return mesh.degree("data") > 1


def _owner_only_update(strategy: Strategy, mesh: Mesh) -> bool:
    mode = strategy.placement.mode
    return (
        _data_axis(strategy, mesh)
        and mode(State.PARAMS, "data") in WHOLE
        and mode(State.OPTIMIZER, "data") in SPLIT_MODES
    )


def _replicas_broadcast_at_start(strategy: Strategy, mesh: Mesh) -> bool:
    return any(
        mesh.degree(a) > 1 and strategy.placement.mode(State.PARAMS, a) in WHOLE for a in BATCH_AXES
    )


def _expert_axis(strategy: Strategy, mesh: Mesh) -> bool:
    return mesh.degree(EXPERT_AXIS) > 1


def _expert_replicas(strategy: Strategy, mesh: Mesh) -> bool:
    """Each expert has d > 1 data replicas: its grads are reduced over them."""
    return _expert_axis(strategy, mesh) and _data_axis(strategy, mesh)


def _gathered_params(strategy: Strategy, mesh: Mesh) -> bool:
    return _data_axis(strategy, mesh) and strategy.placement.mode(State.PARAMS, "data") in GATHERED


# --- the edits ----------------------------------------------------------------------------------
def _skip_grad_reduce(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    return tuple(
        o for o in ops if not (o.state is State.GRADS and o.op in REDUCTIONS and o.axis == "data")
    )


def _double_scale(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    out: list[Op] = []
    for o in ops:
        out.append(o)
        if o.op == OpKind.SCALE:
            out.append(replace(o, why=f"fault double-scale: divide by {o.group} again"))
    return tuple(out)


def _skip_param_sync(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """Drop the re-synchronisation after the owner-only step: the all-gather, or the owners'
    broadcasts."""
    return tuple(
        o
        for o in ops
        if not (
            o.op in PARAM_SYNCS
            and o.state is State.PARAMS
            and o.axis == "data"
            and o.phase == "step"
        )
    )


def _unsynced_init(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    return tuple(
        o for o in ops if not (o.op == OpKind.BROADCAST and o.once and o.axis in BATCH_AXES)
    )


def _stale_gather(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    return tuple(
        replace(o, stale=True, why="fault stale-gather: returns the previous step's slices")
        if o.op == OpKind.ALL_GATHER
        and o.state is State.PARAMS
        and o.axis == "data"
        and o.phase in ("forward", "backward")
        else o
        for o in ops
    )


def _drop_routed_tokens(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """The first forward dispatch leaves out the block bound for one of the e expert ranks: the
    tokens routed to its experts never arrive (in every MoE layer of a run of equal layers)."""
    out: list[Op] = []
    dropped = False
    for o in ops:
        if (
            not dropped
            and o.op == OpKind.ALL_TO_ALL
            and o.axis == EXPERT_AXIS
            and o.phase == "forward"
        ):
            o = replace(
                o,
                elements=o.elements - Fraction(o.elements, o.group),
                why="fault drop-routed-tokens: the block bound for one expert rank is left out",
            )
            dropped = True
        out.append(o)
    return tuple(out)


def _skip_expert_grad_reduce(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """Drop the reduction of the experts' grads over their data replicas (expert_parallel.py)."""
    return tuple(
        o for o in ops if not (o.state is State.GRADS and o.op in REDUCTIONS and o.axis == "data")
    )


@dataclass(frozen=True)
class Fault:
    """A named fault (SPEC §5): the condition it breaks, what happens, what a strategy needs for it
    to apply (``needs``, in words; ``applies``, read from the placement on a mesh), the edit it
    makes to a derived schedule, and the transient terms it removes with the op it drops."""

    name: FaultName
    condition: str  # the one it breaks directly: "gradient_integrity" or "state_consistency"
    what: str
    needs: str
    applies: Callable[[Any, Mesh], bool]
    edit: Callable[[tuple[Op, ...]], tuple[Op, ...]]
    removes: tuple[str, ...] = ()


#: The faults ``check`` and ``run`` can edit into a schedule, by name (SPEC §5).
FAULTS: Mapping[str, Fault] = by_name(
    Fault(
        FaultName.SKIP_GRAD_REDUCE,
        "gradient_integrity",
        "the data-axis gradient reduction is left out, so each rank steps on its own "
        "partial gradient",
        "a data axis of degree > 1",
        _data_axis,
        _skip_grad_reduce,
    ),
    Fault(
        FaultName.DOUBLE_SCALE,
        "gradient_integrity",
        "the reduced gradient is divided by N twice, so every step is N times too small",
        "a data axis of degree > 1",
        _data_axis,
        _double_scale,
    ),
    Fault(
        FaultName.SKIP_PARAM_SYNC,
        "state_consistency",
        "owners update their slice of the replicated parameters and the all-gather after "
        "the step is skipped",
        "params replicated (R) on a data axis of degree > 1 with the optimizer state split "
        "there (S, SG or OFF)",
        _owner_only_update,
        _skip_param_sync,
        removes=(GATHER_BUFFER,),
    ),  # the padded buffer the dropped all-gather fills
    Fault(
        FaultName.UNSYNCED_INIT,
        "state_consistency",
        "ranks initialise from different seeds and no start-up broadcast follows",
        "params replicated (R) along a batch-splitting axis of degree > 1, made identical "
        "by a start-up broadcast",
        _replicas_broadcast_at_start,
        _unsynced_init,
    ),
    Fault(
        FaultName.STALE_GATHER,
        "state_consistency",
        "an SG gather returns the previous step's slices",
        "params sharded-with-gather (SG) or offloaded (OFF) on a data axis of degree > 1",
        _gathered_params,
        _stale_gather,
    ),
    Fault(
        FaultName.DROP_ROUTED_TOKENS,
        "gradient_integrity",
        "the dispatch all-to-all leaves out the tokens routed to one expert rank, so "
        "their experts never see them and the gradient misses their contribution",
        "an expert axis of degree > 1 (a mixture of experts)",
        _expert_axis,
        _drop_routed_tokens,
    ),
    Fault(
        FaultName.SKIP_EXPERT_GRAD_REDUCE,
        "gradient_integrity",
        "the experts' grads are not reduced over the data replicas of each expert, so "
        "each replica steps on the gradient of its own tokens only",
        "an expert axis of degree > 1 beside a data axis of degree > 1",
        _expert_replicas,
        _skip_expert_grad_reduce,
    ),
)


def _fault(name: str) -> Fault:
    if not isinstance(name, str) or name not in FAULTS:
        raise PlacementError(f"unknown fault {name!r}; known faults: {', '.join(FAULTS)}")
    return FAULTS[name]


def applicable_faults(strategy: Strategy, mesh: Mesh) -> tuple[str, ...]:
    """The names of the faults that apply to ``strategy`` on ``mesh``."""
    return tuple(name for name, fault in FAULTS.items() if fault.applies(strategy, mesh))


def strategies_for(name: str) -> tuple[str, ...]:
    """The named strategies and compositions fault ``name`` applies to, each on its example mesh
    (an expert fault: on it with an expert axis of 2 added, where expert parallelism derives)."""
    from placement_edu.strategies import COMPOSITIONS, STRATEGIES, example_mesh

    _fault(name)
    return tuple(
        s.name
        for s in (*STRATEGIES.values(), *COMPOSITIONS.values())
        if FAULTS[name].applies(s, example_mesh(s))
        or (FAULTS[name].applies(s, with_experts(s)) and _expert_parallel(s, with_experts(s)))
    )


def with_experts(strategy: Strategy) -> Mesh:
    """``strategy``'s example mesh with an expert axis of 2 added."""
    from placement_edu.strategies import example_mesh

    return Mesh.of(**dict(example_mesh(strategy).degrees), **{EXPERT_AXIS: 2})


def _expert_parallel(strategy: Strategy, mesh: Mesh) -> bool:
    """Whether expert parallelism derives for ``strategy`` on ``mesh`` (``check_expert_axis``)."""
    from placement_edu.experts import SMALL_MOE, check_expert_axis

    try:
        check_expert_axis(SMALL_MOE, mesh, strategy)
    except PlacementError:
        return False
    return True


def apply_fault(schedule: Schedule, fault_name: str, strategy: Strategy, mesh: Mesh) -> Schedule:
    """``schedule`` with fault ``fault_name`` edited in; refused (PlacementError) where it does not
    apply."""
    fault = _fault(fault_name)
    if not fault.applies(strategy, mesh):
        raise PlacementError(
            f"fault {fault.name!r} does not apply to {strategy.name} ({strategy.placement}) on "
            f"{mesh}: it needs {fault.needs}; {_where_it_applies(fault, strategy, mesh)}",
            in_context=True,
        )
    return schedule.edited(fault.edit)


def _where_it_applies(fault: Fault, strategy: Strategy, mesh: Mesh) -> str:
    """Where to try the fault instead. A strategy whose placement fits may still be on a mesh
    whose axis has one device (data=1): along it every state is whole, nothing is reduced,
    gathered or broadcast, and there is nothing for the fault to spoil -- the mesh is what to
    change, not the strategy."""
    from placement_edu.strategies import example_mesh

    bigger = example_mesh(strategy)
    if not fault.applies(strategy, bigger):  # an expert fault: the same axes with experts
        bigger = with_experts(strategy)
    derives = bigger.degree(EXPERT_AXIS) == 1 or _expert_parallel(strategy, bigger)
    if fault.applies(strategy, bigger) and derives:
        return (
            f"{strategy.name} has that placement, but on {mesh} the axis the fault acts on has one "
            "device, where nothing is reduced, gathered or broadcast for it to spoil: try "
            f"{strategy.name} on {bigger}"
        )
    return f"it applies to: {', '.join(strategies_for(fault.name))}"
