"""The deviation and bubble charts are drawn to be read (issue 40, item 7): axes labelled with
what they measure, a log scale where the values span decades, ticks at whole steps, one colour
per fault in every panel, and every value drawn the core's or the run's."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from placement_edu.presentation.pipeline_explorer import bubble_chart  # noqa: E402
from placement_edu.presentation.runtime_explorer import FAULT_COLORS, deviation_chart  # noqa: E402
from placement_edu.runtime import RunConfig  # noqa: E402
from placement_edu.schedule import pipeline_bubble  # noqa: E402

pytestmark = pytest.mark.fast


def _run(strategy: str, fault: str | None, deviation: list[float]) -> SimpleNamespace:
    """What deviation_chart reads of a RunResult: its config, deviation and tolerances."""
    config = RunConfig(strategy, world_size=4, steps=len(deviation), fault=fault)
    return SimpleNamespace(config=config, deviation=deviation, tolerances=[1e-10])


def test_the_deviation_chart_is_log_scaled_with_whole_steps_and_a_colour_per_fault():
    one = deviation_chart(
        [_run("zero2", None, [0.0, 2e-16, 2e-16]), _run("zero2", "double-scale", [1e-3] * 3)],
        Figure().add_subplot(),
    )
    other = deviation_chart(
        [_run("zero3", "double-scale", [1e-3] * 3), _run("zero3", "stale-gather", [0, 1e-2, 1])],
        Figure().add_subplot(),
    )
    assert one.get_yscale() == "log" and one.get_xlabel() == "optimizer step"
    assert "θ one process" in one.get_ylabel()
    assert [t for t in one.get_xticks() if 1 <= t <= 3] == [1, 2, 3]  # no step 1.5
    correct, fault = one.get_lines()[:2]
    assert correct.get_label() == "correct" and correct.get_color() == "black"
    assert list(correct.get_ydata()) == [1e-18, 2e-16, 2e-16]  # an exact 0 drawn at the floor
    # the same fault, the same colour, in either panel; another fault, another colour
    assert fault.get_color() == other.get_lines()[0].get_color() == FAULT_COLORS["double-scale"]
    assert other.get_lines()[1].get_color() == FAULT_COLORS["stale-gather"] != fault.get_color()
    assert [t.get_text() for t in one.texts] == ["tolerance 1e-10"]


def test_two_strategies_in_one_deviation_chart_are_named_and_marked_apart():
    ax = deviation_chart(
        [_run("dp", None, [1e-16]), _run("zero1", None, [1e-16])], Figure().add_subplot()
    )
    dp, zero1 = ax.get_lines()[:2]
    assert (dp.get_label(), zero1.get_label()) == ("dp: correct", "zero1: correct")
    assert dp.get_marker() != zero1.get_marker()  # coinciding lines stay visible


def test_the_bubble_chart_draws_pipeline_bubble_in_both_conventions_on_log_axes():
    ax = bubble_chart(Figure().add_subplot(), stages=(4, 8), max_micro_batches=64)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "micro-batches" in ax.get_xlabel() and "ideal or total time" in ax.get_ylabel()
    lines = {line.get_label(): line for line in ax.get_lines()}
    ideal = lines["p = 8: (p−1)/m, of ideal time"]
    total = lines["p = 4: (p−1)/(m+p−1), of total time"]
    assert list(ideal.get_xdata()) == list(range(1, 65))
    assert ideal.get_ydata()[0] == 7.0  # (8 − 1)/1: seven ideal times idle, drawn, not clipped
    assert ideal.get_ydata()[63] == float(pipeline_bubble(8, 64)["of_ideal"]) == 7 / 64
    assert total.get_ydata()[63] == float(pipeline_bubble(4, 64)["of_total"]) == 3 / 67
    lowest, highest = min(total.get_ydata()), max(ideal.get_ydata())
    assert highest / lowest > 100  # two decades: why the scale is logarithmic
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert "64" in ticks and "2⁶" not in ticks  # m as a number a learner types
