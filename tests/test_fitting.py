"""Will one rank's step fit, in the core (issue 41 item 5: ``fit`` out of ``presentation/``):
``placement_edu.fitting`` answers from a kept profile without torch, refuses in one line where none
is kept, and is what the notebook's ``fit_peak`` and ``placement-edu fit`` print."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from placement_edu.errors import PlacementError
from placement_edu.fitting import fit_peak, formula_memory
from placement_edu.presentation import fit_answers

pytestmark = pytest.mark.fast

#: FSDPMemTracker's forward/backward peak and step peak of GPT-2 124M on rank 0 of N = 8 (fp32,
#: b = 1, s = 1024, eager attention; tests/test_fit_explorer.py, tests/test_peak_tracker.py).
GPT2_N8_FORWARD_BACKWARD_PEAK = 3_945_257_352
GPT2_N8_STEP_PEAK = 311_129_940


def test_the_cores_fit_answers_gpt2_at_n8_with_the_trackers_bytes_and_no_torch() -> None:
    code = (
        "import json, sys\n"
        "from placement_edu.fitting import fit_peak\n"
        "p = fit_peak('gpt2', devices=8)\n"
        "print(json.dumps([p.forward_backward_peak.total, p.step_peak.total,"
        " 'torch' in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert json.loads(out) == [GPT2_N8_FORWARD_BACKWARD_PEAK, GPT2_N8_STEP_PEAK, False]


def test_the_notebooks_fit_peak_is_the_cores() -> None:
    for devices in (1, 8, 64):
        assert fit_answers.fit_peak("gpt2", devices=devices) == fit_peak("gpt2", devices=devices)
    assert fit_answers.formula_memory is formula_memory  # (re-exported, not a copy)


def test_a_case_with_no_kept_profile_is_refused_in_one_line(monkeypatch) -> None:
    monkeypatch.setenv("PLACEMENT_EDU_NO_CACHE", "1")  # nothing is read: as if none were kept
    with pytest.raises(PlacementError) as refused:
        fit_peak("gpt2", micro_batch=3, seq=512)
    assert str(refused.value) == (
        "no activation profile is kept for gpt2 at b = 3, s = 512, fp32, recompute none: measure "
        "one (imports torch) with placement_edu.runtime.measurement.profiles.get_profile, or run "
        "placement-edu fit"
    )
    assert "\n" not in str(refused.value) and os.environ["PLACEMENT_EDU_NO_CACHE"] == "1"
