"""The fit answers as a notebook asks for them (issue 22): ``placement_edu.fitting`` answers (the
formula, and the step a measured profile derives), and a profile not kept is measured here, once
per process, under ``FakeTensorMode`` (``placement_edu.runtime.measurement.profiles``: imports
torch, a few seconds), then cached; ``is_known`` and ``was_cached`` tell the explorer's status line
which. The formula's names are re-exported: ``default_seq``, ``formula_spec``, ``formula_memory``.
"""

from __future__ import annotations

from placement_edu import fitting
from placement_edu.fitting import FORMULA_PRECISION, SEQ_CHOICES, default_seq, formula_memory
from placement_edu.fitting import formula_spec
from placement_edu.peak import PRECISIONS, ActivationProfile, StepPeak

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

#: A profile's case: (model, micro_batch, seq, compute, recompute).
ProfileCase = tuple[str, int, int, str, str]
#: Profiles read in this process, and whether each came from a cache (shipped or on disk).
_PROFILES: dict[ProfileCase, tuple[ActivationProfile, bool]] = {}


def profile_for(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> ActivationProfile:
    """The activation profile (eager attention), kept in this process once read: shipped with the
    package or cached on disk (no torch imported), else measured under ``FakeTensorMode`` (imports
    torch: 3-6 s on a laptop CPU, no tensor memory) and cached."""
    case = (model, micro_batch, seq, compute, recompute)
    if case not in _PROFILES:
        from placement_edu.runtime.measurement.profiles import StepCase, get_profile

        _PROFILES[case] = get_profile(
            StepCase.of(model, micro_batch, seq, compute, "eager", recompute)
        )
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
    return (model, micro_batch, seq, compute, recompute) in _PROFILES or shipped


def was_cached(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> bool:
    """Whether ``profile_for`` read that profile from a cache (shipped or on disk) rather than
    measuring it."""
    return _PROFILES[(model, micro_batch, seq, compute, recompute)][1]


def fit_peak(
    model: str,
    micro_batch: int = 1,
    seq: int | None = None,
    recompute: str = "none",
    devices: int = 8,
    rank: int = 0,
    precision: str = "fp32",
    optimizer: str = "adam-foreach",
) -> StepPeak:
    """``placement_edu.fitting.fit_peak`` from ``profile_for``'s profile (measured here if none
    is kept)."""
    seq = seq or default_seq(model)
    profile = profile_for(model, micro_batch, seq, PRECISIONS[precision].compute_name, recompute)
    return fitting.fit_peak(
        model, micro_batch, seq, recompute, devices, rank, precision, optimizer, profile
    )
