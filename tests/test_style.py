"""One visual language: the device grid draws the core's bytes per rank, one colour per state."""

from __future__ import annotations

from placement_edu.presentation import style
from placement_edu.placement import State

import pytest

pytestmark = pytest.mark.fast


def test_one_colour_per_state_and_per_collective_shared_by_the_charts():
    from placement_edu.presentation import plots

    assert len(set(style.STATE_COLORS.values())) == 4
    assert plots.STATE_COLORS is style.STATE_COLORS
    assert all(plots.OP_COLORS[op] == style.OP_COLORS[op] for op in plots.OP_COLORS)


def test_the_device_grid_writes_the_core_s_bytes_and_draws_disjoint_slices(tmp_path):
    figure = style.device_grid("zero3", 1e9, 4)
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert texts.count("0.5 GB (0.466 GiB)") == 8  # params and grads: 2 B × 1e9 / 4, per rank
    assert texts.count("3 GB (2.794 GiB)") == 4  # optimizer: 12 B × 1e9 / 4
    filled = [
        p
        for p in figure.axes[0].patches
        if p.get_facecolor()[:3] != (0, 0, 0)
        and p.get_fill()
        and p.get_edgecolor()[:3]
        == tuple(int(style.STATE_COLORS[State.PARAMS][i : i + 2], 16) / 255 for i in (1, 3, 5))
    ]
    starts = sorted(round(p.get_x() % 1, 3) for p in filled if p.get_width() < 0.5)
    assert len(set(starts)) == 4  # each rank's slice at its own place
    offload = [t.get_text() for t in style.device_grid("zero3_offload", 1e9, 4).axes[0].texts]
    assert "host 0.5 GB (0.466 GiB)" in offload
    path = style.save(figure, str(tmp_path / "grid.png"), dpi=50)
    assert open(path, "rb").read(4) == b"\x89PNG"


def test_figures_are_drawn_at_twice_the_pixels_they_are_shown_at():
    """Issue 25, item 6: sharp on a high-density screen. The device grid of 8 ranks is 14 inches
    wide at 80 dots per inch of the screen: 1,120 CSS pixels, drawn with 2,240."""
    from placement_edu.presentation.live import png_html, sharp_image, shown_width

    figure = style.device_grid("zero3", 1e9, 8)
    png = style.png(figure)
    assert figure.get_figwidth() * 80 == shown_width(png) == 1120
    assert int.from_bytes(png[16:20], "big") == 2 * 1120
    assert 'width="1120"' in png_html(png, "grid")
    image = sharp_image()
    image.value = png
    assert image.width == "1120"
    image.value = b""  # (the runtime widget's chart before a run)
    assert image.width == ""


def _whole_and_apart(figure) -> tuple[bool, list[tuple[str, str]]]:
    """(everything drawn lies inside the figure, the pairs of labels in one axes that overlap)."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    drawn = figure.get_tightbbox(renderer)  # inches
    inside = drawn.x0 >= -0.01 and drawn.y0 >= -0.01
    inside &= drawn.x1 <= figure.get_figwidth() + 0.01 and drawn.y1 <= figure.get_figheight() + 0.01
    overlapping = []
    for ax in figure.axes:
        texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
        boxes = [t.get_window_extent(renderer) for t in texts]
        overlapping += [
            (texts[i].get_text(), texts[j].get_text())
            for i in range(len(boxes))
            for j in range(i + 1, len(boxes))
            if boxes[i].overlaps(boxes[j])
        ]
    return inside, overlapping


def test_every_chart_is_whole_with_labels_apart_at_n_64_and_p_8():
    """Issue 25, item 6: legible at N = 64 and p = 8 -- no caption or label outside the figure,
    no two labels of one chart on top of each other."""
    from placement_edu.models import ModelSpec
    from placement_edu.presentation.mesh_explorer import MeshExplorer
    from placement_edu.presentation.pipeline_explorer import PipelineExplorer
    from placement_edu.presentation.time_explorer import TimeExplorer
    from placement_edu.presentation.widgets import ZeroExplorer

    model = ModelSpec(7_500_000_000, layers=64, gather_units=64, boundary_elements=4096 * 4096)
    figures = {
        "grid zero3, N = 64": style.device_grid("zero3", model, 64),
        "grid zero3_offload, N = 64": style.device_grid("zero3_offload", model, 64),
        "grid tp, t = 8": style.device_grid("tp", model, "tensor=8"),
        "grid pp, p = 8": style.device_grid("pp", model, "pipeline=8"),
        "costs, N = 64": ZeroExplorer(devices=64).charts.figure,
        "pipeline, p = 8, m = 16": PipelineExplorer(stages=8, micro_batches=16).figure,
        "pipeline, p = 8, m = 32": PipelineExplorer(stages=8, micro_batches=32).figure,
        "mesh 8 x 8 x 8": MeshExplorer(data=8, tensor=8, pipeline=8, micro_batches=16).figure,
        "time, N = 64": TimeExplorer(devices=64, tensor=8).figure,
    }
    for name, figure in figures.items():
        assert _whole_and_apart(figure) == (True, []), name
