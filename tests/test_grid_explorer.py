"""The mode explorer: changing a control redraws the device grid, and every byte it shows is the
core's."""

from __future__ import annotations

from fractions import Fraction

import pytest

from placement_edu import State, analyze
from placement_edu.models import ModelSpec
from placement_edu.presentation.grid_explorer import LAYERS, GridExplorer
from placement_edu.strategies import STRATEGIES

pytestmark = pytest.mark.fast


def test_changing_the_strategy_redraws_the_grid_and_the_bytes_are_the_cores() -> None:
    explorer = GridExplorer(strategy="dp", psi=1e9, devices=4)
    # dp: every state whole on every device, 16 B × 1e9 = 16 GB (ZeRO's 16Ψ).
    assert explorer.bytes_per_state()["model_state"] == (16 * 10**9, 0)
    before = bytes(explorer.image.value)
    explorer.strategy.value = "zero3"
    assert bytes(explorer.image.value) != before and bytes(explorer.image.value[:4]) == b"\x89PNG"
    memory = analyze("zero3", ModelSpec(10**9, layers=LAYERS, gather_units=LAYERS), 4).memory
    got = explorer.bytes_per_state()
    assert (
        got["params"] == (memory.device[State.PARAMS], 0) == (Fraction(10**9, 2), 0)
    )  # 2 B × Ψ / 4
    assert got["model_state"][0] == memory.model_state == 4 * 10**9  # 16Ψ / N
    assert got["peak"][0] == memory.peak
    assert "4 GB (3.725 GiB)" in explorer.readout.value and "SG" in explorer.readout.value


def test_psi_devices_and_precision_move_the_numbers() -> None:
    explorer = GridExplorer(strategy="zero2", psi=7.5e9, devices=64)
    # ZeRO Table 1: 2Ψ + 14Ψ/N = 16.640625 GB at Ψ = 7.5e9, N = 64.
    assert explorer.bytes_per_state()["model_state"][0] == Fraction(16_640_625_000)
    assert "16.640625 GB" in explorer.readout.value
    explorer.devices.value = 8
    assert explorer.bytes_per_state()["model_state"][0] == 15 * 10**9 + Fraction(14 * 75 * 10**8, 8)
    explorer.precision.value = "fp32_adam"  # 4/4/8: 4Ψ + 12Ψ/N
    assert explorer.bytes_per_state()["model_state"][0] == 30 * 10**9 + Fraction(12 * 75 * 10**8, 8)
    explorer.psi.value = 1e9
    assert explorer.bytes_per_state()["grads"][0] == Fraction(4 * 10**9, 8)


def test_offload_shows_host_bytes_and_every_strategy_draws() -> None:
    explorer = GridExplorer(strategy="zero3_offload", psi=1e9, devices=4)
    assert explorer.bytes_per_state()["optimizer"] == (0, 3 * 10**9)  # 12 B × Ψ / 4, on the host
    assert "in host memory" in explorer.readout.value
    for name in STRATEGIES:  # tp on tensor, pp on pipeline, the rest on data
        explorer.strategy.value = name
        assert explorer.bytes_per_state()["model_state"][0] >= 0
    explorer.strategy.value = "tp"
    assert "mode on tensor" in explorer.readout.value and "b·s·h" in explorer.readout.value


@pytest.mark.parametrize("strategy", ["dp", "pp"])
def test_the_explorer_shows_a_still_and_the_controls(strategy, monkeypatch) -> None:
    shown = {}
    monkeypatch.setattr(
        "placement_edu.presentation.explorer.show",
        lambda widget, still: shown.update(widget=widget, still=still),
    )
    explorer = GridExplorer(strategy=strategy)
    explorer._ipython_display_()
    assert shown["widget"] is explorer.widget and shown["still"].startswith("<img")


def test_notebook_00_s_explorer_draws_the_model_its_text_derives() -> None:
    """00's text derives Ψ = 1e9 in 32 layers, gathered one at a time (its ``MODEL``), and prints
    zero3's peak on 4 devices from it; its explorer must draw that model, not the explorer's
    default of 64 layers (a smaller gather window: a different peak)."""
    import json
    from pathlib import Path

    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "00_start_here.ipynb"
    code = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]]
    assert any("MODEL = ModelSpec(10**9, layers=32, gather_units=32)" in c for c in code)
    text_model = ModelSpec(10**9, layers=32, gather_units=32)
    [cell] = [c for c in code if "GridExplorer(" in c]
    explorer = eval(cell.split("= ", 1)[1].split("\n")[0], {"GridExplorer": GridExplorer})
    assert explorer.model().layers == explorer.model().gather_units == 32
    peak = explorer.bytes_per_state()["peak"][0]
    assert peak == analyze("zero3", text_model, 4).memory.peak
    assert peak != GridExplorer(strategy="zero3", psi=1e9, devices=4).bytes_per_state()["peak"][0]
    assert "(32 layers)" in explorer.readout.value
