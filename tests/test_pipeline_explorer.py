"""The pipeline explorer: moving p, m or the schedule moves the timeline, the bubble and the
activations in flight, and every number is the core's (SPEC §4: bubble (p-1)/m of ideal time,
(p-1)/(m+p-1) of total; GPipe keeps m micro-batches in flight, 1F1B at most p on stage 0)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from placement_edu import Mesh, derive_memory, get_precision, get_strategy
from placement_edu.schedule import (
    layers_on_stage,
    pipeline_bubble,
    pipeline_order,
    pipeline_timeline,
)
from placement_edu.presentation.pipeline_explorer import MODEL, PipelineExplorer, pipeline_view

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (2, 8), (4, 3), (4, 8), (8, 32)])
def test_the_timeline_idles_exactly_the_bubble_of_total_time(schedule, p, m):
    rows = pipeline_timeline(schedule, p, m)
    length = max(row[-1][3] for row in rows)
    busy = sum(end - start for row in rows for _, _, start, end in row)
    assert 1 - Fraction(busy, p * length) == pipeline_bubble(p, m)["of_total"]
    assert [[(kind, k) for kind, k, _, _ in row] for row in rows] == [
        pipeline_order(schedule, p, s, m) for s in range(p)
    ]  # the core's order, laid out


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (4, 3), (4, 8), (8, 5)])
def test_each_stage_holds_its_in_flight_count_of_one_micro_batchs_activations(schedule, p, m):
    """The count the bars are labelled with (memory.in_flight) is what the derived bytes are made
    of: stage s's activations at its peak = in_flight[s] × one micro-batch's on its layers."""
    view = pipeline_view(p, m, schedule)
    for s in range(p):
        one = MODEL.activation_bytes_per_microbatch(1, Fraction(layers_on_stage(MODEL, p, s)))
        assert view.activations[s] == view.in_flight[s] * one
        assert view.in_flight[s] == (m if schedule == "gpipe" else min(p - s, m))  # SPEC §4


def test_moving_the_controls_moves_the_picture_to_the_core_numbers():
    explorer = PipelineExplorer(stages=4, micro_batches=8, schedule="1f1b")
    view = explorer.view
    assert view.in_flight == [4, 3, 2, 1]  # 1F1B: min(p - stage, m)
    assert view.bubble == {"of_ideal": Fraction(3, 8), "of_total": Fraction(3, 11)}
    assert "3/11" in explorer.readout.value and "3/8" in explorer.readout.value
    first = bytes(explorer.image.value)
    assert first[:4] == b"\x89PNG" and len(explorer.blocks) == 4 * 16  # p stages x (m F + m B)

    explorer.schedule.value = "gpipe"  # GPipe keeps all m in flight
    assert explorer.view.in_flight == [8, 8, 8, 8]
    strategy = get_strategy("pp").with_(micro_batches=8, pipeline_schedule="gpipe")
    core = derive_memory(strategy, MODEL, Mesh.of(pipeline=4), get_precision("mixed_adam"), 0)
    assert explorer.view.activations[0] == core.transient_peak("activations")
    assert [b.get_width() for b in explorer.activation_bars][0] == pytest.approx(
        float(core.transient_peak("activations")) / 1e9
    )

    explorer.micro_batches.value = 32
    assert explorer.view.bubble["of_total"] == Fraction(3, 35)
    assert len(explorer.blocks) == 4 * 64 and bytes(explorer.image.value) != first


@pytest.mark.parametrize("p,m", [(4, 8), (8, 16)])
def test_pass_labels_fit_their_boxes_and_never_overlap_at_p_8(p, m):
    """Issue 25, item 6: at p = 8, m = 16 a forward box is ~6 points wide and "F10" ~11; the old
    rule (label whenever m <= 16) ran the labels into each other."""
    explorer = PipelineExplorer(stages=p, micro_batches=m)
    renderer = explorer.figure.canvas.get_renderer()
    labels = [t for t in explorer.timeline_ax.texts if t.get_text()[:1] in "FB"]
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert labels  # the backward boxes (2 units wide) still say which micro-batch they are
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    bars = [b.get_window_extent(renderer) for b in explorer.blocks]
    assert all(any(bar.x0 <= box.x0 and box.x1 <= bar.x1 for bar in bars) for box in boxes)
