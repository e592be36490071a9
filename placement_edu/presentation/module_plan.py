"""The planner on a real model, for the course (issue 39, item 7): ``plan`` twice, once with every
peak Korthikanti's formula's and once with each FSDP2 plan's peak the module's
(``plan(peak_of=cli.one_peak.planner_peaks(...))``, what ``placement-edu plan --model`` prints),
and the plans whose verdict ("fits" or "over budget") the module's peak changes.

Only the FSDP2 plans (zero3, fsdp, fsdp_grad_op, hsdp on data, replica and tensor axes) have a
module's peak: ``fit`` derives no other placement, so every other plan keeps the formula's in both
runs. The profiles are measured once under ``FakeTensorMode`` (a few seconds the first time) and
cached.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement_edu.cli.one_peak import ATTENTION_OF
from placement_edu.models import TransformerSpec
from placement_edu.configuration import Choice
from placement_edu.planner import Plan, plan
from placement_edu.precision import get_precision
from placement_edu.units import GB
from placement_edu.shown import Shown


@dataclass(frozen=True)
class ModulePlan(Shown):
    """``formula``: every peak the formula's; ``module``: each FSDP2 plan's the module's."""

    model: str
    spec: TransformerSpec
    formula: Plan
    module: Plan

    @property
    def priced_by_module(self) -> tuple[Choice, ...]:
        """The plans whose peak is the module's (each carries the formula's beside it)."""
        every = self.module.ranked + self.module.infeasible
        return tuple(c for c in every if c.formula_peak_bytes is not None)

    @property
    def flips(self) -> tuple[Choice, ...]:
        """The module-priced plans on the other side of the budget from the formula's verdict,
        the largest change first."""
        budget = self.module.budget_bytes
        flipped = [
            c for c in self.priced_by_module if (c.peak_bytes > budget) != (_formula(c) > budget)
        ]
        return tuple(sorted(flipped, key=lambda c: _formula(c) - c.peak_bytes))

    def both(self, choice: Choice) -> Choice:
        """``choice`` (of either plan) as the module's plan priced it: both peaks, where it has
        the module's."""
        every = self.module.ranked + self.module.infeasible
        return next(c for c in every if c.label() == choice.label())

    def __str__(self) -> str:
        m, spec, budget = self.module, self.spec, self.module.budget_bytes
        gb = lambda x: f"{x / GB:.2f} GB"  # noqa: E731
        lines = [
            f"{self.model}, s = {spec.seq}, b = {spec.micro_batch}, {spec.attention} attention "
            f"(the module's {ATTENTION_OF[spec.attention]}), on {m.devices} × {m.hardware.name}",
            f"  {gb(budget)} a device; {len(self.priced_by_module)} FSDP2 plans priced by the "
            "module's profile, the others by the formula",
        ]
        for name, p in (("the formula's peaks", self.formula), ("the module's peaks", m)):
            if p.chosen is None:
                lines.append(f"  chosen by {name}: none fits")
                continue
            c = self.both(p.ranked[p.chosen])
            lines += [
                f"  chosen by {name}: {c.label()}",
                f"    peak: the module's {gb(c.peak_bytes)}, the formula's "
                f"{gb(c.formula_peak_bytes)}"
                if c.formula_peak_bytes is not None
                else f"    peak: the formula's {gb(c.peak_bytes)} (not FSDP2: no module's)",
            ]
        lines.append(f"{len(self.flips)} plans change verdict (module's peak, formula's):")
        for c in self.flips:
            verdict = "over" if c.peak_bytes > budget else "fits"
            lines.append(f"  {c.label()}: {gb(c.peak_bytes)}, {gb(_formula(c))}: {verdict}")
        return "\n".join(lines)


def module_plan(
    model: str = "llama-8b",
    devices: int = 64,
    memory_gb: float = 80,
    seq: int = 8192,
    micro_batch: int = 1,
    attention: str = "flash",
    hardware: str = "h100-nvlink-ib",
    precision: str = "mixed_adam",
) -> ModulePlan:
    """Plan ``model`` on ``devices`` devices of ``memory_gb`` GB (10^9 bytes) each, both ways."""
    from placement_edu.cli.one_peak import planner_peaks, spec_of

    spec = spec_of(model, seq, micro_batch, attention, "none")
    budget = round(memory_gb * GB)
    formula = plan(spec, devices, budget, hardware, precision)
    peak_of = planner_peaks(model, spec, get_precision(precision))
    module = plan(spec, devices, budget, hardware, precision, peak_of=peak_of)
    return ModulePlan(model, spec, formula, module)


def _formula(choice: Choice) -> int:
    """The formula's peak beside a module-priced plan's."""
    assert choice.formula_peak_bytes is not None
    return choice.formula_peak_bytes
