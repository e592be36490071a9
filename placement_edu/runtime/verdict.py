"""Which faults apply, and which correctness condition a fault breaks -- asked of the static
checker (``placement_edu.checker`` / ``placement_edu.faults``), so the runtime's report names the
same condition the derivation does. Imported inside each function: a rank imports none of it.

And the equivalence verdict: a deviation from one process is rounding while it stays within a
tolerance made of the dtype's base and the run's own measured rounding floor (``tolerances``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

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


#: How many times the run's measured rounding floor a deviation may reach and still count as
#: rounding. The floor (``reference.rounding_floor``) is one other summation order; a strategy
#: sums in its own order, so its deviation is rounding of the same size, not the same value: at
#: 9,000 steps correct runs measured 0.6x to 3.1x the floor (dp, zero1/2/3, tp, pp on 2 ranks;
#: zero3, hsdp, dp×tp, zero3×tp, dp×pp on 4), and every fault exceeds the tolerance from its
#: first step (``benchmarks/bench_steps_memory.py`` prints both).
ROUNDING_MULTIPLE = 16


def tolerances(base: float, floor: Sequence[float], steps: int) -> list[float]:
    """Per step, the largest deviation from one process that still counts as rounding: the dtype's
    base tolerance (``RunConfig.tolerance``) plus ``ROUNDING_MULTIPLE`` times the rounding floor
    measured so far -- its running maximum, since rounding accumulated by a step does not vanish
    when the two references happen to agree more closely at a later one. Without a floor (a
    result built by hand), the base alone."""
    out, highest = [], 0.0
    for k in range(steps):
        if k < len(floor):
            highest = max(highest, floor[k])
        out.append(base + ROUNDING_MULTIPLE * highest)
    return out


def equivalent(deviation: Sequence[float], tolerance: Sequence[float]) -> bool:
    """The verdict: at every step the deviation is within that step's tolerance. Step by step, not
    the maximum against the final tolerance: a fault shows from its first steps, while the floor
    is still at the last bit, however long the run goes on (and however far rounding alone
    has carried the two references apart by its end)."""
    return all(d <= t for d, t in zip(deviation, tolerance))


def decisive_step(deviation: Sequence[float], tolerance: Sequence[float]) -> int:
    """The step (counted from 0) whose deviation is largest against its tolerance: the one that
    decides the verdict, shown beside it (0 for a run of no steps)."""
    return max(range(len(deviation)), key=lambda k: deviation[k] / tolerance[k], default=0)


#: The tolerance from which the comparison cannot tell a fault from rounding: the smallest
#: deviation a fault made at the first step it showed, 1.7e-3 (double-scale; skip-param-sync
#: 9.9e-3, skip-grad-reduce 1.9e-2, unsynced-init 0.56: dp, zero1/2/3 on 2 ranks, float64), to its
#: decade. float32's base tolerance (1e-4) is below it, float64's (1e-10) far below.
DISCRIMINATING_TOLERANCE = 1e-3


def stops_discriminating(tolerance: Sequence[float]) -> int | None:
    """The first step (counted from 0) whose tolerance passes ``DISCRIMINATING_TOLERANCE``, or
    None. Over a long run the training amplifies a last-bit difference: two one-process runs that
    differ only in the order of their sums drift apart (float64: 5.6e-17 at the first step, 0.19
    after ~10^4 steps of the toy MLP), and the tolerance built on that floor grows with them. Once
    it passes what a fault makes, "within the tolerance" no longer shows that the strategy sums the
    same gradients: the comparison has stopped discriminating."""
    return next((k for k, t in enumerate(tolerance) if t > DISCRIMINATING_TOLERANCE), None)
