"""Will one rank's step fit, in the core (issue 41 item 5: ``fit`` out of ``presentation/``):
``placement_edu.fitting`` answers from a kept profile without torch, refuses in one line where none
is kept, and is what the notebook's ``fit_peak`` and ``placement-edu fit`` print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from placement_edu.errors import PlacementError
from placement_edu.fitting import fit_peak, formula_memory
from placement_edu.presentation import fit_answers
from placement_edu.setting import resolve

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
        "no activation profile is kept for gpt2 at b = 3, s = 512, fp32, eager attention, "
        "recompute none: measure one (imports torch) with "
        "placement_edu.runtime.measurement.profiles.get_profile, or run placement-edu fit"
    )
    assert "\n" not in str(refused.value) and os.environ["PLACEMENT_EDU_NO_CACHE"] == "1"


def test_fit_takes_a_setting_from_the_door_as_it_takes_its_keywords(capsys) -> None:
    """One door (issue 41 item 1): ``fit(resolve(...))`` is ``fit(keywords)``, GPT-2 on N = 8 at
    the tracker's bytes, in either word for each thing (fsdp2 is zero3, fp32 is fp32_adam); FSDP2
    without resharding after forward (fsdp_grad_op) keeps each block gathered until its backward,
    and ``placement-edu fit`` prints the same peak for it."""
    from placement_edu.cli import main

    setting = resolve("fsdp2", devices=8, precision="fp32", attention="eager", architecture="gpt2")
    step = fit_peak(setting)
    assert step == fit_peak("gpt2", devices=8) == fit_peak("gpt2", devices=8, precision="fp32_adam")
    assert (step.forward_backward_peak.total, step.step_peak.total) == (
        GPT2_N8_FORWARD_BACKWARD_PEAK,
        GPT2_N8_STEP_PEAK,
    )
    gathered = fit_peak(replace(setting, strategy=resolve("fsdp_grad_op").strategy))
    assert gathered == fit_peak("gpt2", devices=8, strategy="fsdp2_no_reshard")
    assert gathered.peak.total > step.peak.total
    argv = "fit --model gpt2 --devices 8 --strategy fsdp_grad_op --precision fp32 --attention eager"
    assert main([*argv.split(), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_bytes"] == gathered.peak.total


@pytest.mark.parametrize(
    "keywords, says",
    [
        (
            {"precision": "mixed_adam"},
            "fit places FSDP2 steps in fp32_adam, fsdp2_bf16 (fit's fp32, fsdp2_bf16), got "
            "precision mixed_adam",
        ),
        (
            {"strategy": "zero1"},
            "fit places zero3 or fsdp_grad_op (FSDP2's fully_shard on every block), got zero1",
        ),
        (
            {"recompute": "selectiv"},
            "unknown recompute choice 'selectiv'; accepted: none, selective, megatron-selective, "
            "torchtitan-op, full, or layer:K (K from 1 to 10,000); did you mean 'selective'?",
        ),
        ({"devices": 0}, "devices must be a whole number >= 1, got 0"),
        (
            {"attention": "sdp"},
            "unknown attention 'sdp'; accepted: eager, flash (aliases: sdpa = "
            "flash); did you mean 'sdpa'?",
        ),
    ],
)
def test_bad_input_to_fit_is_refused_at_the_door_before_a_profile_is_sought(keywords, says):
    sought: list = []  # (the cases a profile was looked for: none, the door refuses first)
    with pytest.raises(PlacementError) as refused:
        fit_peak("gpt2", profile=sought.append, **keywords)
    assert str(refused.value) == says and sought == []


def test_a_setting_fit_cannot_place_is_refused_in_one_line() -> None:
    cases = [
        (
            resolve("zero3", devices=8),
            "fit places a real model: give resolve(..., architecture='gpt2'), or a name as model",
        ),
        (
            resolve("zero3", mesh="data=2,tensor=2", precision="fp32", architecture="gpt2"),
            "fit places a step on one data axis (devices = N), got mesh data=2,tensor=2; a tensor, "
            "pipeline or context axis is placed by peak_axes.derive_on_mesh",
        ),
    ]
    for setting, says in cases:
        with pytest.raises(PlacementError) as refused:
            fit_peak(setting)
        assert str(refused.value) == says
