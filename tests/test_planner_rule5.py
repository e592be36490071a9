"""Issue 40 item 4: the planner counts rule 5's ×m, tries unsharded accumulation (``no_sync``) and
interleaved 1F1B, and says where the data axis and the pipeline share a NIC.

Every expected value is computed by hand in the comment beside it, from the ring factors of SPEC
§4: a reduce-scatter or an all-gather over N ranks sends (N - 1)/N of its payload, an all-reduce
2(N - 1)/N. The toy is Ψ = 3,448,320 parameters (L = 4, h = 256, a = 8, s = 128, V = 1000) under
mixed_adam: 2 B a gradient and a parameter on the wire, so G = 2Ψ = 6,896,640 B.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from placement_edu.errors import PlacementError
from placement_edu.memory import derive_memory
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.placement import State
from placement_edu.planner import default_transformer, plan
from placement_edu.precision import get_precision
from placement_edu.pricing import compose, configured_strategy, data_traffic, price
from placement_edu.timing import HARDWARE
from tests.golden.cases import cli

pytestmark = pytest.mark.fast

TOY = TransformerSpec(layers=4, hidden=256, heads=8, seq=128, vocab=1000)
MIXED = get_precision("mixed_adam")
H100 = HARDWARE["h100-nvlink-ib"]
G = 2 * 3_448_320  # bytes of the toy's gradient (and of its bf16 parameters)
SEVEN_EIGHTHS = Fraction(7, 8)  # a reduce-scatter's or an all-gather's ring factor at N = 8


def traffic(data: str, m: int, no_sync: bool = False, mesh: Mesh = Mesh.of(data=8)):
    strategy = compose(data, mesh, m, False, "ring", no_sync)
    return strategy, data_traffic(strategy, TOY, mesh, MIXED, H100)


def test_the_toy_is_the_psi_the_comments_count():
    assert TOY.psi == 3_448_320


@pytest.mark.parametrize(
    "data, m, no_sync, reductions, gathers, halves",
    [
        # dp: one all-reduce a step, 2 × 7/8 G, at any m: the yardstick, 1×
        ("dp", 4, False, 1, 0, 2),
        # zero1: G is whole, accumulated locally: one reduce-scatter and one all-gather, 2 × 7/8 G
        ("zero1", 4, False, 1, 1, 2),
        # zero2 at m = 128: 128 reduce-scatters (rule 5) + 1 all-gather = 129 × 7/8 G: 64.5× dp's
        ("zero2", 128, False, 128, 1, 129),
        # zero3 at m = 4: 4 reduce-scatters + 2 gathers a micro-batch (forward, backward) = 12
        ("zero3", 4, False, 4, 4, 12),
        # zero3+no_sync at m = 4: the gradient accumulated unsharded, 1 reduce-scatter + 8 = 9
        ("zero3", 4, True, 1, 4, 9),
        # fsdp_grad_op at m = 4: 4 reduce-scatters + its one gather a step = 5
        ("fsdp_grad_op", 4, False, 4, 1, 5),
        # fsdp_grad_op+no_sync: 1 + 1 = 2, dp's bytes
        ("fsdp_grad_op", 4, True, 1, 1, 2),
    ],
)
def test_rule_5_counts_reductions_gathers_and_bytes_as_computed_by_hand(
    data, m, no_sync, reductions, gathers, halves
):
    _, t = traffic(data, m, no_sync)
    assert (t.reductions, t.gathers) == (reductions, gathers)
    assert t.bytes == halves * SEVEN_EIGHTHS * G
    assert t.dp_bytes == 2 * SEVEN_EIGHTHS * G  # 12,069,120 B
    assert t.times_dp == Fraction(halves, 2)


def test_no_sync_holds_the_whole_gradient_that_zero3_shards():
    # the +|G| of rule 5's other choice: zero3 holds G/8 = 862,080 B of gradient, no_sync all G
    for no_sync, grads in ((False, G // 8), (True, G)):
        strategy, _ = traffic("zero3", 4, no_sync)
        assert derive_memory(strategy, TOY, Mesh.of(data=8), MIXED).device[State.GRADS] == grads


def test_the_words_say_the_count_and_the_multiple_of_dp():
    _, t = traffic("zero2", 128)
    assert t.words() == "grads reduced ×128, params gathered ×1 a step: 64.5× dp's data-axis bytes"
    assert t.to_dict()["times_dp"] == 64.5


def test_interleaving_halves_the_bubble_and_triples_rank_0s_sends():
    # p = 2, m = 8, v = 2: the bubble (p - 1)/(v·m) of the ideal time is half of 1F1B's (p - 1)/m.
    # Rank 0 sends its boundary activation b·s·h·2 = 65,536 B once a micro-batch under 1F1B (8 ×
    # 65,536 = 524,288 B); interleaved it holds chunks 0 and 2 of 4: two forward sends and one
    # backward send a micro-batch, 3 × 524,288 = 1,572,864 B.
    mesh = Mesh.of(data=2, pipeline=2)
    plain = compose("zero1", mesh, 8)
    looped = plain.with_(pipeline_schedule="interleaved", virtual_stages=2)
    one, two = (price(s, TOY, mesh, "none", H100, MIXED, "per_pass") for s in (plain, looped))
    assert one.time and two.time and one.data_axis and two.data_axis
    assert two.time.bubble_s == pytest.approx(one.time.bubble_s / 2, rel=1e-12)
    assert (one.data_axis.pipeline_bytes, two.data_axis.pipeline_bytes) == (524_288, 1_572_864)
    assert two.peak_bytes > one.peak_bytes  # p + (p - 1)/v micro-batches in flight, not p
    assert two.label().endswith("m = 8, interleaved:2")


def test_time_accepts_the_no_sync_name_plan_prints_and_refuses_it_where_it_means_nothing():
    mesh = Mesh.of(data=8)
    strategy = configured_strategy("zero3+no_sync", mesh, 4, False, "1f1b")
    assert strategy == compose("zero3", mesh, 4, False, "ring", True)
    assert strategy.name == "zero3+no_sync"
    with pytest.raises(PlacementError, match="zero2's is zero1"):
        configured_strategy("zero1+no_sync", mesh, 4, False, "1f1b")


@pytest.fixture(scope="module")
def seventy_b() -> dict:
    text = cli("plan", "--params", "70e9", "--devices", "64", "--memory-gb", "80", "--json")
    return json.loads(text.split("\n", 1)[1])


def test_the_plan_shows_rule_5_on_each_line_and_in_json(seventy_b):
    # The issue's #1, zero2×tp+sp×pp on data=8,tensor=2,pipeline=4 at m = 1024/8 = 128:
    # 128 reduce-scatters and one all-gather of the same bytes against dp's all-reduce: 129/2
    top = seventy_b["ranked"][0]
    assert top["strategy"] == "zero2×tp+sp×pp" and top["micro_batches"] == 128
    axis = top["data_axis"]
    assert (axis["grad_reductions_per_step"], axis["param_gathers_per_step"]) == (128, 1)
    assert Fraction(axis["bytes_per_step"]) / Fraction(axis["dp_bytes_per_step"]) == Fraction(
        129, 2
    )
    assert all("data_axis" in row for row in seventy_b["ranked"])
    text = cli("plan", "--params", "70e9", "--devices", "64", "--memory-gb", "80", "--top", "1")
    assert "grads reduced ×128, params gathered ×1 a step: 64.5× dp's data-axis bytes" in text


def test_the_data_axis_and_the_pipeline_share_a_nic_where_both_cross_nodes(seventy_b):
    # #1 on data=8,tensor=2,pipeline=4 (mesh.LAYOUT: tensor innermost, then data, then pipeline):
    # a data group of 8 at stride 2 spans 16 ranks, two nodes of 8; a pipeline group at stride 16
    # spans four. Both leave through rank 0's one NIC: 129 × 7/8 of its gradient's bytes and the
    # pipeline's sends, the JSON's bytes_per_step + pipeline_bytes_per_step.
    top = seventy_b["ranked"][0]["data_axis"]
    assert top["shared_nic"]
    assert top["nic_bytes_per_step"] == top["bytes_per_step"] + top["pipeline_bytes_per_step"]
    # zero3×tp×pp on data=4,tensor=2,pipeline=8: a data group of 4 at stride 2 spans 8 ranks,
    # one node: only the pipeline's sends leave through the NIC
    inside = next(
        r
        for r in seventy_b["ranked"]
        if r["strategy"] == "zero3×tp×pp" and r["mesh"] == {"data": 4, "tensor": 2, "pipeline": 8}
    )["data_axis"]
    assert not inside["shared_nic"]
    assert inside["nic_bytes_per_step"] == inside["pipeline_bytes_per_step"]


def test_the_candidates_include_no_sync_and_interleaved_rows_beside_their_plain_ones(seventy_b):
    rows = {
        (r["strategy"], json.dumps(r["mesh"]), r["recompute"], r.get("pipeline_schedule")): r
        for r in seventy_b["ranked"]
    }
    no_sync = [k for k in rows if "+no_sync" in k[0]]
    looped = [k for k in rows if k[3] == "interleaved:2"]
    assert no_sync and looped
    for key in looped:  # the bubble halves against the same plan under 1F1B
        plain = rows[(key[0], key[1], key[2], None)]
        assert rows[key]["bubble_s"] == pytest.approx(plain["bubble_s"] / 2, rel=1e-12)
    for key in no_sync:  # one reduction a step, never fewer bytes held than the sharded plan
        plain = rows.get((key[0].replace("+no_sync", ""), key[1], key[2], key[3]))
        assert rows[key]["data_axis"]["grad_reductions_per_step"] == 1
        assert plain is None or rows[key]["peak_bytes"] > plain["peak_bytes"]
    assert any("variants (no_sync, interleaved:2) not priced" in s for s in seventy_b["skipped"])


def test_a_variant_is_priced_only_where_its_plain_candidate_fits():
    # 70B on 8 devices at 80 GB: nothing fits, so no variant is priced, and the plan says so
    model, _ = default_transformer(70 * 10**9)
    result = plan(model, 8, 80 * 10**9)
    assert not result.ranked
    every = result.infeasible
    assert not any("+no_sync" in c.strategy.name or c.strategy.virtual_stages > 1 for c in every)
