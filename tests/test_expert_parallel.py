"""Expert parallelism (issue 26, item 2): a mixture-of-experts shape, the expert axis carved from
data, its all-to-alls and its two gradient groups, the two faults that break it, and the busiest
rank under a routing skew -- published figures cited beside the expected values, the rest by hand.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from placement_edu import Mesh, Placement, PlacementError, get_precision
from placement_edu.checker import check
from placement_edu.cli import main
from placement_edu.experts import (
    MIXTRAL_8X7B,
    SMALL_MOE,
    MoESpec,
    all_to_all_elements,
    expert_capacity,
    expert_matmul_flops,
    imbalance_text,
    rank_load,
    route_tokens,
)
from placement_edu.memory import derive_memory
from placement_edu.models import ModelSpec
from placement_edu.schedule import derive_schedule, ring_bytes
from placement_edu.strategies import get_strategy

pytestmark = pytest.mark.fast

MIXED = get_precision("mixed_adam")
DP = get_strategy("dp")


def test_mixtral_8x7b_has_46_7b_parameters_12_9b_active() -> None:
    # Jiang et al. 2024, "Mixtral of Experts" (arXiv 2401.04088) and Mistral AI's release: 46.7B
    # total, 12.9B active (two of eight experts per token).
    assert MIXTRAL_8X7B.psi == 46_702_792_704
    assert round(MIXTRAL_8X7B.psi / 1e9, 1) == 46.7
    assert MIXTRAL_8X7B.active_psi == 12_879_925_248
    assert round(MIXTRAL_8X7B.active_psi / 1e9, 1) == 12.9
    # by hand: one SwiGLU expert 3·4096·14336; 32 layers × 8 experts of them
    assert MIXTRAL_8X7B.expert_elements == 32 * 8 * 3 * 4096 * 14336 == 45_097_156_608
    # attention 2·4096² + 2·4096·1024, router 4096·8, two norms 2·4096, per layer; embeddings and
    # the untied head 2·32000·4096; the final norm 4096
    per_layer = 2 * 4096**2 + 2 * 4096 * 1024 + 4096 * 8 + 2 * 4096
    assert MIXTRAL_8X7B.dense_elements == 32 * per_layer + 2 * 32000 * 4096 + 4096


def test_expert_capacity_is_switch_transformers_tokens_over_experts_times_the_factor() -> None:
    # Fedus et al. 2021 (Switch Transformer), eq. 3: capacity = tokens per batch / experts ×
    # capacity factor; top-1, T = 4096, E = 8, cf = 1.25: 640 tokens per expert
    switch = MoESpec(
        layers=1, hidden=64, heads=4, ffn=128, vocab=8, experts=8, top_k=1, seq=4096,
        capacity_factor=Fraction(5, 4),
    )  # fmt: skip
    assert expert_capacity(switch) == 640
    # GShard's top-2: k·T/E × cf; Mixtral at cf = 1: 2·4096/8 = 1024, rounded up when not whole
    assert expert_capacity(MIXTRAL_8X7B) == 1024
    odd = MoESpec(layers=1, hidden=8, heads=2, ffn=8, vocab=8, experts=3, top_k=1, seq=10)
    assert expert_capacity(odd) == 4  # ⌈10/3⌉


def test_each_moe_layer_runs_four_all_to_alls_of_t_k_cf_h_per_micro_batch() -> None:
    # By hand, Mixtral on data=2,expert=4, b = 1, s = 4096: each all-to-all moves the E·C·h
    # buffer, T·k·cf·h = 4096·2·1·4096 bf16 elements = 67,108,864 B, of which (e-1)/e = 3/4 leave
    # the rank: 50,331,648 B; dispatch and combine forward, the two reversed backward.
    mesh = Mesh.parse("data=2,expert=4")
    schedule = derive_schedule(DP, MIXTRAL_8X7B, mesh, MIXED)
    a2a = [(o, n) for o, n in schedule.counted() if o.op == "all_to_all"]
    assert all_to_all_elements(MIXTRAL_8X7B) == 4096 * 2 * 4096
    assert [(o.phase, o.axis, o.group, n) for o, n in a2a] == [
        ("forward", "expert", 4, 32),
        ("forward", "expert", 4, 32),
        ("backward", "expert", 4, 32),
        ("backward", "expert", 4, 32),
    ]
    assert {o.payload_bytes for o, _ in a2a} == {67_108_864}
    assert {o.ring_bytes for o, _ in a2a} == {50_331_648}
    assert ring_bytes("all_to_all", 4, 67_108_864) == 50_331_648
    assert sum(o.ring_bytes * n for o, n in a2a) == 4 * 32 * 50_331_648 == 6_442_450_944


def test_top_k_and_capacity_factor_set_the_all_to_all_bytes() -> None:
    # T·k·cf·h: doubling k doubles the bytes, cf = 1.25 adds a quarter
    base = dict(layers=2, hidden=64, heads=4, ffn=128, vocab=256, experts=8, seq=32)
    top1 = MoESpec(top_k=1, **base)  # type: ignore[arg-type]
    top2 = MoESpec(top_k=2, **base)  # type: ignore[arg-type]
    padded = MoESpec(top_k=2, capacity_factor=Fraction(5, 4), **base)  # type: ignore[arg-type]
    assert all_to_all_elements(top1) == 32 * 1 * 64 == 2048
    assert all_to_all_elements(top2) == 32 * 2 * 64 == 4096
    assert all_to_all_elements(padded) == 32 * 2 * Fraction(5, 4) * 64 == 5120


def test_expert_grads_reduce_over_data_dense_grads_over_data_times_expert() -> None:
    mesh = Mesh.parse("data=2,expert=4")
    schedule = derive_schedule(DP, MIXTRAL_8X7B, mesh, MIXED)
    reductions = [
        (o.op, o.axis, o.group, o.payload_bytes, o.ring_bytes)
        for o, _ in schedule.counted()
        if o.op == "all_reduce"
    ]
    dense, experts = MIXTRAL_8X7B.dense_elements, MIXTRAL_8X7B.expert_elements
    assert dense == 1_605_636_096
    assert reductions == [
        # the dense grads over all 8 ranks: 2·7/8 of 2 B × 1,605,636,096
        ("all_reduce", "expert", 8, 3_211_272_192, 5_619_726_336),
        # each rank's E/e = 2 experts over their 2 data replicas: 2·1/2 of 2 B × experts/4
        ("all_reduce", "data", 2, 2 * experts // 4, 22_548_578_304),
    ]
    scale = [o for o, _ in schedule.counted() if o.op == "scale"]
    assert [o.group for o in scale] == [8]  # the batch is split d·e = 8 ways
    # pure expert parallelism: no data replicas, so only the dense all-reduce over the 8
    alone = derive_schedule(DP, MIXTRAL_8X7B, Mesh.parse("data=1,expert=8"), MIXED)
    assert [(o.axis, o.group) for o, _ in alone.counted() if o.op == "all_reduce"] == [
        ("expert", 8)
    ]


def test_expert_weights_are_split_e_ways_dense_weights_whole() -> None:
    # mixed_adam, 16 B per parameter held: dense whole, the experts over e = 4
    memory = derive_memory(DP, MIXTRAL_8X7B, Mesh.parse("data=2,expert=4"), MIXED)
    held = MIXTRAL_8X7B.dense_elements + MIXTRAL_8X7B.expert_elements // 4
    assert memory.model_state == 16 * held == 206_078_803_968
    # E/e = 2 = k: each rank holds exactly the parameters one token uses
    assert held == MIXTRAL_8X7B.active_psi
    dense_dp = derive_memory(DP, MIXTRAL_8X7B, Mesh.parse("data=8"), MIXED)
    assert dense_dp.model_state == 16 * 46_702_792_704


def test_pipeline_stages_run_the_all_to_alls_of_their_own_layers() -> None:
    mesh = Mesh.parse("data=2,expert=2,pipeline=2")
    for rank in (0, mesh.stride("pipeline")):
        schedule = derive_schedule(get_strategy("dp×pp"), SMALL_MOE, mesh, MIXED, rank)
        units = {units for o, units, _ in schedule.held() if o.op == "all_to_all"}
        assert units == {4}  # 8 layers, 4 per stage, each its dispatch and combine


def test_the_checker_holds_for_expert_parallelism_and_each_fault_breaks_integrity() -> None:
    assert check("dp", mesh="data=2,expert=4").broken == []
    assert check("dp", mesh="data=1,expert=4").broken == []
    dropped = check("dp", mesh="data=2,expert=4", fault="drop-routed-tokens")
    assert dropped.broken == ["gradient_integrity"]
    # SMALL_MOE: E·C·h = 8·⌈2·32/8⌉·64 = 4096 elements, the block of one of 4 ranks left out
    assert "carries 3,072 of the 4,096 elements" in " ".join(str(dropped).split())
    assert "16 token slots of h lost" in " ".join(str(dropped).split())
    skipped = check("dp", mesh="data=2,expert=4", fault="skip-expert-grad-reduce")
    assert skipped.broken == ["gradient_integrity"]
    assert "state consistency fails too, as a consequence" in " ".join(str(skipped).split())
    assert "the experts' grads over their data replicas" in " ".join(str(skipped).split())


def test_a_schedule_without_the_dense_reduction_leaves_grads_partial_on_expert() -> None:
    from placement_edu.checker import gradient_integrity

    mesh = Mesh.parse("data=2,expert=4")
    schedule = derive_schedule(DP, SMALL_MOE, mesh, MIXED).edited(
        lambda ops: tuple(o for o in ops if not (o.op == "all_reduce" and o.axis == "expert"))
    )
    condition = gradient_integrity(schedule, DP, mesh, model=SMALL_MOE)
    assert not condition.holds
    assert "still partial on the expert axis (4 ranks)" in condition.reason


def test_the_expert_faults_apply_only_where_there_is_an_expert_axis() -> None:
    with pytest.raises(PlacementError, match="try dp on data=4,expert=2"):
        check("dp", mesh="data=4", fault="drop-routed-tokens")
    with pytest.raises(PlacementError, match="beside a data axis of degree > 1"):
        check("dp", mesh="data=1,expert=4", fault="skip-expert-grad-reduce")


def test_load_imbalance_the_busiest_rank_beside_the_balanced_one() -> None:
    # Mixtral on e = 4 ranks, T = 4096, k = 2: 4·4096·2 = 32,768 routed copies; balanced, each
    # rank takes 8,192; a rank chosen by half of them takes 16,384 dropless (2x the bytes from the
    # other 3 ranks: 16,384·3/4·4096·2 B, and 2x its FLOPs, 2·3·4096·14336 each)
    even = rank_load(MIXTRAL_8X7B, 4, 0, dropless=True)
    busy = rank_load(MIXTRAL_8X7B, 4, Fraction(1, 2), dropless=True)
    assert (even.tokens, busy.tokens) == (8192, 16384)
    assert busy.received_bytes == 16384 * Fraction(3, 4) * 4096 * 2 == 100_663_296
    assert busy.forward_flops == 16384 * 2 * 3 * 4096 * 14336
    assert busy.dropped == 0
    # under capacity factor 1 the buffers stay E·C = 8,192 slots: same bytes, 8,192 tokens dropped
    capped = rank_load(MIXTRAL_8X7B, 4, Fraction(1, 2))
    assert (capped.tokens, capped.dropped) == (8192, 8192)
    assert capped.received_bytes == even.received_bytes == 50_331_648
    text = imbalance_text(MIXTRAL_8X7B, 4, Fraction(1, 2))
    assert "dropless: tokens 16,384 vs 8,192 balanced (2x)" in text
    assert "dropped 8,192 tokens" in text
    with pytest.raises(PlacementError, match="between 1/e = 1/4"):
        rank_load(MIXTRAL_8X7B, 4, Fraction(1, 8))


def test_refusals_are_one_line() -> None:
    with pytest.raises(PlacementError, match="model has no experts"):
        check("dp", mesh="data=2,expert=2", model=ModelSpec(psi=1_000_000))
    six = MoESpec(layers=2, hidden=64, heads=4, ffn=128, vocab=100, experts=6, top_k=2, seq=8)
    with pytest.raises(PlacementError, match="6 experts cannot be split evenly .* expert=3"):
        derive_schedule(DP, six, Mesh.parse("data=1,expert=4"), MIXED)
    with pytest.raises(PlacementError, match="not derived yet"):
        derive_memory(get_strategy("zero3"), SMALL_MOE, Mesh.parse("data=2,expert=2"), MIXED)
    with pytest.raises(PlacementError, match="names the expert axis; its modes are fixed"):
        Placement(params={"expert": "R"})
    with pytest.raises(PlacementError, match="top_k .* cannot exceed"):
        MoESpec(layers=1, hidden=8, heads=2, ffn=8, vocab=8, experts=2, top_k=3)


SHAPE = "--layers 2 --hidden 64 --heads 4 --vocab 100 --seq 8".split()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            [*SHAPE, "--devices", "4", "--mesh", "data=2,expert=2", "--strategies", "dp"],
            "the model has no experts",
        ),
        (
            [*SHAPE, "--experts", "6", "--devices", "4", "--mesh", "data=1,expert=4"],
            "6 experts cannot be split evenly",
        ),
        ([*SHAPE, "--top-k", "2", "--devices", "4"], "--top-k shapes a mixture of experts"),
        (
            [*SHAPE, "--experts", "4", "--capacity-factor", "0", "--devices", "4"],
            "capacity factor '0' is out of range; give a positive number",
        ),
    ],
)
def test_table_refuses_in_one_line(argv, message, capsys) -> None:
    assert main(["table", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_table_and_check_accept_the_expert_axis(capsys) -> None:
    argv = [*SHAPE, "--experts", "4", "--top-k", "2", "--devices", "4"]
    assert main(["table", *argv, "--mesh", "data=2,expert=2", "--strategies", "dp", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"expert": 2' in out
    assert main(["check", "dp", "--mesh", "data=2,expert=2", "--fault", "drop-routed-tokens"]) == 1
    assert "gradient integrity: BROKEN" in capsys.readouterr().out


def test_a_mixture_of_experts_computes_with_its_active_parameters() -> None:
    from placement_edu.timing import flops_per_token

    # 6·Ψ_active per token plus attention's 12·L·h·s: forward 2·12,879,925,248 + 4·32·4096·4096
    assert flops_per_token(MIXTRAL_8X7B) == {
        "forward": 2 * 12_879_925_248 + 4 * 32 * 4096 * 4096,
        "backward": 4 * 12_879_925_248 + 8 * 32 * 4096 * 4096,
        "step": 0,
    }


def test_the_all_to_alls_are_priced_alpha_beta_on_the_node_link() -> None:
    from placement_edu.timing import get_hardware, step_time

    hw = get_hardware("h100-nvlink-ib")  # 8 GPUs a node: data=2,expert=4 is one node, NVLink
    alpha, w = hw.node_link.alpha_s, hw.node_link.bandwidth
    t = step_time(DP, MIXTRAL_8X7B, "data=2,expert=4", MIXED, hw, tokens_per_device=4096)
    forward_comm = dict((p, c) for p, _, c in t.by_pass)["forward"]
    # forward: 2 all-to-alls x 32 layers, each (e-1) = 3 steps of α and 50,331,648 B at W
    assert forward_comm == pytest.approx(64 * (3 * alpha + 50_331_648 / w), rel=1e-12)


def test_table_shows_the_busiest_expert_rank_beside_the_balanced_one(capsys) -> None:
    argv = [*SHAPE, "--experts", "4", "--top-k", "1", "--devices", "4", "--strategies", "dp"]
    assert main(["table", *argv, "--mesh", "data=2,expert=2", "--routing-skew", "0.75"]) == 0
    out = capsys.readouterr().out
    # b·s = 8 tokens, k = 1, two ranks: 16 routed; balanced 8 each, the busiest 12 dropless;
    # under cf = 1 its E·C = 4·2 = 8 slots keep 8 and drop 4
    assert "dropless: tokens 12 vs 8 balanced (1.5x)" in out
    assert "capacity factor 1: tokens 8 vs 8 balanced (1x)" in out and "dropped 4 tokens" in out
    assert main(["table", *argv, "--mesh", "data=2,expert=2", "--routing-skew", "0.25"]) == 2
    assert "between 1/e = 1/2 (balanced) and 1, got 1/4" in capsys.readouterr().err
    assert main(["table", *argv, "--routing-skew", "0.5"]) == 2
    assert "--routing-skew shows the busiest expert rank" in capsys.readouterr().err


def test_the_expert_faults_name_where_they_apply() -> None:
    from placement_edu.faults import strategies_for

    # on their example meshes with an expert axis added, where expert parallelism derives (data
    # states whole; no tensor, replica or context axis)
    assert strategies_for("drop-routed-tokens") == ("dp", "pp", "dp×pp")
    assert strategies_for("skip-expert-grad-reduce") == ("dp", "dp×pp")  # pp has no data replicas
    with pytest.raises(PlacementError, match="it applies to: dp, pp, dp×pp"):
        check("zero3", mesh="data=4", fault="drop-routed-tokens")
    with pytest.raises(PlacementError, match="without tensor, replica or context axes"):
        mesh = Mesh.parse("data=1,context=2,expert=2")
        derive_schedule(get_strategy("dp×cp"), SMALL_MOE, mesh, MIXED)


def test_deepseek_v3_sends_468_mb_per_gpu_per_moe_layer_and_54_gb_per_forward() -> None:
    # Glenn K. Lockwood, "Expert parallelism" (glennklockwood.com/garden/expert-parallelism), on
    # DeepSeek-V3 (h = 7,168, 256 routed experts, 8 per token, 4,096 tokens, 58 MoE layers), one
    # expert per GPU: 32,640 token vectors of 14,336 B leave each GPU, 468 MB, and as many come
    # back; 54 GB of all-to-all traffic per forward pass. Here: T·k·h·2 B, (e-1)/e of it sent.
    v3 = MoESpec(
        layers=58, hidden=7168, heads=128, ffn=2048, vocab=129280, experts=256, top_k=8, seq=4096
    )
    mesh = Mesh.parse("data=1,expert=256")
    schedule = derive_schedule(DP, v3, mesh, MIXED)
    forward = [
        (o, n) for o, n in schedule.counted() if o.op == "all_to_all" and o.phase == "forward"
    ]
    assert {o.ring_bytes for o, _ in forward} == {32_640 * 14_336} == {467_927_040}  # 468 MB
    assert sum(o.ring_bytes * n for o, n in forward) == 54_279_536_640  # 54 GB, forward
    assert round(467_927_040 / 1e6) == 468 and round(54_279_536_640 / 1e9) == 54


def test_the_dense_weights_start_and_stay_identical_across_the_expert_ranks() -> None:
    from placement_edu.checker import state_consistency

    mesh = Mesh.parse("data=1,expert=4")
    schedule = derive_schedule(DP, SMALL_MOE, mesh, MIXED)
    assert state_consistency(schedule, DP, mesh).holds
    unsynced = schedule.edited(lambda ops: tuple(o for o in ops if o.op != "broadcast"))
    condition = state_consistency(unsynced, DP, mesh)
    assert not condition.holds and "no start-up broadcast" in condition.reason
    unsummed = schedule.edited(lambda ops: tuple(o for o in ops if o.op != "all_reduce"))
    condition = state_consistency(unsummed, DP, mesh)
    assert not condition.holds and not condition.direct  # a consequence of the partial grads
    assert "nothing sums the dense gradients over the data × expert group" in condition.reason


def test_the_router_sends_each_token_to_its_top_k_and_each_expert_keeps_its_first_c() -> None:
    # By hand, 5 tokens, E = 3, top-2, C = 2: the top-2 of each row are experts {0, 1}, {0, 2},
    # {0, 1}, {1, 2}, {0, 2}: expert 0 chosen 4 times, 1 three, 2 three; each keeps 2 (the first
    # two in token order): 4 + 3 + 3 - 6 = 4 routed copies dropped.
    logits = [[3.0, 2.0, 1.0], [5.0, -1.0, 0.5], [0.2, 0.1, 0.0], [0.0, 1.0, 2.0], [9.0, 0.0, 1.0]]
    routed = route_tokens(logits, top_k=2, capacity=2)
    assert routed.chosen == (4, 3, 3)
    assert routed.kept == (2, 2, 2)
    assert routed.dropped == 4
    # top-1 (Switch Transformer), C = 4: expert 0 takes tokens 0, 1, 2, 4; expert 2 token 3
    assert route_tokens(logits, top_k=1, capacity=4).kept == (4, 0, 1)
    assert route_tokens(logits, top_k=1, capacity=3).dropped == 1


def test_a_tie_at_the_kth_logit_is_refused_not_broken_silently() -> None:
    with pytest.raises(PlacementError, match="token 1 ties at its top-1 logit"):
        route_tokens([[1.0, 0.0], [2.0, 2.0]], top_k=1, capacity=2)
    assert route_tokens([[2.0, 2.0, 1.0]], top_k=2, capacity=1).kept == (1, 1, 0)  # no tie at k


def test_the_toy_layer_alone_has_the_router_as_its_only_dense_weights() -> None:
    from placement_edu.runtime import ExpertRun

    # The gloo toy: h = 8, E = 4, one layer, float64: its dense grads are its router, h·E = 32
    # elements = 256 B, all-reduced over the e = 2 ranks (ring 2·1/2·256 = 256 B); before
    # ``layer_only`` the core counted attention, norms and embeddings too: 344 elements, 2,752 B.
    spec = ExpertRun(2, 2).spec()
    assert spec.dense_elements == 8 * 4
    assert ExpertRun(2, 2).predicted()[4] == (
        "backward",
        "all_reduce",
        "grads",
        "expert",
        2,
        256,
        256,
    )
    whole = MoESpec(**{**spec.__dict__, "layer_only": False})
    assert whole.dense_elements == 344 and whole.dense_elements * 8 == 2_752


def test_flash_attention_keeps_the_logsumexp_in_place_of_the_scores() -> None:
    # Mixtral, s = 4,096, b = 1, h = 4,096, a = 32, top-2, per layer: 15·sbh + 19·k·sbh =
    # 53 · 16,777,216 = 889,192,448 B besides attention's; eager keeps 5·a·s²·b =
    # 2,684,354,560 B of scores, flash the logsumexp 4·a·s·b = 524,288 B.
    from dataclasses import replace

    flash = replace(MIXTRAL_8X7B, attention="flash")
    assert (
        MIXTRAL_8X7B.activation_bytes_per_microbatch(1, Fraction(1)) == 889_192_448 + 2_684_354_560
    )
    assert flash.activation_bytes_per_microbatch(1, Fraction(1)) == 889_192_448 + 524_288
    with pytest.raises(PlacementError, match="attention must be one of eager, flash, got 'sdpa'"):
        MoESpec(layers=1, hidden=8, heads=1, ffn=8, vocab=2, experts=2, top_k=1, attention="sdpa")


def test_an_expert_axis_runs_the_same_expert_flops_as_fewer_larger_matmuls() -> None:
    # Mixtral, T = 4,096, C = 1,024: one expert matmul is 2·C·h·f = 2·1,024·4,096·14,336 =
    # 120,259,084,288 FLOPs under plain data parallelism, e = 8 times that on an expert axis of 8
    # (e·C = 8,192 tokens a call), one expert a rank instead of eight
    assert expert_matmul_flops(MIXTRAL_8X7B) == 120_259_084_288
    assert expert_matmul_flops(MIXTRAL_8X7B, 8) == 8 * 120_259_084_288


#: Notebook 14 §5's plans: Mixtral 8x7B with flash attention on 32 H100s, a global batch of 128
#: sequences of 4,096 tokens, one sequence a micro-batch (m = 128·p/32), and whether each fits.
COMPARED = [
    ("zero3", "data=32", True),
    ("dp×pp", "data=2,pipeline=16", True),
    ("dp×pp", "data=1,pipeline=32", True),
    ("dp×pp", "data=1,expert=4,pipeline=8", True),
    ("dp×pp", "data=1,expert=8,pipeline=4", True),
    ("dp×pp", "data=2,expert=8,pipeline=2", False),
    ("dp", "data=4,expert=8", False),
]


def test_the_plans_notebook_14_compares_fit_an_h100_or_are_shown_not_to() -> None:
    import json
    from dataclasses import replace
    from pathlib import Path

    from placement_edu.timing import get_hardware

    moe = replace(MIXTRAL_8X7B, attention="flash")
    budget = get_hardware("h100-nvlink-ib").memory_bytes
    assert budget == 80 * 2**30  # an H100's 80 GiB
    # By hand: flash attention keeps 53·sbh + 4asb = 889,716,736 B a layer (s = 4,096, b = 1,
    # h = 4,096, a = 32); 1F1B keeps p micro-batches of L/p layers on the first stage: all L = 32
    # layers' worth, 28,470,935,552 B, whatever p. Model state 16 B × (dense/p + experts/(p·e)):
    # dense 1,605,636,096, experts 45,097,156,608 parameters.
    in_flight = 32 * 889_716_736
    dense, experts = MIXTRAL_8X7B.dense_elements, MIXTRAL_8X7B.expert_elements
    notebook = Path(__file__).parents[1] / "notebooks" / "14_mixture_of_experts.ipynb"
    saved = json.loads(notebook.read_text())
    printed = "".join(
        "".join(o.get("text", "")) for c in saved["cells"] for o in c.get("outputs", [])
    )
    for name, text, fits in COMPARED:
        mesh = Mesh.parse(text)
        p, e = mesh.degree("pipeline"), mesh.degree("expert")
        strategy = get_strategy(name).with_(micro_batches=128 * p // 32)
        memory = derive_memory(strategy, moe, mesh, MIXED, 0)
        if name != "zero3":
            assert memory.model_state == 16 * (Fraction(dense, p) + Fraction(experts, p * e))
            assert memory.peak == memory.model_state + in_flight
        assert (memory.peak <= budget) is fits, (text, memory.peak)
        row = f"{text:28}{strategy.micro_batches:>4}{float(memory.model_state) / 1e9:11.2f} GB"
        assert f"{row}{float(memory.peak) / 1e9:9.2f} GB  {'yes' if fits else 'no'}" in printed
    # ZeRO-3 holds 16Ψ/32 = 23,351,396,352 B of model state, and fits with room to spare
    zero3 = derive_memory(
        get_strategy("zero3").with_(micro_batches=4), moe, Mesh.parse("data=32"), MIXED, 0
    )
    assert zero3.model_state == 16 * MIXTRAL_8X7B.psi // 32 == 23_351_396_352
    # of the two that do not fit, two stages miss by 513,835,008 B (86.41 GB of 85.90 GB)
    two = derive_memory(
        get_strategy("dp×pp").with_(micro_batches=8),
        moe,
        Mesh.parse("data=2,expert=8,pipeline=2"),
        MIXED,
        0,
    )
    assert two.peak - budget == 513_835_008


def test_an_expert_matmul_runs_at_the_h100_curves_rate_for_its_size() -> None:
    from placement_edu.experts import expert_matmul_rate
    from placement_edu.gemm import H100_CURVE

    # OpenXLA's H100 table (gemm.XLA_H100_BF16): 4096³ (137.4 GFLOP) at 1.0, 4096² × 2048 (68.7
    # GFLOP) at 0.9556; Mixtral's 120.3 GFLOP call lies between them, linear in log FLOPs:
    # 0.9556 + (1 - 0.9556) · ln(120.26/68.72)/ln 2 = 0.9915. At e = 8 (962 GFLOP) the curve is
    # flat: 1.0. DeepSeek-V3's routed expert (h = 7,168, f = 2,048, C = ⌈8·4096/256⌉ = 128):
    # 3.76 GFLOP a call, between 2^31 (0.305) and 2^32 (0.456) FLOPs.
    (x0, y0), (x1, y1) = H100_CURVE[-2], H100_CURVE[-1]
    assert (x0, x1) == (2 * 4096 * 4096 * 2048, 2 * 4096**3) and y1 == 1.0
    mixtral = expert_matmul_rate(MIXTRAL_8X7B)
    assert round(mixtral, 4) == 0.9915
    assert mixtral == pytest.approx(y0 + (y1 - y0) * math.log(120_259_084_288 / x0) / math.log(2))
    assert expert_matmul_rate(MIXTRAL_8X7B, 8) == 1.0
    v3 = MoESpec(
        layers=58, hidden=7168, heads=128, ffn=2048, vocab=129280, experts=256, top_k=8, seq=4096
    )
    assert expert_matmul_flops(v3) == 2 * 128 * 7168 * 2048
    assert 0.305 < expert_matmul_rate(v3) < 0.456 and round(expert_matmul_rate(v3), 3) == 0.427


def test_table_takes_flash_attention_for_a_mixture_of_experts(capsys) -> None:
    import json

    # Mixtral's shape on data=1,expert=8: flash attention keeps 4asb = 524,288 B a layer in place
    # of eager's 5as²b = 2,684,354,560 B: 32 layers × the difference, 85,882,568,704 B, off the peak
    mixtral = "--layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 32000"
    argv = [*mixtral.split(), "--seq", "4096", "--experts", "8", "--devices", "8"]
    argv += ["--mesh", "data=1,expert=8", "--strategies", "dp", "--json"]
    peaks = []
    for attention in ("eager", "flash"):
        assert main(["table", *argv, "--attention", attention]) == 0
        (row,) = json.loads(capsys.readouterr().out)
        peaks.append(row["memory"]["peak"])
    assert peaks[0] - peaks[1] == 32 * (2_684_354_560 - 524_288) == 85_882_568_704
