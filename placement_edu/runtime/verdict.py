"""Which faults apply, and which correctness condition a fault breaks -- asked of the static
checker (``placement_edu.checker`` / ``placement_edu.faults``), so the runtime's report names the
same condition the derivation does. SPEC §5's table is the fallback while those are absent."""

from __future__ import annotations

from placement_edu.errors import PlacementError
from placement_edu.mesh import Mesh

#: SPEC §5: each named fault breaks exactly one condition.
SPEC_FAULTS = {"skip-grad-reduce": "gradient_integrity", "double-scale": "gradient_integrity",
               "skip-param-sync": "state_consistency", "unsynced-init": "state_consistency",
               "stale-gather": "state_consistency"}


def applicable(strategy, mesh: Mesh) -> tuple[str, ...]:
    """The faults that have an operation to break in ``strategy`` on ``mesh``."""
    from placement_edu.faults import applicable_faults
    return tuple(applicable_faults(strategy, mesh))


def refuse_inapplicable(strategy, mesh: Mesh, fault: str | None) -> None:
    """A fault that does not apply is refused with the reason, never silently ignored."""
    if fault is None:
        return
    if fault not in SPEC_FAULTS:
        raise PlacementError(f"unknown fault {fault!r}; known faults: {', '.join(SPEC_FAULTS)}")
    ok = applicable(strategy, mesh)
    if fault not in ok:
        from placement_edu.faults import FAULTS
        raise PlacementError(
            f"fault {fault!r} does not apply to {strategy.name} on {mesh}: it needs "
            f"{FAULTS[fault].needs}; faults that apply here: {', '.join(ok) or 'none'}")


def broken_conditions(strategy, mesh: Mesh, fault: str | None, model=None,
                      precision=None) -> dict[str, str]:
    """The correctness conditions the checker says ``fault`` breaks, each with the checker's reason
    (empty for a correct run)."""
    try:
        from placement_edu.checker import check
    except ImportError:                            # the checker is not installed: SPEC §5's table
        return {SPEC_FAULTS[fault]: "SPEC §5"} if fault else {}
    kwargs = {"mesh": mesh, "fault": fault}
    if model is not None:
        kwargs["model"] = model
    if precision is not None:
        kwargs["precision"] = precision
    result = check(strategy, **kwargs)
    return {name: getattr(result, name).reason for name in result.broken}


def edited_schedule(schedule, fault: str | None, strategy, mesh: Mesh):
    """The schedule with ``fault`` edited in, as the checker edits it: what a faulted run issues."""
    if fault is None:
        return schedule
    from placement_edu.faults import apply_fault
    return apply_fault(schedule, fault, strategy, mesh)
