"""The mixture-of-experts explorer (notebook 14): moving a control moves the figures, and every
figure is the core's, checked against hand calculations from Mixtral 8x7B's config.json (h = 4096,
f = 14336, 32 layers, E = 8, top-2; 46,702,792,704 parameters, 1,605,636,096 of them dense)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from placement_edu.presentation import ExpertExplorer

pytestmark = pytest.mark.fast


def test_mixtral_on_four_expert_ranks_by_hand() -> None:
    explorer = ExpertExplorer(experts=8, expert_degree=4, top_k=2, capacity_factor=1, skew=2)
    f = explorer.figures
    assert f["experts per rank"] == 2
    assert f["expert parameters per rank"] == 45_097_156_608 // 4  # L·E·3hf / e
    assert f["model state per rank"] == 16 * (1_605_636_096 + 45_097_156_608 // 4)
    assert f["capacity C"] == 1024  # ⌈2 · 1 · 4096 / 8⌉
    assert f["all-to-all bytes"] == 8 * 1024 * 4096 * 2  # E·C·h, 2-byte activations
    assert f["sent per all-to-all"] == 50_331_648  # 3/4 of it leaves the rank
    assert f["all-to-alls per step"] == 4 * 32  # dispatch, combine; forward, backward; 32 layers
    # skew 2: the busiest rank wants half of 4·4096·2 routed copies; it keeps E·C = 8,192
    assert (f["busiest tokens"], f["balanced tokens"]) == (16_384, 8_192)
    assert (f["kept tokens"], f["dropped tokens"]) == (8_192, 8_192)
    assert "8192 routed tokens dropped" in explorer.readout.value


def test_moving_a_control_moves_the_figures_and_the_figure() -> None:
    explorer = ExpertExplorer()
    before = explorer.image.value
    explorer.experts.value, explorer.top_k.value, explorer.degree.value = 64, 4, 8
    f = explorer.figures
    assert f["capacity C"] == 256  # ⌈4 · 4096 / 64⌉
    assert f["all-to-all bytes"] == 64 * 256 * 4096 * 2
    assert f["sent per all-to-all"] == 64 * 256 * 4096 * 2 * 7 // 8
    assert explorer.image.value != before
    explorer.capacity.value = Fraction(2)
    assert explorer.figures["capacity C"] == 512  # twice the slots, twice the bytes
    explorer.degree.value = 1  # no expert axis: plain dp, every expert on every rank
    assert explorer.figures["all-to-alls per step"] == 0
    assert explorer.figures["sent per all-to-all"] == 0
