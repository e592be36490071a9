"""Which faults apply, and which correctness condition a fault breaks -- asked of the static
checker (``placement_edu.checker`` / ``placement_edu.faults``), so the runtime's report names the
same condition the derivation does. Imported inside each function: a rank imports none of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from placement_edu.errors import PlacementError
from placement_edu.mesh import Mesh

if TYPE_CHECKING:
    from placement_edu.models import Model
    from placement_edu.precision import Precision
    from placement_edu.schedule import Schedule
    from placement_edu.strategies import Strategy


def applicable(strategy: Strategy, mesh: Mesh) -> tuple[str, ...]:
    """The faults that have an operation to break in ``strategy`` on ``mesh``."""
    from placement_edu.faults import applicable_faults

    return tuple(applicable_faults(strategy, mesh))


def refuse_inapplicable(strategy: Strategy, mesh: Mesh, fault: str | None) -> None:
    """A fault that does not apply is refused with the reason, never silently ignored."""
    if fault is None:
        return
    from placement_edu.faults import FAULTS

    if fault not in FAULTS:
        raise PlacementError(f"unknown fault {fault!r}; known faults: {', '.join(FAULTS)}")
    ok = applicable(strategy, mesh)
    if fault not in ok:
        raise PlacementError(
            f"fault {fault!r} does not apply to {strategy.name} on {mesh}: it needs "
            f"{FAULTS[fault].needs}; faults that apply here: {', '.join(ok) or 'none'}"
        )


def broken_conditions(
    strategy: Strategy,
    mesh: Mesh,
    fault: str | None,
    model: Model | None = None,
    precision: str | Precision | None = None,
) -> dict[str, str]:
    """The correctness conditions the checker says ``fault`` breaks, each with the checker's reason
    (empty for a correct run)."""
    from placement_edu.checker import check

    # (the checker's own default precision unless one is given)
    kwargs = {} if precision is None else {"precision": precision}
    result = check(strategy, mesh=mesh, fault=fault, model=model, **kwargs)
    return {name: getattr(result, name).reason for name in result.broken}


def edited_schedule(
    schedule: Schedule, fault: str | None, strategy: Strategy, mesh: Mesh
) -> Schedule:
    """The schedule with ``fault`` edited in, as the checker edits it: what a faulted run issues."""
    if fault is None:
        return schedule
    from placement_edu.faults import apply_fault

    return apply_fault(schedule, fault, strategy, mesh)
