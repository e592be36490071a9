"""Our derivation as an ``Estimate``, and the reconciliation of another tool's estimate with it,
kind by kind: every difference is a named term (SPEC §8).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Sequence

from placement_edu.estimators.estimate import KINDS, Bytes, Estimate, Term
from placement_edu.placement import State
from placement_edu.units import GiB
from placement_edu.shown import Shown

if TYPE_CHECKING:  # (a report's fields are read; a report is never built here)
    from placement_edu.report import Report


def ours(
    report: Report,
    quantity: str = "per GPU",
    host: bool = False,
    per_node: int = 1,
    transient: Sequence[str] = (),
) -> Estimate:
    """Our derivation as an Estimate: the persistent P, G, O bytes on the device (or, ``host=True``,
    in host memory, times ``per_node`` devices sharing a host), plus the named ``transient`` terms
    of the peak phase (e.g. "activations"). Exact bytes; printed as GB (10^9) and GiB (2^30)."""
    memory = report.memory
    where = memory.host if host else memory.device
    p = report.precision
    terms = [
        Term(
            f"{state.value} ({p.bytes_per(state)} B/param)",
            where[state] * per_node,
            f"{p.name}: {p.bytes_per(state)} B per parameter of Ψ = {report.model.psi:,}, divided "
            "by each axis it is split on "
            f"({report.strategy.placement.mode(state, 'data').value} on data)",
            state.value,
        )
        for state in (State.PARAMS, State.GRADS, State.OPTIMIZER)
    ]
    for name in transient:
        size = memory.transient_peak(name)
        if size:
            terms.append(
                Term(
                    name,
                    size,
                    f"transient, at its peak phase ({memory.peak_phase})",
                    "activations" if name == "activations" else "window",
                )
            )
    total = sum((t.bytes for t in terms), 0)
    return Estimate(
        f"ours ({report.strategy.name} [{report.strategy.placement}] on {report.mesh}, {p.name})",
        quantity,
        tuple(terms),
        f"{float(Fraction(total) / 10**9):.6g} GB ({float(Fraction(total) / GiB):.6g} GiB)",
        "GB = 10^9 bytes, GiB = 2^30 bytes",
    )


@dataclass(frozen=True)
class Line:
    """One kind of term on both sides: their bytes, ours, and why they differ (or that they
    agree)."""

    kind: str
    theirs: Bytes
    ours: Bytes
    why: str

    @property
    def agrees(self) -> bool:
        return self.theirs == self.ours


@dataclass(frozen=True)
class Reconciliation(Shown):
    """Their estimate against ours, kind by kind (KINDS order)."""

    theirs: Estimate
    ours: Estimate
    lines: tuple[Line, ...]

    @property
    def agrees(self) -> bool:
        """True when the two totals are equal to the byte."""
        return self.theirs.total_bytes == self.ours.total_bytes


def reconcile(theirs: Estimate, mine: Estimate) -> Reconciliation:
    """Line up two estimates kind by kind. A line's ``why`` names the terms on each side; a kind
    found on one side only is something the other does not count. Under a "max" rule the lines
    are the phases, and the last line says the figure is the largest one, not their sum."""
    lines = []
    for kind in KINDS:
        mine_t = [t for t in mine.terms if t.kind == kind]
        their_t = [t for t in theirs.terms if t.kind == kind]
        if not mine_t and not their_t:
            continue
        a, b = theirs.kind_bytes(kind), mine.kind_bytes(kind)
        if a == b == 0:
            continue
        if a == b:
            why = "; ".join(t.why for t in their_t)
        else:
            why = (
                "they: "
                + ("; ".join(f"{t.name} -- {t.why}" for t in their_t) or "not counted")
                + " | we: "
                + ("; ".join(f"{t.name} -- {t.why}" for t in mine_t) or "not counted")
            )
        lines.append(Line(kind, a, b, why))
    if theirs.rule != mine.rule:
        lines.append(
            Line(
                "total",
                theirs.total_bytes,
                mine.total_bytes,
                f"they print the {'largest' if theirs.rule == 'max' else 'sum'} of their terms, "
                f"we the {'largest' if mine.rule == 'max' else 'sum'} (what is alive at once)",
            )
        )
    return Reconciliation(theirs, mine, tuple(lines))
