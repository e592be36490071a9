"""The static checker: does a strategy train like a single device? (SPEC §5, §6)

It reads a strategy's placements and walks its derived schedule (optionally with a named fault
edited in), and reports the two correctness conditions separately:

- gradient integrity: a gradient leaves backward *partial* on every batch-splitting axis; the
  walk follows each micro-batch's gradient through the reductions and scales (``GradStatus``)
  and proves that none reaches ``optimizer_step`` partial and that each is scaled exactly once;
- state consistency: replicated parameters start identical (start-up broadcast) and are re-
  gathered after an owner-only update; every gather of sliced parameters reads the current step.

A fault breaks one condition directly, and the other, from the next step on, as its consequence
(SPEC §5); the checker says both, the direct one first. A gradient left partial where every rank
updates a whole replica (O replicated) makes the replicas drift apart: state consistency fails as a
consequence. Copies or gathers that break state consistency make every later gradient one of
parameters that are not the single model's: gradient integrity fails as a consequence. (A gradient
divided twice is the same on every rank: the replicas stay identical; owners re-gathered after
their update stay one model.) The safety rules of SPEC §6 (``composition.py``) are reported
alongside, each under the condition it protects. Nothing here looks at a strategy's name.

Defaults: when no mesh is given, a one-axis strategy gets 4 devices on its axis (zero3: data=4)
and a composition 2 devices per axis (zero1×tp×pp: data=2,tensor=2,pipeline=2); the model is a
small abstract one (Ψ = 1,000,000, 8 layers, a boundary activation of 4,096 elements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from placement_edu.placement import STARTUP
from placement_edu.errors import context
from placement_edu.composition import RULE_CONDITION, RuleViolation, safety_violations
from placement_edu.faults import _fault, apply_fault
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import (
    ConcreteModel,
    Model,
    ModelSpec,
    as_model,
    tensor_divides_heads,
)
from placement_edu.experts import SMALL_MOE, MoESpec, has_experts, routing_problems
from placement_edu.placement import EXPERT_AXIS
from placement_edu.placement import BATCH_AXES, GATHERED, SPLIT_MODES, WHOLE, GradStatus, State
from placement_edu.precision import Precision, get_precision
from placement_edu.schedule import (
    PARAM_SYNCS,
    REDUCTIONS,
    Schedule,
    derive_schedule,
    grad_reduction,
    model_axis_degree,
    stage_kinds,
    validate,
)
from placement_edu.strategies import Strategy, example_mesh, get_strategy
from placement_edu.units import wrapped

CONDITIONS = ("gradient_integrity", "state_consistency")


@dataclass(frozen=True)
class Condition:
    """One correctness condition: whether it holds, and a sentence saying why (or what to fix).
    ``direct``: False where the schedule keeps it but the other condition is broken, so from the
    next step on this one fails too, as a consequence (SPEC §5)."""

    holds: bool
    reason: str
    direct: bool = True

    @property
    def verdict(self) -> str:
        """'holds', 'BROKEN' or 'BROKEN as a consequence'."""
        return "holds" if self.holds else "BROKEN" + ("" if self.direct else " as a consequence")

    def to_dict(self) -> dict[str, Any]:
        return {"holds": self.holds, "direct": self.direct, "reason": self.reason}


@dataclass(frozen=True)
class CheckResult:
    """What the checker found for ``strategy`` on ``mesh``, with ``fault`` edited in (or None)."""

    strategy: str
    mesh: Mesh
    fault: str | None
    gradient_integrity: Condition
    state_consistency: Condition
    warnings: tuple[str, ...] = ()
    rule_violations: tuple[RuleViolation, ...] = ()

    @property
    def broken(self) -> list[str]:
        """The names of the conditions the schedule breaks directly (SPEC §5's table)."""
        return [name for name in CONDITIONS if _fails(getattr(self, name), direct=True)]

    @property
    def consequences(self) -> list[str]:
        """The names of the conditions that fail, from the next step on, because of the others."""
        return [name for name in CONDITIONS if _fails(getattr(self, name), direct=False)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "mesh": dict(self.mesh.degrees),
            "fault": self.fault,
            "gradient_integrity": self.gradient_integrity.to_dict(),
            "state_consistency": self.state_consistency.to_dict(),
            "broken": self.broken,
            "broken_as_consequence": self.consequences,
            "rule_violations": [v.to_dict() for v in self.rule_violations],
            "warnings": list(self.warnings),
        }

    def __str__(self) -> str:
        head = f"check {self.strategy} on {self.mesh}" + (
            f" with fault {self.fault}" if self.fault else ""
        )
        lines = [head]
        for name in self.broken + [n for n in CONDITIONS if n not in self.broken]:  # direct first
            c = getattr(self, name)
            lines.append(wrapped(f"{name.replace('_', ' ')}: {c.verdict}. {c.reason}"))
        lines += [wrapped(f"warning: {w}") for w in self.warnings]
        return "\n".join(lines)


def _fails(condition: Condition, direct: bool) -> bool:
    return not condition.holds and condition.direct is direct


# --- gradient integrity ---------------------------------------------------------------------
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
    m = strategy.micro_batches
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
    d = mesh.degree("data")
    if has_experts(model) and mesh.degree(EXPERT_AXIS) > 1:
        # EP is carved from data: its ranks read other tokens, so the dense grads are partial
        # there too, and the batch is split d·e ways (the experts' own grads are whole on it)
        batch.append(EXPERT_AXIS)
        partial_on.append(EXPERT_AXIS)
        need *= mesh.degree(EXPERT_AXIS)

    # Micro-batches that every op treats alike form one class [a, b): a repeated pass stands for a
    # range of them, so the walk's cost depends on the schedule's entries, not on m.
    classes = _micro_batch_classes(schedule, m)
    # status[c][axis]: where class c's gradients stand along each axis that splits their batch.
    status = {c: {a: GradStatus.PARTIAL for a in partial_on} for c in classes}
    scales: dict[tuple[int, int], list[int]] = {c: [] for c in classes}
    problems: list[str] = []
    at_step = None
    starts, later = _unit_wise_reductions(schedule, model)
    for i, (op, units, passes) in enumerate(schedule.held()):
        if op.op == "optimizer_step" and at_step is None:
            at_step = (
                {c: dict(v) for c, v in status.items()},
                {c: list(v) for c, v in scales.items()},
            )
        if op.state is not State.GRADS:
            continue
        ks = op.micro_batches
        hit = [c for c in classes if not ks or c[0] in ks]
        times = units * passes
        if op.op in REDUCTIONS:
            if op.phase in (STARTUP, "forward"):
                problems.append(
                    f"the {op.op} of grads on {op.axis} runs in {op.phase}, before backward has "
                    "produced the gradient it should sum; move it into backward."
                )
            if i in later:  # the same reduction, on the next units of the gradient
                continue
            # a run of micro-batches (a range) or of equal units (each its own part of the
            # gradient) is one reduction of each gradient element
            runs = 1 if isinstance(ks, range) else (passes if i in starts else times)
            for c in hit:
                if status[c].get(str(op.axis)) is GradStatus.PARTIAL and runs == 1:
                    status[c][str(op.axis)] = GradStatus.REDUCED
                else:
                    n = op.group
                    problems.append(
                        f"grads are summed on the {op.axis} axis where they are not partial (an "
                        f"extra {op.op}): the step uses {n}× the summed gradient; reduce each "
                        "gradient exactly once per batch-splitting axis."
                    )
                    break
        elif op.op == "scale":
            for c in hit:
                scales[c] += [op.group] * (1 if isinstance(ks, range) else times)
    if at_step is None:
        return Condition(
            False, "the schedule has no optimizer_step, so no gradient is ever applied."
        )
    status_at, scales_at = at_step

    for axis in partial_on:
        late = [c for c in classes if status_at[c][axis] is GradStatus.PARTIAL]
        if not late:
            continue
        spans: list[list[int]] = []  # adjacent classes joined: 0..3, 7
        for a, b in late:
            if spans and spans[-1][1] == a:
                spans[-1][1] = b
            else:
                spans.append([a, b])
        n, count = mesh.degree(axis), sum(b - a for a, b in late)
        which = (
            ""
            if count == m
            else (
                f" for micro-batch{'es' if count > 1 else ''} "
                + ", ".join(str(a) if b - a == 1 else f"{a}..{b - 1}" for a, b in spans)
            )
        )
        if axis == EXPERT_AXIS:
            fix = (
                "all-reduce the dense grads over the data × expert group (every rank that read "
                "other tokens) in backward, before optimizer_step"
            )
        elif axis == "tensor":
            fix = (
                "all-reduce the gradients of parameters replicated across tensor ranks (e.g. "
                "norms) on tensor: under sequence parallelism each tensor rank saw only its slice "
                "of the sequence (SPEC §6 rule 3)"
            )
        else:
            reduction = grad_reduction(strategy, axis)
            experts = (
                "the experts' grads over their data replicas: " if EXPERT_AXIS in batch else ""
            )
            fix = (
                f"{experts}sum them with {'an' if reduction == 'all_reduce' else 'a'} "
                f"{reduction} of grads on {axis} in backward, before optimizer_step"
            )
        # whole replicas updated from different gradients drift apart; owners' slices do not
        whole = (
            axis in ("tensor", EXPERT_AXIS)
            or strategy.placement.mode(State.OPTIMIZER, axis) in WHOLE
        )
        problems.append(
            f"grads reach optimizer_step still partial on the {axis} axis ({n} ranks){which}: each "
            "rank would apply only the gradient of its own slice of the batch"
            f"{', so the replicas drift apart' if whole else ''}; {fix}."
        )
    for signature in sorted({tuple(scales_at[c]) for c in classes}):
        if list(signature) == ([need] if need > 1 else []) or signature == (1,):
            continue
        ways = " × ".join(f"{a} {mesh.degree(a)}" for a in batch) or "1"
        if not signature:
            problems.append(
                f"the summed gradient is never divided by {need} ({ways}): the optimizer steps "
                f"with {need}× the batch-mean gradient; scale it once by {need} after the "
                "reduction."
            )
        elif len(signature) > 1:
            total = math.prod(signature)
            problems.append(
                f"the summed gradient is divided {len(signature)} times "
                f"({' then '.join(map(str, signature))}, {total} in all) instead of once by "
                f"{need}: every step is {total // need}× too small (the double-scale fault); scale "
                "exactly once, after the reduction."
            )
        else:
            problems.append(
                f"the summed gradient is divided by {signature[0]}, but the batch is split "
                f"{need} ways ({ways}): divide it once by {need}."
            )
    problems += routing_problems(schedule, model)
    problems += [
        str(v) + "." for v in violations if RULE_CONDITION.get(v.rule) == "gradient_integrity"
    ]
    if problems:
        return Condition(False, " ".join(_cap(p) for p in problems))

    if not batch:
        reason = (
            f"No axis of this mesh ({mesh}) splits the batch, so each gradient is whole when "
            "backward ends"
            + (f" and the {m} micro-batches' gradients accumulate locally" if m > 1 else "")
            + "; none reaches optimizer_step partial and none needs scaling."
        )
        if "tensor" in partial_on:
            reason = (
                reason[:-1]
                + "; the gradients of tensor-replicated params are all-reduced on tensor."
            )
        return Condition(True, reason)
    ways = " and ".join(batch) + f" ({' × '.join(str(mesh.degree(a)) for a in batch)} ranks)"
    if EXPERT_AXIS in batch:  # the two groups of expert parallelism (schedule/expert_parallel.py)
        ways = (
            f"{ways} for the dense params; the experts' own grads are whole on expert (the "
            "all-to-alls brought every token that chose them)"
            + (f" and partial only over their {mesh.degree('data')} data replicas" if d > 1 else "")
        )
    ops = " then ".join(f"the {_reduction(schedule, a)} on {a}" for a in batch)
    when = ""
    if m > 1:
        per = any(o.micro_batches for o, _ in schedule.counted() if o.state is State.GRADS)
        when = (
            f", once for each of the {m} micro-batches as it is produced (×{m} traffic, SPEC §6 "
            "rule 5)"
            if per
            else f", after local accumulation over the {m} micro-batches"
        )
    return Condition(
        True,
        f"Each gradient leaves backward partial on {ways}; "
        f"{ops} sum{'s' if len(batch) == 1 else ''} it before optimizer_step{when}, and it is "
        f"divided by {need} exactly once.",
    )


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


def _micro_batch_classes(schedule: Schedule, m: int) -> list[tuple[int, int]]:
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


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# --- state consistency -----------------------------------------------------------------------
def state_consistency(
    schedule: Schedule, strategy: Strategy, mesh: Mesh, violations: tuple[RuleViolation, ...] = ()
) -> Condition:
    """Say whether replicated parameters start identical and stay identical, and whether every
    gather of sliced parameters rebuilds the current step's version."""
    pl, ops = strategy.placement, [o for o, _ in schedule.counted()]  # each repeated op once
    step = next((i for i, o in enumerate(ops) if o.op == "optimizer_step"), len(ops))
    problems: list[str] = []
    good: list[str] = []
    drift: list[str] = []  # broken as a consequence of a gradient left partial

    def params_ops(kind: str, axis: str, phases: tuple[str, ...]) -> list:
        return [
            o
            for o in ops
            if o.op == kind and o.state is State.PARAMS and o.axis == axis and o.phase in phases
        ]

    for axis, n in mesh:
        if n == 1:
            continue
        if axis == EXPERT_AXIS:  # the experts S there, one owner each; the dense weights R
            _dense_on_expert(ops[:step], n, params_ops, good, problems, drift)
            continue
        P, O = pl.mode(State.PARAMS, axis), pl.mode(State.OPTIMIZER, axis)
        if P in WHOLE:
            if params_ops("broadcast", axis, (STARTUP,)):
                good.append(f"replicated params start identical (start-up broadcast on {axis})")
            else:
                problems.append(
                    f"params are replicated on the {axis} axis ({n} ranks) but no start-up "
                    "broadcast makes the copies identical: each rank keeps its own initialisation "
                    "(e.g. its own seed), so there is no single model to match; broadcast params "
                    f"on {axis} once at start-up (SPEC §4 rule 4)."
                )
            if axis in BATCH_AXES and O in SPLIT_MODES:
                resync = {
                    o.op
                    for o in ops[step + 1 :]
                    if o.op in PARAM_SYNCS and o.state is State.PARAMS and o.axis == axis
                }
                if resync:
                    how = "all-gathered" if "all_gather" in resync else "broadcast by their owners"
                    good.append(
                        f"after the owner-only optimizer step the params are {how} on {axis}"
                    )
                else:
                    problems.append(
                        f"optimizer state is {O} on the {axis} axis, so each of the {n} ranks "
                        "updates only its own slice of the replicated params, and no all-gather of "
                        f"params on {axis} follows optimizer_step: the copies drift apart from the "
                        f"first step; all-gather params on {axis} after the step (SPEC §4 rule 2)."
                    )
        if O in WHOLE and axis in BATCH_AXES:  # every rank runs the whole update on its replica
            if any(
                o.op in REDUCTIONS and o.state is State.GRADS and o.axis == axis for o in ops[:step]
            ):
                good.append(
                    f"every rank applies the same update to its replica, from the gradient summed "
                    f"on {axis}"
                )
            else:
                drift.append(
                    f"nothing sums the gradients on the {axis} axis, so each of the {n} ranks "
                    "updates its whole replica from its own samples' gradient: the replicas, "
                    "identical at the start, differ from the next step on"
                )
        if P in GATHERED and axis in BATCH_AXES:
            forward = params_ops("all_gather", axis, ("forward",))
            backward = params_ops("all_gather", axis, ("backward",))
            stale = [o for o in forward + backward if o.stale]
            if not forward:
                problems.append(
                    f"params are {P} on the {axis} axis but nothing all-gathers them before "
                    f"forward: each rank holds only a 1/{n} slice; all-gather params on "
                    f"{axis} before forward (SPEC §4 rule 3)."
                )
            elif strategy.reshard_after_forward and not backward:
                problems.append(
                    f"params are freed after forward but no all-gather on {axis} rebuilds them "
                    f"before backward; gather them again on {axis} (SPEC §4 rule 3)."
                )
            if stale:
                phases = " and ".join(
                    sorted({o.phase for o in stale}, key=("forward", "backward").index)
                )
                problems.append(
                    f"the all-gather of params on {axis} before {phases} returns the previous "
                    "step's slices (a stale gather): forward and backward use parameters one "
                    "update behind the ones the optimizer holds, so the gradients belong to an old "
                    f"model; every gather on {axis} must read the slices written by the latest "
                    "optimizer_step."
                )
            elif forward:
                good.append(
                    f"params are stored as disjoint 1/{n} slices on {axis} and every all-gather "
                    "rebuilds the current step's version"
                )
    for o in ops:  # a gather that has no slices to rebuild on its axis is misplaced
        if o.op != "all_gather" or o.state is not State.PARAMS or o.axis is None:
            continue
        P, O = pl.mode(State.PARAMS, o.axis), pl.mode(State.OPTIMIZER, o.axis)
        regather = o.phase == "step" and P in WHOLE and O in SPLIT_MODES
        if not (regather or (o.phase in ("forward", "backward") and P in GATHERED)):
            problems.append(
                f"an all-gather of params on {o.axis} in {o.phase} has no slices to rebuild there "
                f"(params are {P} on {o.axis}); gather params only along the axis they are SG on, "
                "or after an owner-only step."
            )
            break
    problems += [
        str(v) + "." for v in violations if RULE_CONDITION.get(v.rule) == "state_consistency"
    ]
    if problems:
        return Condition(False, " ".join(_cap(p) for p in problems))
    if drift:
        return Condition(
            False,
            "Gradient integrity is broken, and that breaks this condition too: "
            + "; ".join(drift)
            + ".",
            direct=False,
        )
    if any(
        pl.mode(s, a) in SPLIT_MODES
        for s in (State.PARAMS, State.GRADS, State.OPTIMIZER)
        for a, n in mesh
        if n > 1
    ):
        good.append(
            "each sharded state is split along one axis per dimension, so its slices are disjoint "
            "and cover it"
        )
    if not good:
        return Condition(
            True,
            "No state is replicated or sharded along any axis of this mesh, so there are no "
            "copies to keep identical.",
        )
    return Condition(True, _cap("; ".join(good)) + ".")


def _dense_on_expert(
    before_step: list, n: int, params_ops, good: list[str], problems: list[str], drift: list[str]
) -> None:
    """State consistency on the expert axis (``schedule/expert_parallel.py``): the dense weights,
    whole on its n ranks, start identical by a broadcast and stay identical by being updated from
    the gradient summed over the data × expert group."""
    if params_ops("broadcast", EXPERT_AXIS, (STARTUP,)):
        good.append("the dense params start identical on the expert ranks (start-up broadcast)")
    else:
        problems.append(
            f"the dense params are replicated on the expert axis ({n} ranks) but no start-up "
            "broadcast makes the copies identical; broadcast them on expert once at start-up "
            "(SPEC §4 rule 4)."
        )
    summed = any(
        o.op in REDUCTIONS and o.state is State.GRADS and o.axis == EXPERT_AXIS for o in before_step
    )
    if summed:
        good.append("every rank updates its dense params from the gradient summed on data × expert")
    else:
        drift.append(
            f"nothing sums the dense gradients over the data × expert group, so each of the {n} "
            "expert ranks updates its dense params from its own tokens' gradient: they differ from "
            "the next step on"
        )


# --- the checker ------------------------------------------------------------------------------
def default_model(mesh: Mesh) -> ModelSpec | MoESpec:
    """A small abstract model that every mesh can derive (tensor and pipeline need
    boundary_elements); on a mesh with an expert axis, a small mixture of experts."""
    if mesh.degree(EXPERT_AXIS) > 1:
        return SMALL_MOE
    return ModelSpec(
        psi=1_000_000,
        layers=max(8, mesh.degree("pipeline")),
        boundary_elements=4096,
        replicated_elements=8 * 6 * 64,
        name="the checker's small abstract model (Ψ = 1,000,000)",
    )


def check(
    strategy: str | Strategy,
    mesh: Mesh | str | None = None,
    fault: str | None = None,
    model: Model | None = None,
    precision: str | Precision = "mixed_adam",
) -> CheckResult:
    """Check both correctness conditions and the safety rules for ``strategy`` on ``mesh``, with
    ``fault`` (a name in ``faults.FAULTS``) edited into its schedule. One pipeline stage of each
    kind is walked (``stages_to_walk``); the first broken reason found is reported."""
    strategy = get_strategy(strategy)
    mesh = example_mesh(strategy) if mesh is None else as_mesh(mesh)
    if fault is not None:
        _fault(fault)  # an unknown fault: refused by name
    model = default_model(mesh) if model is None else as_model(model)
    tensor_divides_heads(model, model_axis_degree(strategy, mesh, "tensor"))
    precision = get_precision(precision)
    with context(f"checking {strategy.name} ({strategy.placement}) on {mesh}"):
        return _check(strategy, mesh, fault, model, precision)


def stages_to_walk(model: Model, stages: int) -> list[int]:
    """The pipeline stages whose schedules the checker walks: one of each kind (``stage_kinds``:
    first, middle by layer count, last) for a model of equal layers, whatever the number of
    stages; every stage of a concrete model, whose stages hold different tensors (and which has
    no more stages than it lists tensors)."""
    if isinstance(model, ConcreteModel):
        return list(range(stages))
    return [stage for stage, _ in stage_kinds(stages, model.layers)]


def _check(
    strategy: Strategy, mesh: Mesh, fault: str | None, model: Model, precision: Precision
) -> CheckResult:
    # what cannot run at all is still refused, with its reason
    validate(strategy, mesh, strict=False)
    violations = safety_violations(strategy, mesh)
    integrity: Condition | None = None
    consistency: Condition | None = None
    warnings: list[str] = []
    for stage in stages_to_walk(model, mesh.degree("pipeline")):
        rank = stage * mesh.stride("pipeline")  # the stage's first rank (mesh.LAYOUT)
        schedule = derive_schedule(strategy, model, mesh, precision, rank, strict=False)
        if fault is not None:
            schedule = apply_fault(schedule, fault, strategy, mesh)
        gi = gradient_integrity(schedule, strategy, mesh, violations, model)
        sc = state_consistency(schedule, strategy, mesh, violations)
        integrity = gi if integrity is None or (integrity.holds and not gi.holds) else integrity
        consistency = (
            sc if consistency is None or (consistency.holds and not sc.holds) else consistency
        )
        warnings += [
            f"SPEC §6 rule 5 (a cost, not an error): {w}"
            for w in schedule.warnings
            if f"SPEC §6 rule 5 (a cost, not an error): {w}" not in warnings
        ]
    assert integrity is not None and consistency is not None
    integrity, consistency = _say_both(integrity, consistency)
    return CheckResult(
        strategy.name, mesh, fault, integrity, consistency, tuple(warnings), violations
    )


def _say_both(integrity: Condition, consistency: Condition) -> tuple[Condition, Condition]:
    """SPEC §5: a fault breaks one condition directly and, from the next step on, the other as a
    consequence. Parameters that are not one model's (copies that differ, a stale gather) give
    gradients that are not the single-device one, however right the reductions; the direct
    reason then names the consequence too."""
    if not consistency.holds and consistency.direct and integrity.holds:
        right = integrity.reason[:1].lower() + integrity.reason[1:-1]
        integrity = Condition(
            False,
            "State consistency is broken, so from the next step on the gradients are computed on "
            "parameters that are not one model's: the gradient the optimizer applies is not the "
            f"single-device gradient, although the schedule reduces it right ({right}).",
            direct=False,
        )
    for direct, follows, name in (
        (integrity, consistency, "state consistency"),
        (consistency, integrity, "gradient integrity"),
    ):
        if _fails(direct, True) and _fails(follows, False):
            return _with_consequence(integrity, direct, name), _with_consequence(
                consistency, direct, name
            )
    return integrity, consistency


def _with_consequence(condition: Condition, direct: Condition, name: str) -> Condition:
    if condition is not direct:
        return condition
    return Condition(
        False, f"{condition.reason} From the next step on, {name} fails too, as a consequence."
    )
