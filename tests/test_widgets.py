"""The ZeRO explorer: moving a slider moves the bars, and every bar is the core's number."""

from __future__ import annotations

import pytest

from placement_edu import GB, State, analyze
from placement_edu.presentation.widgets import ZeroExplorer


def bar_heights(explorer: ZeroExplorer, state: State) -> list[float]:
    return [bar.get_height() for bar in explorer.charts.state_bars[state]]


def test_moving_the_device_slider_moves_the_bars_to_the_core_numbers() -> None:
    explorer = ZeroExplorer(psi=7.5e9, devices=64)
    assert bar_heights(explorer, State.OPTIMIZER) == pytest.approx([90, 1.40625, 1.40625, 1.40625])  # GB
    explorer.devices.value = 8
    expected = [float(analyze(s, 7.5e9, 8).memory.device[State.OPTIMIZER]) / GB
                for s in ("dp", "zero1", "zero2", "zero3")]
    assert bar_heights(explorer, State.OPTIMIZER) == pytest.approx(expected)
    assert expected == [90, 11.25, 11.25, 11.25]  # 12 B x 7.5e9 / 8
    assert "15 GB (13.970 GiB)" in explorer.table.value  # zero3 model state at N = 8: 120/8 GB
    assert [label.get_text() for label in explorer.charts.memory_labels] == ["120 GB", "41.25 GB", "28.12 GB", "15 GB"]
    assert bytes(explorer.image.value[:4]) == b"\x89PNG"  # what the notebook shows was re-rendered


def test_precision_choice_changes_the_table() -> None:
    explorer = ZeroExplorer(psi=1e9, devices=1)
    explorer.precision.value = "mixed_adam_fp32_grads"
    assert "18 GB (16.764 GiB)" in explorer.table.value  # Megatron's 18 B per parameter
    assert explorer.charts.silence.get_visible()  # one device: no communication to draw


def test_check_explorer_names_the_broken_condition_and_refuses_what_does_not_apply() -> None:
    from placement_edu.presentation.widgets import CheckExplorer

    explorer = CheckExplorer(strategy="zero2", fault="skip-param-sync")
    assert "state consistency: BROKEN" in explorer.output.value
    assert "gradient integrity: holds" in explorer.output.value
    explorer.strategy.value = "dp"  # skip-param-sync needs an owner-only update: dp has none
    assert explorer.update().startswith("refused: fault 'skip-param-sync' does not apply to dp")


def test_smaller_gather_units_shrink_only_the_transient_peak() -> None:
    explorer = ZeroExplorer(psi=1e9, devices=8)
    assert explorer.units.value == 32 and explorer.units.label == "32 = one per layer"  # the default
    explorer.units.value = 1
    assert explorer.units.label == "1 = whole model (worst case)"
    whole = [bar.get_height() for bar in explorer.charts.transient_bars]
    explorer.units.value = 4
    quarter = [bar.get_height() for bar in explorer.charts.transient_bars]
    # zero3: window 2 GB + bucket 2 GB for one unit of the whole model; 0.5 + 0.5 GB in quarters.
    assert (whole[3], quarter[3]) == pytest.approx((4.0, 1.0))
    assert [b.get_height() for b in explorer.charts.state_bars[State.PARAMS]] == pytest.approx([2, 2, 2, 0.25])
