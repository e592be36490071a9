"""State consistency (SPEC §5): do replicated parameters start identical and stay identical, and
does every gather of sliced parameters rebuild the current step's version?

Each rule is a named step that reads the schedule's ops along one axis and adds what it finds to
``Findings``: ``replicas_start_and_stay_identical`` (SPEC §4 rules 4 and 2), ``same_update``
(a whole update from the summed gradient), ``gathers_are_current`` (SPEC §4 rule 3), and
``misplaced_gather`` over the whole schedule; ``dense_on_expert`` reads the expert axis. The
sentences are ``messages.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placement_edu.checker import messages
from placement_edu.checker.conditions import Condition
from placement_edu.composition import RULE_CONDITION, RuleViolation
from placement_edu.mesh import Mesh
from placement_edu.placement import (
    BATCH_AXES,
    EXPERT_AXIS,
    GATHERED,
    SPLIT_MODES,
    STARTUP,
    WHOLE,
    Placement,
    State,
)
from placement_edu.schedule import PARAM_SYNCS, REDUCTIONS, Op, OpKind, Schedule
from placement_edu.strategies import Strategy


@dataclass
class Findings:
    """What the steps found: ``good`` (why the condition holds), ``problems`` (why it is broken
    directly), ``drift`` (broken as a consequence of a gradient left partial)."""

    good: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)


def state_consistency(
    schedule: Schedule, strategy: Strategy, mesh: Mesh, violations: tuple[RuleViolation, ...] = ()
) -> Condition:
    """Say whether replicated parameters start identical and stay identical, and whether every
    gather of sliced parameters rebuilds the current step's version."""
    ops = [o for o, _ in schedule.counted()]  # each repeated op once
    step = next((i for i, o in enumerate(ops) if o.op == OpKind.OPTIMIZER_STEP), len(ops))
    found = Findings()
    for axis, n in mesh:
        if n == 1:
            continue
        if axis == EXPERT_AXIS:  # the experts S there, one owner each; the dense weights R
            dense_on_expert(ops, step, n, found)
            continue
        replicas_start_and_stay_identical(ops, step, strategy.placement, axis, n, found)
        same_update(ops[:step], strategy.placement, axis, n, found)
        gathers_are_current(ops, strategy, axis, n, found)
    found.problems += misplaced_gather(ops, strategy.placement)
    found.problems += [
        str(v) + "." for v in violations if RULE_CONDITION.get(v.rule) == "state_consistency"
    ]
    return _verdict(found, strategy.placement, mesh)


def _params_ops(ops: list[Op], kind: str, axis: str, phases: tuple[str, ...]) -> list[Op]:
    return [
        o
        for o in ops
        if o.op == kind and o.state is State.PARAMS and o.axis == axis and o.phase in phases
    ]


def replicas_start_and_stay_identical(
    ops: list[Op], step: int, pl: Placement, axis: str, n: int, found: Findings
) -> None:
    """Params whole on ``axis``: a start-up broadcast makes the copies one model (SPEC §4 rule 4);
    where the optimizer state is split on a batch axis, an all-gather (or the owners' broadcast)
    after the owner-only step keeps them so (rule 2)."""
    if pl.mode(State.PARAMS, axis) not in WHOLE:
        return
    if _params_ops(ops, OpKind.BROADCAST, axis, (STARTUP,)):
        found.good.append(messages.starts_identical(axis))
    else:
        found.problems.append(messages.no_startup_broadcast(axis, n))
    O = pl.mode(State.OPTIMIZER, axis)
    if axis not in BATCH_AXES or O not in SPLIT_MODES:
        return
    resync = {
        o.op
        for o in ops[step + 1 :]
        if o.op in PARAM_SYNCS and o.state is State.PARAMS and o.axis == axis
    }
    if resync:
        found.good.append(messages.resynced(OpKind.ALL_GATHER in resync, axis))
    else:
        found.problems.append(messages.no_resync(O, axis, n))


def same_update(before_step: list[Op], pl: Placement, axis: str, n: int, found: Findings) -> None:
    """Optimizer state whole on a batch axis: every rank runs the whole update on its replica, the
    same one only if the gradient was summed on ``axis`` first."""
    if pl.mode(State.OPTIMIZER, axis) not in WHOLE or axis not in BATCH_AXES:
        return
    if any(o.op in REDUCTIONS and o.state is State.GRADS and o.axis == axis for o in before_step):
        found.good.append(messages.same_update(axis))
    else:
        found.drift.append(messages.own_update(axis, n))


def gathers_are_current(
    ops: list[Op], strategy: Strategy, axis: str, n: int, found: Findings
) -> None:
    """Params gathered on a batch axis: an all-gather before forward (and, when forward frees
    them, before backward) reads the slices the latest step wrote (SPEC §4 rule 3)."""
    P = strategy.placement.mode(State.PARAMS, axis)
    if P not in GATHERED or axis not in BATCH_AXES:
        return
    forward = _params_ops(ops, OpKind.ALL_GATHER, axis, ("forward",))
    backward = _params_ops(ops, OpKind.ALL_GATHER, axis, ("backward",))
    stale = [o for o in forward + backward if o.stale]
    if not forward:
        found.problems.append(messages.no_forward_gather(P, axis, n))
    elif strategy.reshard_after_forward and not backward:
        found.problems.append(messages.no_backward_gather(axis))
    if stale:
        phases = " and ".join(sorted({o.phase for o in stale}, key=("forward", "backward").index))
        found.problems.append(messages.stale_gather(axis, phases))
    elif forward:
        found.good.append(messages.current_gathers(axis, n))


def misplaced_gather(ops: list[Op], pl: Placement) -> list[str]:
    """The first all-gather of params with no slices to rebuild on its axis: params not gathered
    there, and not an owner-only step's re-gather."""
    for o in ops:
        if o.op != OpKind.ALL_GATHER or o.state is not State.PARAMS or o.axis is None:
            continue
        P, O = pl.mode(State.PARAMS, o.axis), pl.mode(State.OPTIMIZER, o.axis)
        regather = o.phase == "step" and P in WHOLE and O in SPLIT_MODES
        if not (regather or (o.phase in ("forward", "backward") and P in GATHERED)):
            return [messages.misplaced_gather(o, P)]
    return []


def dense_on_expert(ops: list[Op], step: int, n: int, found: Findings) -> None:
    """State consistency on the expert axis (``schedule/expert_parallel.py``): the dense weights,
    whole on its n ranks, start identical by a broadcast and stay identical by being updated from
    the gradient summed over the data × expert group."""
    if _params_ops(ops, OpKind.BROADCAST, EXPERT_AXIS, (STARTUP,)):
        found.good.append(messages.DENSE_START_IDENTICAL)
    else:
        found.problems.append(messages.dense_no_broadcast(n))
    summed = any(
        o.op in REDUCTIONS and o.state is State.GRADS and o.axis == EXPERT_AXIS for o in ops[:step]
    )
    if summed:
        found.good.append(messages.DENSE_SUMMED)
    else:
        found.drift.append(messages.dense_own_update(n))


def _verdict(found: Findings, pl: Placement, mesh: Mesh) -> Condition:
    """Broken directly, broken as a consequence, or holds, with the sentences that say why."""
    if found.problems:
        return Condition(False, messages.verdict(found.problems))
    if found.drift:
        return Condition(False, messages.drifts(found.drift), direct=False)
    good = list(found.good)
    if any(
        pl.mode(s, a) in SPLIT_MODES
        for s in (State.PARAMS, State.GRADS, State.OPTIMIZER)
        for a, n in mesh
        if n > 1
    ):
        good.append(messages.DISJOINT_SLICES)
    if not good:
        return Condition(True, messages.NOTHING_TO_KEEP)
    return Condition(True, messages.cap("; ".join(good)) + ".")
