"""The checker's verdict as values: a ``Condition`` (holds, and why), and a ``CheckResult`` (both
conditions of SPEC §5, the safety rules that fail, the warnings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from placement_edu.composition import RuleViolation
from placement_edu.mesh import Mesh
from placement_edu.units import wrapped
from placement_edu.shown import Shown

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
class CheckResult(Shown):
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
        return [name for name in CONDITIONS if fails(getattr(self, name), direct=True)]

    @property
    def consequences(self) -> list[str]:
        """The names of the conditions that fail, from the next step on, because of the others."""
        return [name for name in CONDITIONS if fails(getattr(self, name), direct=False)]

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


def fails(condition: Condition, direct: bool) -> bool:
    """Whether ``condition`` is broken directly (``direct``) or as a consequence (not)."""
    return not condition.holds and condition.direct is direct
