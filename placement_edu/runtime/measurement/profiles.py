"""Activation profiles measured: ``get_profile`` reads the one kept
(``placement_edu.profile_store``: shipped, or cached), else measures it under ``FakeTensorMode``
(imports torch and its trackers: about 2 s on a laptop CPU, most of it the import) and keeps it.
``write_shipped`` measures the shipped ones afresh (``python -m
placement_edu.runtime.measurement.profiles``, after a change to the measuring code or to torch:
their keys name both).
"""

from __future__ import annotations

import json
from pathlib import Path

from placement_edu.peak import ActivationProfile
from placement_edu.step_case import StepCase
from placement_edu.profile_store import (  # re-exported: where a profile is kept, and its name
    SHIPPED,
    SHIPPED_CASES,
    cache_dir,
    code_key,
    keep,
    profile_key,
    stored,
)

__all__ = [
    "SHIPPED",
    "SHIPPED_CASES",
    "StepCase",
    "cache_dir",
    "code_key",
    "get_profile",
    "profile_key",
    "write_shipped",
]


def get_profile(case: StepCase) -> tuple[ActivationProfile, bool]:
    """(the profile of ``case``'s step, whether it came from the cache). Measured under
    ``FakeTensorMode`` when not cached."""
    kept = stored(case)
    if kept is not None:
        return kept, True
    from placement_edu.runtime.processes import rundir

    with rundir.inductor_cache():  # TMPDIR left as found
        from placement_edu.runtime.measurement.activation_profile import measure

        profile = measure(case)
    keep(profile, case)
    return profile, False


def write_shipped() -> list[Path]:
    """Measure the shipped cases afresh and write them into the package (run after changing the
    measuring code or torch: their key names both)."""
    from placement_edu.runtime.measurement.activation_profile import measure

    SHIPPED.mkdir(parents=True, exist_ok=True)
    for old in SHIPPED.glob("*.json"):
        old.unlink()
    written = []
    for model, seq, compute, attention in SHIPPED_CASES:
        case = StepCase.of(model, 1, seq, compute, attention)
        path = SHIPPED / f"{profile_key(case)}.json"
        profile = measure(case)
        path.write_text(json.dumps(profile.to_dict(), indent=1) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write_shipped():
        print(p)
