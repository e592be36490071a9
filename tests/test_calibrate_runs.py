"""Time, measured on real ranks (SPEC §9): a run reports its per-step wall time split into compute
and communication beside a prediction, and ``placement-edu calibrate`` on two ranks prints a fit.
How fast or how noisy this machine is: printed by benchmarks/bench_time.py, never asserted here."""

from __future__ import annotations

import json
import math

import pytest

from placement_edu.cli import main
from placement_edu.runtime import RunConfig, run_many
from placement_edu.timing import HARDWARE
from placement_edu.timing.fit import CALIBRATED_OPS

pytestmark = pytest.mark.runtime


# --- runs: per-step wall time, compute and communication ---------------------------------------
@pytest.fixture(scope="module")
def timed_runs():
    return run_many(
        [
            RunConfig("dp", 2, steps=3),
            RunConfig("zero3", 2, steps=3),
            RunConfig("zero3", 2, steps=3, fault="stale-gather"),
        ],
        timeout_s=30,
        progress=False,
    )


def test_a_run_reports_each_step_split_into_compute_and_communication(timed_runs):
    for r in timed_runs:
        d = json.loads(json.dumps(r.to_dict()))
        assert len(d["timing"]) == 2 and all(len(rank) == 3 for rank in d["timing"])
        for rank in d["timing"]:
            for step in rank:
                assert 0 < step["comm_s"] <= step["step_s"]
                assert step["compute_s"] == step["step_s"] - step["comm_s"]
        # Timing is measured beside the ledger, never in it: measured = predicted still holds.
        assert r.ledger_matches() and r.memory_matches()


def test_a_run_prints_its_measured_step_beside_the_prediction_on_this_machine(timed_runs):
    assert "this_machine" in HARDWARE
    for r in timed_runs:
        t = r.to_dict()["time"]
        assert t["steps_counted"] == [1, 2]  # the first step opens connections
        assert math.isclose(t["measured_compute_s"] + t["measured_comm_s"], t["measured_step_s"])
        assert (
            t["predicted_step_s"] > 0 and t["ratio"] == t["measured_step_s"] / t["predicted_step_s"]
        )
        assert "measured/predicted" in str(r)
    dp, zero3 = (r.to_dict()["time"] for r in timed_runs[:2])
    # The model prices zero3's 3Ψ above dp's 2Ψ on the same link (not a measured claim: a model's).
    assert zero3["predicted_comm_s"] > dp["predicted_comm_s"]


# --- the command ------------------------------------------------------------------------------
def test_calibrate_on_two_ranks_over_a_few_sizes_prints_a_fit(capsys):
    assert (
        main(
            [
                "calibrate",
                "--world-sizes",
                "2",
                "--min-size",
                "10",
                "--max-size",
                "13",
                "--repeats",
                "3",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["world_sizes"] == [2] and len(d["samples"]) == len(CALIBRATED_OPS) * 4
    assert d["fit"]["pooled"]["alpha_s"] >= 0 and d["fit"]["pooled"]["points"] == 16
    assert all(len(s["seconds"]) == 3 for s in d["samples"])
    assert {c["what"].split(" (")[0] for c in d["compute"]} >= {"float64 matmul 256x256"}
