"""Near-ties (issue 27, item 7): the planner states its tie band, marks the plans inside it as
ties and chooses the simplest of them -- the shallowest pipeline, then the fewest parallel axes,
then the narrowest tensor axis. The rule is pinned on hand-built candidates whose step times are
chosen to fall just inside and just outside the 2 % band."""

from __future__ import annotations

import json

import pytest

from placement_edu import Mesh, TransformerSpec, get_precision
from placement_edu.cli import main
from placement_edu.configuration import Choice, simplicity
from placement_edu.planner import TIE_BAND, Plan, plan
from placement_edu.pricing import compose
from placement_edu.timing import HARDWARE, StepTime

pytestmark = pytest.mark.fast

MODEL = TransformerSpec(layers=8, hidden=256, heads=8, seq=128, vocab=1000)
GB80 = 80 * 10**9


def candidate(mesh: str, seconds: float) -> Choice:
    """A fitting candidate on ``mesh`` whose step takes ``seconds`` (all of it compute)."""
    m = Mesh.parse(mesh)
    time = StepTime(seconds, 0.0, 0.0, 0.0, seconds, "per_pass")
    return Choice(compose("zero1", m, 4), m, "none", 10**9, GB80, time)


def hand_plan(*choices: Choice, band: float = TIE_BAND) -> Plan:
    ranked = tuple(sorted(choices, key=lambda c: c.time.total_s))  # type: ignore[union-attr]
    hw, precision = HARDWARE["h100-nvlink-ib"], get_precision("mixed_adam")
    return Plan(MODEL, 8, hw, precision, GB80, 32, "per_pass", ranked, (), (), "", band)


def test_the_band_is_two_percent() -> None:
    assert TIE_BAND == 0.02


def test_a_simpler_plan_inside_the_band_is_chosen() -> None:
    # 101.9 s is 1.9 % slower than 100 s: a tie, and data=8 (no pipeline, one axis) is simpler
    # than data=2,tensor=2,pipeline=2 (pipeline 2, three axes)
    p = hand_plan(candidate("data=2,tensor=2,pipeline=2", 100.0), candidate("data=8", 101.9))
    assert p.ties == (0, 1)
    assert p.chosen == 1
    assert "#2 zero1 on data=8" in p.reason() and "1.90% slower than #1" in p.reason()


def test_a_simpler_plan_just_outside_the_band_loses() -> None:
    # 102.1 s is 2.1 % slower: no tie, the fastest stays the choice
    p = hand_plan(candidate("data=2,tensor=2,pipeline=2", 100.0), candidate("data=8", 102.1))
    assert p.ties == (0,)
    assert p.chosen == 0
    assert p.reason().startswith("#1 ") and "the fastest" in p.reason()


def test_the_shallowest_pipeline_comes_before_the_fewest_axes() -> None:
    # three ties: pipeline 2 with three axes; pipeline 4 with two axes; no pipeline, two axes
    deep = candidate("tensor=2,pipeline=4", 100.5)
    p = hand_plan(
        candidate("data=2,tensor=2,pipeline=2", 100.0), deep, candidate("data=4,tensor=2", 101.0)
    )
    assert [simplicity(c) for c in p.ranked] == [(2, 3, 2), (4, 2, 2), (1, 2, 2)]
    assert p.chosen == 2
    # without the pipeline-free plan, pipeline 2 (three axes) beats pipeline 4 (two axes)
    assert hand_plan(candidate("data=2,tensor=2,pipeline=2", 100.0), deep).chosen == 0


def test_equally_simple_ties_keep_the_faster() -> None:
    p = hand_plan(candidate("data=8", 100.0), candidate("data=8", 100.5))
    assert p.ties == (0, 1) and p.chosen == 0


def test_a_band_of_zero_leaves_only_the_fastest() -> None:
    p = hand_plan(
        candidate("data=2,tensor=2,pipeline=2", 100.0), candidate("data=8", 100.1), band=0
    )
    assert p.ties == (0,) and p.chosen == 0


def test_the_json_states_the_band_the_ties_and_the_choice(capsys) -> None:
    argv = ["plan", "--params", "7e9", "--devices", "64", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tie_band"] == 0.02
    ranked = out["ranked"]
    fastest = ranked[0]["step_time_s"]
    for row in ranked:  # inside the band exactly when a tie
        assert row["tie"] == (row["step_time_s"] <= fastest * 1.02)
    (chosen,) = [row for row in ranked if row["chosen"]]
    assert chosen["tie"] and chosen["rank"] == out["chosen"]["rank"]
    assert "shallowest pipeline" in out["chosen"]["rule"]
    depth = [r["mesh"].get("pipeline", 1) for r in ranked if r["tie"]]
    assert chosen["mesh"].get("pipeline", 1) == min(depth)


def test_the_text_marks_ties_and_says_why_the_chosen_one(capsys) -> None:
    assert main(["plan", "--params", "7e9", "--devices", "64", "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "tie, chosen" in text
    assert "Tie band 2%: the plans within it of the fastest are ties. Chosen: #" in text
    assert "Chosen: #" in text


def test_plan_takes_its_band_from_the_command_line(capsys) -> None:
    assert main(["plan", "--params", "7e9", "--devices", "64", "--tie-band", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fastest = out["ranked"][0]["step_time_s"]
    assert out["tie_band"] == 0.0
    assert all(r["step_time_s"] == fastest for r in out["ranked"] if r["tie"])


@pytest.mark.parametrize("value, says", [("2", "out of range"), ("x", "is not a number")])
def test_a_bad_band_is_one_line_and_exit_2(capsys, value: str, says: str) -> None:
    assert main(["plan", "--params", "7e9", "--devices", "8", "--tie-band", value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and "0.02" in err


def test_the_python_api_refuses_a_band_outside_0_to_1() -> None:
    with pytest.raises(ValueError, match="tie_band"):
        plan(MODEL, 8, tie_band=1.5)
