"""Gradient integrity (SPEC §5): does the optimizer read each gradient summed along every
batch-splitting axis, and divided exactly once by the split?

The proof is a walk, in named steps:

1. ``batch_split``: the axes the batch is split on, the axes a gradient leaves backward partial on,
   and the divisor the step needs;
2. ``walk``: each micro-batch's gradient followed through the schedule's reductions and scales,
   to where ``optimizer_step`` reads it;
3. ``left_partial`` and ``misscaled``: what the step reads that is still partial, or divided by the
   wrong number;
4. ``why_it_holds``: when nothing is wrong, the sentence that says why.

The sentences are ``messages.py``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from placement_edu.checker import messages
from placement_edu.checker.conditions import Condition
from placement_edu.composition import RULE_CONDITION, RuleViolation
from placement_edu.experts import has_experts, routing_problems
from placement_edu.mesh import Mesh
from placement_edu.models import Model
from placement_edu.placement import BATCH_AXES, EXPERT_AXIS, STARTUP, WHOLE, GradStatus, State
from placement_edu.schedule import (
    REDUCTIONS,
    Op,
    OpKind,
    Schedule,
    grad_reduction,
    model_axis_degree,
)
from placement_edu.strategies import Strategy

#: Micro-batches [a, b) that every op treats alike.
Span = tuple[int, int]


def gradient_integrity(
    schedule: Schedule,
    strategy: Strategy,
    mesh: Mesh,
    violations: tuple[RuleViolation, ...] = (),
    model: Model | None = None,
) -> Condition:
    """Follow each micro-batch's gradient through ``schedule`` and say whether the optimizer
    reads it summed along every batch-splitting axis and divided exactly once by the split.
    ``model`` tells whether any parameter is left whole by tensor parallelism (None: assume so)."""
    split = batch_split(strategy, mesh, model)
    # Micro-batches that every op treats alike form one class [a, b): a repeated pass stands for a
    # range of them, so the walk's cost depends on the schedule's entries, not on m.
    classes = micro_batch_classes(schedule, strategy.micro_batches)
    at_step, problems = walk(schedule, classes, split.partial_on, model)
    if at_step is None:
        return Condition(False, messages.NO_OPTIMIZER_STEP)
    problems += left_partial(at_step, classes, split, strategy, mesh)
    problems += misscaled(at_step, classes, split, mesh)
    problems += routing_problems(schedule, model)
    problems += [
        str(v) + "." for v in violations if RULE_CONDITION.get(v.rule) == "gradient_integrity"
    ]
    if problems:
        return Condition(False, messages.verdict(problems))
    return Condition(True, why_it_holds(schedule, strategy, mesh, split))


@dataclass(frozen=True)
class BatchSplit:
    """``batch``: the axes that split the batch; ``partial_on``: the axes a gradient leaves
    backward partial on (the batch's, and tensor where sequence parallelism splits the norms'
    input); ``need``: the divisor of the summed gradient (the product of the batch axes)."""

    batch: tuple[str, ...]
    partial_on: tuple[str, ...]
    need: int


def batch_split(strategy: Strategy, mesh: Mesh, model: Model | None) -> BatchSplit:
    """Step 1: where each gradient is partial when backward produces it."""
    batch = [a for a in BATCH_AXES if mesh.degree(a) > 1]
    partial_on = list(batch)
    replicated = model is None or model.tensor_replicated_elements(range(model.layers), True) > 0
    if (
        model_axis_degree(strategy, mesh, "tensor") > 1
        and strategy.sequence_parallel
        and replicated
    ):
        partial_on.append("tensor")  # norms see only their slice of the sequence (SPEC §6 rule 3)
    need = math.prod(mesh.degree(a) for a in batch)
    if has_experts(model) and mesh.degree(EXPERT_AXIS) > 1:
        # EP is carved from data: its ranks read other tokens, so the dense grads are partial
        # there too, and the batch is split d·e ways (the experts' own grads are whole on it)
        batch.append(EXPERT_AXIS)
        partial_on.append(EXPERT_AXIS)
        need *= mesh.degree(EXPERT_AXIS)
    return BatchSplit(tuple(batch), tuple(partial_on), need)


@dataclass(frozen=True)
class AtStep:
    """What ``optimizer_step`` reads, per class of micro-batches: where its gradients stand on each
    axis they were partial on, and the divisors applied to them, in order."""

    status: dict[Span, dict[str, GradStatus]]
    scales: dict[Span, list[int]]


def walk(
    schedule: Schedule, classes: list[Span], partial_on: tuple[str, ...], model: Model | None
) -> tuple[AtStep | None, list[str]]:
    """Step 2: follow each class's gradients through the schedule's reductions and scales. What
    the first ``optimizer_step`` reads (None: there is none), and the reductions that are wrong
    wherever they run."""
    status = {c: {a: GradStatus.PARTIAL for a in partial_on} for c in classes}
    scales: dict[Span, list[int]] = {c: [] for c in classes}
    problems: list[str] = []
    at_step = None
    starts, later = _unit_wise_reductions(schedule, model)
    for i, (op, units, passes) in enumerate(schedule.held()):
        if op.op == OpKind.OPTIMIZER_STEP and at_step is None:
            at_step = AtStep(
                {c: dict(v) for c, v in status.items()}, {c: list(v) for c, v in scales.items()}
            )
        if op.state is not State.GRADS:
            continue
        ks = op.micro_batches
        hit = [c for c in classes if not ks or c[0] in ks]
        times = units * passes
        if op.op in REDUCTIONS:
            if op.phase in (STARTUP, "forward"):
                problems.append(messages.reduction_before_backward(op))
            if i in later:  # the same reduction, on the next units of the gradient
                continue
            # a run of micro-batches (a range) or of equal units (each its own part of the
            # gradient) is one reduction of each gradient element
            runs = 1 if isinstance(ks, range) else (passes if i in starts else times)
            problems += _reduce(op, runs, hit, status)
        elif op.op == OpKind.SCALE:
            for c in hit:
                scales[c] += [op.group] * (1 if isinstance(ks, range) else times)
    return at_step, problems


def _reduce(
    op: Op, runs: int, hit: list[Span], status: dict[Span, dict[str, GradStatus]]
) -> list[str]:
    """One reduction of the gradients of the classes ``hit``: partial becomes reduced; a second
    reduction on an axis (or one op that reduces the same elements ``runs`` times) is extra."""
    for c in hit:
        if status[c].get(str(op.axis)) is GradStatus.PARTIAL and runs == 1:
            status[c][str(op.axis)] = GradStatus.REDUCED
        else:
            return [messages.extra_reduction(op)]
    return []


def left_partial(
    at_step: AtStep, classes: list[Span], split: BatchSplit, strategy: Strategy, mesh: Mesh
) -> list[str]:
    """Step 3: the axes on which ``optimizer_step`` reads a gradient still partial, for which
    micro-batches, and how to sum it there."""
    problems = []
    for axis in split.partial_on:
        late = [c for c in classes if at_step.status[c][axis] is GradStatus.PARTIAL]
        if not late:
            continue
        spans: list[list[int]] = []  # adjacent classes joined: 0..3, 7
        for a, b in late:
            if spans and spans[-1][1] == a:
                spans[-1][1] = b
            else:
                spans.append([a, b])
        count = sum(b - a for a, b in late)
        which = messages.which_micro_batches(spans, count, strategy.micro_batches)
        reduction = "" if axis in ("tensor", EXPERT_AXIS) else grad_reduction(strategy, axis)
        fix = messages.partial_fix(axis, reduction, EXPERT_AXIS in split.batch)
        # whole replicas updated from different gradients drift apart; owners' slices do not
        whole = (
            axis in ("tensor", EXPERT_AXIS)
            or strategy.placement.mode(State.OPTIMIZER, axis) in WHOLE
        )
        problems.append(messages.still_partial(axis, mesh.degree(axis), which, whole, fix))
    return problems


def misscaled(at_step: AtStep, classes: list[Span], split: BatchSplit, mesh: Mesh) -> list[str]:
    """Step 3: the classes whose summed gradient the step reads divided by anything but ``need``,
    once (never, twice, or by the wrong number)."""
    need = split.need
    ways = " × ".join(f"{a} {mesh.degree(a)}" for a in split.batch) or "1"
    problems = []
    for signature in sorted({tuple(at_step.scales[c]) for c in classes}):
        if list(signature) == ([need] if need > 1 else []) or signature == (1,):
            continue
        if not signature:
            problems.append(messages.never_scaled(need, ways))
        elif len(signature) > 1:
            problems.append(messages.scaled_twice(signature, math.prod(signature), need))
        else:
            problems.append(messages.scaled_wrong(signature[0], need, ways))
    return problems


def why_it_holds(schedule: Schedule, strategy: Strategy, mesh: Mesh, split: BatchSplit) -> str:
    """Step 4: the reductions that sum each gradient, and the one division, in a sentence."""
    m, batch = strategy.micro_batches, split.batch
    if not batch:
        return messages.no_batch_axis(mesh, m, "tensor" in split.partial_on)
    ways = " and ".join(batch) + f" ({' × '.join(str(mesh.degree(a)) for a in batch)} ranks)"
    if EXPERT_AXIS in batch:
        ways = messages.expert_groups(ways, mesh.degree("data"))
    ops = " then ".join(f"the {_reduction(schedule, a)} on {a}" for a in batch)
    per = any(o.micro_batches for o, _ in schedule.counted() if o.state is State.GRADS)
    when = messages.micro_batch_reductions(m, per)
    return messages.integrity_holds(ways, ops, len(batch), when, split.need)


def _unit_wise_reductions(schedule: Schedule, model: Model | None) -> tuple[set[int], set[int]]:
    """Where a gradient is reduced unit by unit (a concrete model with per-layer gather units:
    each unit's gradient is reduce-scattered by its own collective as backward leaves it), which
    ops of ``schedule.held()`` (by index) begin a reduction and which go on with it on the next
    units. The ops of one reduction follow one another (no other gradient op between them) with
    the same kind, axis, phase and micro-batches, and run on at most the model's gather units in
    all; more than that is a second reduction, which the walk reports."""
    starts: set[int] = set()
    later: set[int] = set()
    if model is None or not model.reduces_per_unit:
        return starts, later
    key, units = None, 0
    for i, (op, n, _passes) in enumerate(schedule.held()):
        if op.state is not State.GRADS:
            continue
        this = (op.op, op.axis, op.phase, op.micro_batches) if op.op in REDUCTIONS else None
        if this is not None and this == key and units + n <= model.gather_units:
            later.add(i)
            units += n
        else:
            key, units = this, n
            if this is not None and n <= model.gather_units:
                starts.add(i)
    return starts, later


def _reduction(schedule: Schedule, axis: str) -> str:
    return next(
        o.op
        for o, _ in schedule.counted()
        if o.state is State.GRADS and o.op in REDUCTIONS and o.axis == axis
    )


def micro_batch_classes(schedule: Schedule, m: int) -> list[Span]:
    """Micro-batches 0..m-1 cut into intervals [a, b) that every op of ``schedule`` treats alike:
    each op's ``micro_batches`` (one k, or the range a repeated op stands for) covers a whole
    interval or none of it."""
    edges = {0, m}
    for op, _ in schedule.counted():
        ks = op.micro_batches
        if isinstance(ks, range) and ks:
            edges |= {min(ks[0], ks[-1]), max(ks[0], ks[-1]) + 1}
        else:
            edges |= {e for k in ks for e in (k, k + 1)}
    cuts = sorted(c for c in edges if 0 <= c <= m)
    return list(zip(cuts, cuts[1:]))
