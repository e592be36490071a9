"""Figures the exercises of several chapters ask for, derived in one place (helpers only: this
module has no ``EXERCISES``)."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.report import analyze
from placement_edu.units import GB


def model_state_gb(strategy: str, psi: float, n: int, precision: str = "mixed_adam") -> Fraction:
    """One device's model state (P + G + O) under ``strategy``, Ψ = ``psi`` on ``n`` devices, in
    GB (10^9 bytes), exact."""
    return Fraction(analyze(strategy, psi, n, precision).memory.model_state) / GB
