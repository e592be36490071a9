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

from placement_edu.checker import messages
from placement_edu.checker.conditions import CONDITIONS, CheckResult, Condition, fails
from placement_edu.checker.consistency import state_consistency
from placement_edu.checker.integrity import micro_batch_classes, gradient_integrity
from placement_edu.composition import safety_violations
from placement_edu.errors import context, expect
from placement_edu.experts import SMALL_MOE, MoESpec
from placement_edu.faults import _fault, apply_fault
from placement_edu.mesh import Mesh
from placement_edu.models import ConcreteModel, Model, ModelSpec, tensor_divides_heads
from placement_edu.placement import EXPERT_AXIS
from placement_edu.precision import Precision
from placement_edu.schedule import derive_schedule, model_axis_degree, stage_kinds, validate
from placement_edu.setting import Setting, resolve
from placement_edu.strategies import Strategy, example_mesh

__all__ = [
    "CONDITIONS",
    "CheckResult",
    "Condition",
    "check",
    "default_model",
    "gradient_integrity",
    "micro_batch_classes",
    "stages_to_walk",
    "state_consistency",
]


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
    strategy: str | Strategy | Setting,
    mesh: Mesh | str | None = None,
    fault: str | None = None,
    model: Model | None = None,
    precision: str | Precision = "mixed_adam",
) -> CheckResult:
    """Check both correctness conditions and the safety rules for ``strategy`` on ``mesh``, with
    ``fault`` (a name in ``faults.FAULTS``) edited into its schedule. One pipeline stage of each
    kind is walked (``stages_to_walk``); the first broken reason found is reported. ``strategy``
    may be a ``Setting`` (``setting.resolve``); the other forms are resolved into one here, once."""
    door = strategy if isinstance(strategy, Setting) else resolve(strategy, model, mesh, precision)
    built = door.strategy
    expect(built is not None, "check needs a strategy (e.g. zero3)")
    assert built is not None
    where = example_mesh(built) if door.mesh is None else door.mesh
    if fault is not None:
        _fault(fault)  # an unknown fault: refused by name
    spec = default_model(where) if door.model is None else door.model
    tensor_divides_heads(spec, model_axis_degree(built, where, "tensor"))
    with context(f"checking {built.name} ({built.placement}) on {where}"):
        return _check(built, where, fault, spec, door.precision)


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
        integrity = Condition(False, messages.computed_on_other_params(right), direct=False)
    for direct, follows, name in (
        (integrity, consistency, "state consistency"),
        (consistency, integrity, "gradient integrity"),
    ):
        if fails(direct, True) and fails(follows, False):
            return _with_consequence(integrity, direct, name), _with_consequence(
                consistency, direct, name
            )
    return integrity, consistency


def _with_consequence(condition: Condition, direct: Condition, name: str) -> Condition:
    if condition is not direct:
        return condition
    return Condition(False, messages.with_consequence(condition.reason, name))
