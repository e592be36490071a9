"""The ZeRO explorer: moving a slider moves the bars, and every bar is the core's number."""

from __future__ import annotations

import pytest

from placement_edu import State, analyze
from placement_edu.units import GB
from placement_edu.presentation.widgets import ZeroExplorer

pytestmark = pytest.mark.fast


def bar_heights(explorer: ZeroExplorer, state: State) -> list[float]:
    return [bar.get_height() for bar in explorer.charts.state_bars[state]]


def test_moving_the_device_slider_moves_the_bars_to_the_core_numbers() -> None:
    explorer = ZeroExplorer(psi=7.5e9, devices=64)
    assert bar_heights(explorer, State.OPTIMIZER) == pytest.approx(
        [90, 1.40625, 1.40625, 1.40625]
    )  # GB
    explorer.devices.value = 8
    expected = [
        float(analyze(s, 7.5e9, 8).memory.device[State.OPTIMIZER]) / GB
        for s in ("dp", "zero1", "zero2", "zero3")
    ]
    assert bar_heights(explorer, State.OPTIMIZER) == pytest.approx(expected)
    assert expected == [90, 11.25, 11.25, 11.25]  # 12 B x 7.5e9 / 8
    assert "15 GB (13.970 GiB)" in explorer.readout.value  # zero3 model state at N = 8: 120/8 GB
    assert [label.get_text() for label in explorer.charts.memory_labels] == [
        "120 GB",
        "41.25 GB",
        "28.12 GB",
        "15 GB",
    ]
    assert bytes(explorer.image.value[:4]) == b"\x89PNG"  # what the notebook shows was re-rendered


def test_precision_choice_changes_the_table() -> None:
    explorer = ZeroExplorer(psi=1e9, devices=1)
    explorer.precision.value = "mixed_adam_fp32_grads"
    assert "18 GB (16.764 GiB)" in explorer.readout.value  # Megatron's 18 B per parameter
    assert explorer.charts.silence.get_visible()  # one device: no communication to draw


def test_check_explorer_names_the_broken_condition_and_refuses_what_does_not_apply() -> None:
    from placement_edu.presentation.widgets import CheckExplorer

    explorer = CheckExplorer(strategy="zero2", fault="skip-param-sync")
    assert "state consistency: BROKEN." in explorer.readout.value
    # and, from the next step on, the other condition (SPEC §5)
    assert "gradient integrity: BROKEN as a consequence." in explorer.readout.value
    explorer.strategy.value = "dp"  # skip-param-sync needs an owner-only update: dp has none
    assert explorer.update().startswith("refused: fault 'skip-param-sync' does not apply to dp")


def test_smaller_gather_units_shrink_only_the_transient_peak() -> None:
    explorer = ZeroExplorer(psi=1e9, devices=8)
    assert (
        explorer.units.value == 32 and explorer.units.label == "32 = one per layer"
    )  # the default
    explorer.units.value = 1
    assert explorer.units.label == "1 = whole model (worst case)"
    whole = [bar.get_height() for bar in explorer.charts.transient_bars]
    explorer.units.value = 4
    quarter = [bar.get_height() for bar in explorer.charts.transient_bars]
    # zero3: window 2 GB + bucket 2 GB for one unit of the whole model; in quarters, two live
    # (the one computing and the next, prefetched) 2 × 0.5 GB + a 0.5 GB bucket.
    assert (whole[3], quarter[3]) == pytest.approx((4.0, 1.5))
    assert [b.get_height() for b in explorer.charts.state_bars[State.PARAMS]] == pytest.approx(
        [2, 2, 2, 0.25]
    )


# --- time (SPEC §9): the explorer and the plan table call the core --------------------------------
def test_time_explorer_bars_are_the_cores_step_times_and_move_with_the_bandwidth() -> None:
    from placement_edu import Mesh, ModelSpec
    from placement_edu.presentation.time_explorer import TimeExplorer
    from placement_edu.timing import compute_bound_tokens, step_time

    explorer = TimeExplorer(bandwidth_gbs=50, tflops=400, tokens=4096, overlap="none")
    hw = explorer.hardware()
    expected = step_time(
        "zero3", ModelSpec(explorer.psi), Mesh.of(data=64), "mixed_adam", hw, 4096, "none"
    )
    z3 = explorer.names.index("zero3")
    assert explorer.compute_bars[z3].get_height() == pytest.approx(expected.compute_s)
    assert explorer.exposed_bars[z3].get_height() == pytest.approx(expected.exposed_comm_s)
    before = [bar.get_height() for bar in explorer.exposed_bars]
    explorer.bandwidth.value = 500  # 10x the bandwidth: a tenth of the bytes' time
    after = [bar.get_height() for bar in explorer.exposed_bars]
    moved = step_time(
        "zero3",
        ModelSpec(explorer.psi),
        Mesh.of(data=64),
        "mixed_adam",
        explorer.hardware(),
        4096,
        "none",
    )
    assert after[z3] == pytest.approx(moved.exposed_comm_s)
    alpha = 3 * 63 * 5e-6  # 3 ring collectives of 63 steps, 5 µs each
    assert after[z3] - alpha == pytest.approx((before[z3] - alpha) / 10)  # the bytes' time, a tenth
    assert explorer.thresholds["zero3"] == pytest.approx(
        compute_bound_tokens(
            "zero3",
            ModelSpec(explorer.psi),
            Mesh.of(data=64),
            "mixed_adam",
            explorer.hardware(),
            "none",
        )
    )
    assert bytes(explorer.image.value[:4]) == b"\x89PNG"


def test_time_explorer_per_pass_hides_dp_communication_above_its_threshold() -> None:
    from placement_edu.presentation.time_explorer import TimeExplorer

    explorer = TimeExplorer(bandwidth_gbs=50, tflops=400, tokens=512, overlap="per_pass")
    assert explorer.times["dp"].exposed_comm_s > 0  # 512 < F/W = 8000 tokens
    explorer.tokens.value = 16384
    assert explorer.times["dp"].exposed_comm_s == 0.0 and explorer.thresholds["dp"] < 16384
    # the same Ψ and tokens; the transformer adds attention's 12·L·h·s = 12·32·4096·512 per token
    psi = explorer.tp_model.psi
    assert explorer.times["tp"].compute_s == pytest.approx(
        explorer.times["dp"].compute_s * (6 * psi + 805_306_368) / (6 * psi), rel=1e-9
    )
    assert "width h ≥" in explorer.readout.value


def test_plan_table_lists_the_planners_ranking_and_follows_the_device_slider() -> None:
    from placement_edu.planner import default_transformer, plan
    from placement_edu.presentation.time_explorer import PlanTable

    table = PlanTable(psi=7e9, devices=8, memory_gb=80)
    first = table.update().ranked[0]
    assert f"<td>{first.strategy.name}</td><td>{first.mesh}</td>" in table.readout.value
    table.devices.value = 64
    model, _ = default_transformer(7 * 10**9)
    expected = plan(model, 64, 80 * 10**9, "h100-nvlink-ib").ranked[0]
    assert f"<td>{expected.strategy.name}</td><td>{expected.mesh}</td>" in table.readout.value
    assert f"{expected.time.total_s:.4g}" in table.readout.value


def test_every_explorer_is_the_one_skeleton_and_keeps_only_what_it_shows() -> None:
    # controls -> observe -> redraw -> display live in presentation.explorer, once; an explorer
    # defines update (what it shows) and no display or observe of its own. RuntimeExplorer runs on
    # a click, not on a control's move, and is the one widget outside the skeleton.
    import importlib
    import inspect
    import pkgutil

    import placement_edu.presentation as presentation
    from placement_edu.presentation.explorer import Explorer

    widgets = {
        cls
        for info in pkgutil.iter_modules(presentation.__path__)
        for _, cls in inspect.getmembers(
            importlib.import_module(f"placement_edu.presentation.{info.name}"), inspect.isclass
        )
        if cls.__module__.startswith("placement_edu.presentation")
        and hasattr(cls, "_ipython_display_")
        and cls.__name__ != "RuntimeExplorer"
    }
    names = {cls.__name__ for cls in widgets}
    assert {"Explorer", "ZeroExplorer", "FitExplorer", "PlanTable", "LiveSetExplorer"} <= names
    for cls in widgets - {Explorer}:
        assert issubclass(cls, Explorer) and "update" in vars(cls), cls.__name__
        assert not {"_ipython_display_", "assemble"} & set(vars(cls)), cls.__name__
