"""The fit answers as a notebook asks for them (issue 22): ``placement_edu.fitting`` answers (the
formula, and the step a measured profile derives), and a profile not kept is measured here, once
per process, under ``FakeTensorMode`` (``placement_edu.runtime.measurement.profiles``: imports
torch, a few seconds), then cached; ``is_known`` and ``was_cached`` tell the explorer's status line
which. The formula's names are re-exported: ``default_seq``, ``formula_spec``, ``formula_memory``.
"""

from __future__ import annotations

from typing import Unpack

from placement_edu import fitting
from placement_edu.fitting import FORMULA_PRECISION, SEQ_CHOICES, default_seq, formula_memory
from placement_edu.fitting import formula_spec
from placement_edu.fitting import FitOptions
from placement_edu.peak import ActivationProfile, StepPeak
from placement_edu.setting import Setting
from placement_edu.step_case import StepCase

__all__ = [
    "FORMULA_PRECISION",
    "SEQ_CHOICES",
    "default_seq",
    "fit_peak",
    "formula_memory",
    "formula_spec",
    "is_known",
    "profile_for",
    "was_cached",
]

#: Profiles read in this process, by case, and whether each came from a cache (shipped or on disk).
_PROFILES: dict[StepCase, tuple[ActivationProfile, bool]] = {}


def profile_for(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> ActivationProfile:
    """The activation profile (eager attention), kept in this process once read: shipped with the
    package or cached on disk (no torch imported), else measured under ``FakeTensorMode`` (imports
    torch: 3-6 s on a laptop CPU, no tensor memory) and cached."""
    return measured(StepCase.of(model, micro_batch, seq, compute, "eager", recompute))


def measured(case: StepCase) -> ActivationProfile:
    """``case``'s profile, read or measured once in this process (``profile_for``)."""
    if case not in _PROFILES:
        from placement_edu.runtime.measurement.profiles import get_profile

        _PROFILES[case] = get_profile(case)
    return _PROFILES[case][0]


def is_known(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> bool:
    """Whether ``profile_for`` answers at once: read in this process already, or shipped."""
    from placement_edu.profile_store import SHIPPED_CASES

    shipped = (model, seq, compute, "eager") in SHIPPED_CASES and (micro_batch, recompute) == (
        1,
        "none",
    )
    return StepCase.of(model, micro_batch, seq, compute, "eager", recompute) in _PROFILES or shipped


def was_cached(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> bool:
    """Whether ``profile_for`` read that profile from a cache (shipped or on disk) rather than
    measuring it."""
    return _PROFILES[StepCase.of(model, micro_batch, seq, compute, "eager", recompute)][1]


def fit_peak(model: str | Setting, **options: Unpack[FitOptions]) -> StepPeak:
    """``placement_edu.fitting.fit_peak``, its profile read or measured here (``measured``: if
    none is kept, under ``FakeTensorMode``). The keywords are its own (``FitOptions``)."""
    return fitting.fit_peak(model, profile=measured, **options)
