"""Issue 43 item 7: past ~10^4 steps the toy's rounding floor reached 0.19, and "deviation 0.35
... equivalent" read as a bug. The report now says from which step the comparison stopped
discriminating (``verdict.stops_discriminating``). Results built by hand: no rank starts."""

from __future__ import annotations

import re

import pytest

from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.result import RunResult, predict
from placement_edu.runtime.verdict import (
    DISCRIMINATING_TOLERANCE,
    ROUNDING_MULTIPLE,
    stops_discriminating,
    tolerances,
)

pytestmark = pytest.mark.fast


def drift(steps: int, end: float) -> list[float]:
    """A floor growing geometrically from the last bit (1e-16) to ``end`` at the last step."""
    return [1e-16 * (end / 1e-16) ** (k / (steps - 1)) for k in range(steps)]


def test_the_comparison_stops_discriminating_where_the_tolerance_passes_a_faults_deviation():
    floor = drift(10_000, 0.19)  # the run: 0.19 after 10^4 steps
    tolerance = tolerances(1e-10, floor, len(floor))
    k = stops_discriminating(tolerance)
    assert k is not None and tolerance[k] > DISCRIMINATING_TOLERANCE >= tolerance[k - 1]
    # 1e-10 + 16 x floor passes 1e-3 once the floor passes ~6.25e-5: at step 7,721 of 10,000
    assert floor[k] > (DISCRIMINATING_TOLERANCE - 1e-10) / ROUNDING_MULTIPLE >= floor[k - 1]
    assert k == 7720
    # dp at 9,000 steps (floor 6.3e-10, tolerance 1.0e-8) still discriminates; so does float32
    assert stops_discriminating(tolerances(1e-10, drift(9000, 6.3e-10), 9000)) is None
    assert stops_discriminating(tolerances(1e-4, drift(100, 1e-8), 100)) is None


def test_a_long_equivalent_run_says_from_which_step_it_stopped_discriminating():
    config = RunConfig("dp", 2, steps=10_000)
    floor = drift(10_000, 0.19)
    result = RunResult(config, [1.8 * f for f in floor], predict(config), predict(config), [], {})
    result.floor = floor
    assert result.equivalent and result.stopped_discriminating == 7720
    line = " ".join(re.split(r"\n(?! )", str(result))[1].split())
    assert (
        "-> equivalent to one process -- up to step 7,720 only: from step 7,721 the tolerance"
        in (line)
    )
    assert "passes 0.001, the smallest deviation a fault makes" in line
    assert "the comparison has stopped discriminating; run fewer steps" in line
    assert result.to_dict()["stopped_discriminating_at_step"] == 7721
    short = RunResult(
        config, [0.0] * 3, predict(config), predict(config), [], {}, floor=[1e-16] * 3
    )
    assert short.stopped_discriminating is None and "stopped" not in str(short)
    assert short.to_dict()["stopped_discriminating_at_step"] is None
