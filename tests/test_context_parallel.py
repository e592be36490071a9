"""Context parallelism (issue 26 item 1): the ``context`` mesh axis cuts each sequence into c
chunks. Ring attention passes K/V round the ring ((c - 1) rounds per layer and pass), Ulysses
exchanges heads and sequence by all-to-all (two per layer and pass). The published figures are
pinned with their sources; the rest is hand-calculated beside each expected value."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from placement_edu import Mesh, ModelSpec, PlacementError, TransformerSpec, get_precision
from placement_edu.cli import main
from placement_edu.memory import ACTIVATIONS, CONTEXT_BUFFERS, derive_memory
from placement_edu.placement import State
from placement_edu.schedule import derive_schedule, ring_bytes
from placement_edu.strategies import get_strategy

pytestmark = pytest.mark.fast

MIXED = get_precision("mixed_adam")  # activations 2 B
# b·s·h = 2·64·64 = 8,192 elements; a = 8 heads
MODEL = TransformerSpec(layers=2, hidden=64, heads=8, seq=64, vocab=128, micro_batch=2)
BSH = 2 * 64 * 64
RING = get_strategy("dp×cp")
ULYSSES = get_strategy("dp×cp_ulysses")


def context_ops(strategy, model, mesh, phase: str) -> list[tuple[object, int]]:
    """(op, times) of the context axis' activation ops in ``phase``."""
    schedule = derive_schedule(strategy, model, Mesh.parse(mesh), MIXED)
    return [
        (o, n)
        for o, n in schedule.counted()
        if o.axis == "context" and o.state.value == "activations" and o.phase == phase
    ]


def sent(ops: list[tuple[object, int]]) -> Fraction:
    return sum((o.ring_bytes * n for o, n in ops), Fraction(0))


# --- ring attention ---------------------------------------------------------------------------
def test_ring_attention_sends_c_minus_1_kv_chunks_per_layer_forward() -> None:
    # Liu et al. 2023 ("Ring Attention"): (c-1) rounds, each sends this rank's K/V chunk,
    # 2·b·(s/c)·h_kv elements. Per layer: 2(c-1)/c · b·s·h_kv · 2 B = 2·3/4·8,192·2 = 24,576 B.
    ops = context_ops(RING, MODEL, "data=2,context=4", "forward")
    sends = [(o, n) for o, n in ops if o.op == "send"]
    assert sum(n for _, n in sends) == 3 * 2  # (c - 1) rounds × 2 layers
    assert {o.payload_bytes for o, _ in sends} == {2 * BSH // 4 * 2}  # 8,192 B per chunk
    assert sent(ops) == 2 * 24_576
    # the all-gather of K/V Megatron's documentation names: (c-1)/c · 2·b·s·h_kv · 2 B
    assert sent(ops) / 2 == ring_bytes("all_gather", 4, 2 * BSH * 2)
    # every send has its recv
    assert sum(n for o, n in ops if o.op == "recv") == 6


def test_ring_attention_backward_passes_kv_again_and_the_kv_gradients() -> None:
    # Megatron-Core's context_parallel.rst: "each GPU only stores the KV of a sequence chunk in
    # forward and gathers KV again in backward"; "reduce-scatter should be applied to the
    # activation gradients of KV": K/V and dK/dV each (c-1) rounds: 2 × 24,576 B per layer.
    forward = sent(context_ops(RING, MODEL, "data=2,context=4", "forward"))
    backward = sent(context_ops(RING, MODEL, "data=2,context=4", "backward"))
    assert backward == 2 * forward == 2 * 2 * 24_576


def test_grouped_query_attention_narrows_the_ring_by_k_over_a() -> None:
    # Megatron-Core: "Exchanging KV also can leverage MQA/GQA to reduce communication volumes".
    # K = 2 key-value heads of 8: h_kv = h/4, a quarter of the bytes.
    gqa = TransformerSpec(
        layers=2, hidden=64, heads=8, seq=64, vocab=128, micro_batch=2, kv_heads=2
    )
    full = sent(context_ops(RING, MODEL, "data=2,context=4", "forward"))
    assert sent(context_ops(RING, gqa, "data=2,context=4", "forward")) == full / 4


# --- Ulysses ----------------------------------------------------------------------------------
def test_ulysses_volume_per_layer_is_4nh_over_p_as_jacobs_et_al_print() -> None:
    # Jacobs et al. 2023 ("DeepSpeed Ulysses", §3.2): all-to-all of QKV, aggregate 3Nh, and of
    # the output, Nh: "per link communication volume of 4Nh/P". N = b·s tokens, P = c = 4:
    # 4·8,192/4 = 8,192 elements per layer (ZeRO convention: a device's buffer, S).
    ops = context_ops(ULYSSES, MODEL, "data=2,context=4", "forward")
    assert [o.op for o, _ in ops] == ["all_to_all", "all_to_all"]
    assert {n for _, n in ops} == {2}  # two layers
    per_layer = sum(o.zero_volume_elements for o, _ in ops)
    assert per_layer == 4 * BSH // 4 == 8_192
    # exact bytes: it keeps 1/c of each buffer: 3/4 · 8,192 · 2 B = 12,288 B per layer
    assert sent(ops) == 2 * 12_288
    # backward: the same two, in reverse (output gradient first)
    back = context_ops(ULYSSES, MODEL, "data=2,context=4", "backward")
    assert [o.elements for o, _ in back] == [o.elements for o, _ in ops][::-1]


def test_ulysses_sends_less_than_the_ring_at_large_c() -> None:
    # per layer and forward pass: ring 2(c-1)/c·bsh (MHA), Ulysses (c-1)/c · 4bsh/c: less once
    # c > 2, equal at c = 2 (Jacobs et al. 2023 §3.2 compare against Megatron-SP likewise).
    big = TransformerSpec(layers=1, hidden=64, heads=8, seq=64, vocab=128)
    for c, ratio in ((2, Fraction(1)), (4, Fraction(1, 2)), (8, Fraction(1, 4))):
        mesh = f"data=1,context={c}"
        ring = sent(context_ops(RING, big, mesh, "forward"))
        ulysses = sent(context_ops(ULYSSES, big, mesh, "forward"))
        assert ulysses / ring == ratio


# --- gradients: reduced over data × context -------------------------------------------------
def test_gradients_are_reduced_over_context_then_data_and_scaled_by_d_times_c() -> None:
    # Each context rank's gradient covers its s/c tokens: partial along context as along data.
    schedule = derive_schedule(RING, MODEL, Mesh.parse("data=2,context=4"), MIXED)
    grads = [o for o, _ in schedule.counted() if o.state.value == "grads"]
    assert [(o.op, o.axis, o.group) for o in grads] == [
        ("all_reduce", "context", 4),
        ("all_reduce", "data", 2),
        ("scale", "context", 8),
    ]


def test_zero1_over_context_reduces_like_one_all_reduce_over_data_times_context() -> None:
    # Megatron's distributed optimizer shards the optimizer over the data-parallel group with
    # context parallel (get_data_parallel_group(with_context_parallel=True)): the gradients go
    # through one group of d·c. Derived per axis here: a reduce-scatter on context, an all-reduce
    # of the 1/c slice on data, the parameters' all-gather on context after the step, which is
    # 2(c-1)/c + 2(d-1)/(d·c) = 2(dc-1)/(dc) of the 2Ψ bytes: a flat all-reduce over d·c, exactly.
    from placement_edu.placement import Placement
    from placement_edu.strategies import Strategy

    zero1_cp = Strategy(
        "zero1 over context",
        Placement(optimizer={"context": "S"}),
        mesh_axes=("data", "context"),
    )
    model = ModelSpec(psi=1_000_000, layers=2, boundary_elements=4096)
    schedule = derive_schedule(zero1_cp, model, Mesh.parse("data=2,context=4"), MIXED)
    model_state_bytes = sum(
        (o.ring_bytes * n for o, n in schedule.counted() if o.state.value != "activations"),
        Fraction(0),
    )
    assert model_state_bytes == ring_bytes("all_reduce", 8, 2 * 1_000_000)  # 3,500,000 B


# --- memory -----------------------------------------------------------------------------------
def test_a_context_rank_keeps_1_over_c_of_the_activations_and_the_kv_in_flight() -> None:
    alone = derive_memory(get_strategy("dp"), MODEL, Mesh.parse("data=2"), MIXED)
    ring = derive_memory(RING, MODEL, Mesh.parse("data=2,context=4"), MIXED)
    ulysses = derive_memory(ULYSSES, MODEL, Mesh.parse("data=2,context=4"), MIXED)
    for memory in (ring, ulysses):
        assert (
            memory.transient["forward"][ACTIVATIONS] * 4
            == (alone.transient["forward"][ACTIVATIONS])
        )
        assert memory.model_state == alone.model_state  # P, G, O whole on context
    # ring: the chunk in use and the one arriving, 2 × 2·b·(s/c)·h · 2 B = 2 × 8,192 B; backward
    # their dK/dV too
    assert ring.transient["forward"][CONTEXT_BUFFERS] == 16_384
    assert ring.transient["backward"][CONTEXT_BUFFERS] == 32_768
    # Ulysses: the head-split Q, K, V received, 3·b·s·h/c · 2 B = 3·8,192/4·2 = 12,288 B
    assert ulysses.transient["forward"][CONTEXT_BUFFERS] == 12_288


# --- composition with the tensor axis ---------------------------------------------------------
def test_tensor_parallelism_moves_the_context_ranks_tokens_only() -> None:
    # On data=1,context=2,tensor=2 each tensor all-reduce moves b·(s/c)·h, and the ring's K/V
    # chunk is this tensor rank's heads: 2·b·(s/c)·h/t.
    strategy = get_strategy("tp").with_(mesh_axes=("context", "tensor"))
    schedule = derive_schedule(strategy, MODEL, Mesh.parse("context=2,tensor=2"), MIXED)
    tp = {o.elements for o, _ in schedule.counted() if o.axis == "tensor"}
    assert tp == {BSH // 2}
    ring = {o.elements for o, _ in schedule.counted() if o.axis == "context" and o.op == "send"}
    assert ring == {2 * BSH // (2 * 2)}


# --- refused where it does not apply ----------------------------------------------------------
def test_a_model_without_a_sequence_is_refused_on_a_context_axis() -> None:
    with pytest.raises(PlacementError, match="splits each sequence, but .* has no sequence"):
        derive_schedule(RING, ModelSpec(psi=1000), Mesh.parse("data=2,context=2"), MIXED)


def test_a_context_degree_that_does_not_divide_the_sequence_is_refused() -> None:
    with pytest.raises(PlacementError, match="context degree 3 does not divide the sequence"):
        derive_memory(RING, MODEL, Mesh.parse("data=1,context=3"), MIXED)


def test_ulysses_needs_heads_divisible_by_c_times_t() -> None:
    # 8 heads over context 4 × tensor 4 = 16 ranks: no whole head each; the ring has no such rule.
    mesh = Mesh.parse("context=4,tensor=4")
    tp_ulysses = get_strategy("tp").with_(context_attention="ulysses")
    with pytest.raises(PlacementError, match="c·t to divide 8, because its all-to-all"):
        derive_schedule(tp_ulysses, MODEL, mesh, MIXED)
    derive_schedule(get_strategy("tp"), MODEL, mesh, MIXED)


# --- the command line -------------------------------------------------------------------------
SHAPE = ["--layers", "2", "--hidden", "64", "--heads", "8", "--seq", "64", "--vocab", "128"]


def test_table_accepts_a_context_axis_and_both_attentions(capsys) -> None:
    argv = ["table", *SHAPE, "--micro-batch", "2", "--devices", "8", "--mesh", "data=2,context=4"]
    by_attention = {}
    for attention in ("ring", "ulysses"):
        assert main([*argv, "--strategies", "dp", "--context-attention", attention, "--json"]) == 0
        row = json.loads(capsys.readouterr().out)[0]
        by_attention[attention] = row["comm"]["ring_bytes_by_axis"]["context"]
    # both reduce the gradients on context: 2·3/4 · 2Ψ B, Ψ = 112,384 -> 337,152 B; then the
    # attention traffic of 2 layers: ring 2 × (24,576 + 49,152), Ulysses 2 × (12,288 + 12,288)
    assert by_attention["ring"] == 337_152 + 2 * (24_576 + 49_152)
    assert by_attention["ulysses"] == 337_152 + 2 * (12_288 + 12_288)


def test_the_command_line_refuses_context_on_a_model_without_a_sequence(capsys) -> None:
    argv = ["table", "--params", "1e6", "--devices", "8", "--mesh", "data=2,context=4"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no sequence" in err


def test_check_accepts_the_context_axis(capsys) -> None:
    assert main(["check", "dp×cp", "--mesh", "data=2,context=4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["gradient_integrity"]["holds"] and result["state_consistency"]["holds"]
    assert "context and data" in result["gradient_integrity"]["reason"]


# --- the time model (α-β, SPEC §9) --------------------------------------------------------------
def test_the_time_model_prices_the_context_ops_by_alpha_beta() -> None:
    from placement_edu.timing import comm_time, get_hardware, on_critical_path

    hw = get_hardware("h100-nvlink-ib")
    mesh = Mesh.parse("data=1,context=8")  # one node of 8 GPUs: the context group on NVLink
    link = hw.axis_link(mesh, "context")
    alpha, w = link.alpha_s, link.bandwidth
    model = TransformerSpec(layers=2, hidden=64, heads=8, seq=64, vocab=128, micro_batch=2)
    # Ulysses, per layer forward: two all-to-alls over c = 8, each (c-1) steps of α and
    # (c-1)/c of its buffer: QKV 3·8,192/8 elements, the output 8,192/8, at 2 B
    qkv, out = 3 * BSH // 8 * 2, BSH // 8 * 2
    ulysses = derive_schedule(ULYSSES, model, mesh, MIXED)
    by_hand = 2 * sum(7 * alpha + 7 / 8 * size / w for size in (qkv, out))
    assert comm_time(ulysses, hw, mesh)["forward"] == pytest.approx(by_hand, rel=1e-12)
    # ring, per layer forward: (c-1) sends of one K/V chunk, 2·8,192/8 elements at 2 B, one α
    # each (a recv is priced at its sender)
    ring = derive_schedule(RING, model, mesh, MIXED)
    by_hand = 2 * 7 * (alpha + 2 * BSH // 8 * 2 / w)
    assert comm_time(ring, hw, mesh)["forward"] == pytest.approx(by_hand, rel=1e-12)
    # Ulysses waits for its all-to-alls; the ring's chunks travel under attention's blocks
    assert all(on_critical_path(o) for o, _ in ulysses.counted() if o.op == "all_to_all")
    assert not any(on_critical_path(o) for o, _ in ring.counted() if o.axis == "context")


def test_time_prices_both_attentions_on_a_context_axis(capsys) -> None:
    argv = ["time", *SHAPE, "--global-batch", "4", "--mesh", "data=2,context=4", "--json"]
    seconds = {}
    for attention in ("ring", "ulysses"):
        assert main([*argv, "--context-attention", attention]) == 0
        priced = json.loads(capsys.readouterr().out)
        ops = {(c["op"], c["axis"]) for c in priced["breakdown"]["collectives"]}
        assert ("all_to_all" if attention == "ulysses" else "send", "context") in ops
        seconds[attention] = priced["step_s"]
    assert seconds["ring"] != seconds["ulysses"]


# --- composition with the tensor, pipeline and data axes: what splits what -------------------
def test_context_then_sequence_parallelism_split_the_sequence_twice() -> None:
    # Megatron's sequence parallelism splits the context rank's s/c tokens again over t: its
    # all-gathers rebuild b·(s/c)·h, never b·s·h.
    sp_model = TransformerSpec(
        layers=2, hidden=64, heads=8, seq=64, vocab=128, micro_batch=2, sequence_parallel=True
    )
    strategy = get_strategy("tp").with_(sequence_parallel=True)
    schedule = derive_schedule(strategy, sp_model, Mesh.parse("context=2,tensor=2"), MIXED)
    gathers = {
        o.elements
        for o, _ in schedule.counted()
        if o.axis == "tensor" and o.state.value == "activations"
    }
    assert gathers == {BSH // 2}


def test_pipeline_stages_send_the_context_ranks_chunk() -> None:
    schedule = derive_schedule(get_strategy("pp"), MODEL, Mesh.parse("context=2,pipeline=2"), MIXED)
    sends = {o.elements for o, _ in schedule.counted() if o.axis == "pipeline"}
    assert sends == {BSH // 2}  # b·(s/c)·h


def test_context_repeats_no_work_where_a_tensor_axis_splitting_nothing_would() -> None:
    # SPEC §6: an axis on which nothing is split repeats the work. The context axis always splits
    # the tokens, so dp on it is valid; the same states whole on a tensor axis are refused.
    derive_schedule(get_strategy("dp"), MODEL, Mesh.parse("data=1,context=2"), MIXED)
    with pytest.raises(PlacementError, match="would repeat the same work"):
        derive_schedule(get_strategy("dp"), MODEL, Mesh.parse("data=1,tensor=2"), MIXED)


def test_parameters_sharded_on_context_are_refused_every_context_rank_runs_the_whole_model() -> (
    None
):
    from placement_edu.placement import Placement
    from placement_edu.strategies import Strategy

    sharded = Strategy("p on context", Placement(params={"context": "S"}), mesh_axes=("context",))
    with pytest.raises(PlacementError, match="params sharded \\(S\\) on the context axis"):
        derive_schedule(sharded, MODEL, Mesh.parse("context=2"), MIXED)


def test_a_skipped_context_reduction_breaks_gradient_integrity() -> None:
    # A context rank's gradient covers its s/c tokens only: without the sum over context the
    # optimizer applies a partial gradient.
    from placement_edu.checker import gradient_integrity

    mesh = Mesh.parse("data=2,context=4")
    schedule = derive_schedule(RING, MODEL, mesh, MIXED).edited(
        lambda ops: tuple(o for o in ops if not (o.axis == "context" and o.op == "all_reduce"))
    )
    verdict = gradient_integrity(schedule, RING, mesh)
    assert not verdict.holds
    assert "still partial on the context axis (4 ranks)" in verdict.reason


def test_grads_materialized_on_context_break_rule_2() -> None:
    from placement_edu.checker import check
    from placement_edu.placement import Placement
    from placement_edu.strategies import Strategy

    freed = Strategy(
        "grads freed on context", Placement(grads={"context": "M"}), mesh_axes=("data", "context")
    )
    result = check(freed, mesh="data=2,context=2")
    assert [(v.rule, v.axes) for v in result.rule_violations] == [(2, ("context",))]
    assert "gradient_integrity" in result.broken


def test_ring_backward_sends_each_chunks_dkv_beside_it_from_its_first_visitor_on() -> None:
    # c = 4, one layer: round 1 passes K/V; rounds 2 and 3 K/V and a dK/dV; the last visitor then
    # sends each chunk's dK/dV home -- (c-1) of each, in this order (what the gloo run records)
    one = TransformerSpec(layers=1, hidden=64, heads=8, seq=64, vocab=128)
    schedule = derive_schedule(RING, one, Mesh.parse("data=1,context=4"), MIXED)
    sends = [o.why for o in schedule.ops if o.op == "send" and o.phase == "backward"]
    kinds = ["dK/dV" if "dK/dV" in why else "K/V" for why in sends]
    assert kinds == ["K/V", "K/V", "dK/dV", "K/V", "dK/dV", "dK/dV"]


# --- where the context ranks sit ---------------------------------------------------------------
def test_a_context_group_is_c_neighbours_at_stride_t_as_megatrons_tp_cp_order_puts_them() -> None:
    # rank = ((d_index · c) + c_index) · t + t_index on data=2,context=4,tensor=2
    mesh = Mesh.parse("data=2,context=4,tensor=2")
    assert mesh.group(0, "tensor") == [0, 1]
    assert mesh.group(0, "context") == [0, 2, 4, 6]
    assert mesh.group(0, "data") == [0, 8]
    assert mesh.coords(13) == {
        "data": 1,
        "context": 2,
        "tensor": 1,
        "pipeline": 0,
    }  # (1·4 + 2)·2 + 1
    # one node of 8 holds a context group of 4 × tensor 2: NVLink; the data groups span nodes
    from placement_edu.presentation.layout import rank_layout
    from placement_edu.timing import get_hardware

    hw = get_hardware("h100-nvlink-ib")
    assert not hw.spans_nodes(mesh, "context") and hw.spans_nodes(mesh, "data")
    rank_layout(mesh)  # every axis has its colour


def test_zero1_over_data_times_context_moves_one_flat_all_reduce_over_d_times_c() -> None:
    # Megatron's distributed optimizer with CP shards the optimizer over the data-parallel group
    # with context parallel (d·c ranks). Derived per axis: reduce-scatter on context (Ψ), then on
    # data (Ψ/c); after the step all-gather on data (to Ψ/c), then on context (to Ψ):
    # (c-1)/c + (d-1)/(dc) = (dc-1)/(dc) of 2Ψ B each way, a flat all-reduce over d·c exactly.
    strategy = get_strategy("zero1×cp")
    model = ModelSpec(psi=1_000_000, layers=2, boundary_elements=4096)
    schedule = derive_schedule(strategy, model, Mesh.parse("data=2,context=4"), MIXED)
    states = [(o.op, o.axis, o.elements) for o, _ in schedule.counted() if o.phase != "startup"]
    states = [s for s in states if s[0] in ("reduce_scatter", "all_gather")]
    assert states == [
        ("reduce_scatter", "context", 1_000_000),
        ("reduce_scatter", "data", 250_000),
        ("all_gather", "data", 250_000),
        ("all_gather", "context", 1_000_000),
    ]
    model_state_bytes = sum(
        (o.ring_bytes * n for o, n in schedule.counted() if o.state.value != "activations"),
        Fraction(0),
    )
    assert model_state_bytes == ring_bytes("all_reduce", 8, 2 * 1_000_000) == 3_500_000
    memory = derive_memory(strategy, model, Mesh.parse("data=2,context=4"), MIXED)
    assert memory.device[State.OPTIMIZER] == 12 * 1_000_000 // 8  # 12Ψ/(d·c)


def test_full_recomputation_replays_forwards_context_ops_inside_backward_both_ways() -> None:
    # As tensor parallelism's replayed all-reduces (schedule.rules): the replay runs in the
    # backward pass, so its ops are backward's -- for Ulysses' all-to-alls as for the ring's sends
    full = TransformerSpec(
        layers=2, hidden=64, heads=8, seq=64, vocab=128, micro_batch=2, recompute="full"
    )
    for strategy in (RING, ULYSSES):
        plain = sent(context_ops(strategy, MODEL, "data=1,context=4", "forward"))
        assert sent(context_ops(strategy, full, "data=1,context=4", "forward")) == plain
        replayed = [
            (o, n)
            for o, n in context_ops(strategy, full, "data=1,context=4", "backward")
            if o.why.startswith("forward (recomputed)")
        ]
        assert sent(replayed) == plain  # the forward's bytes once more, in backward
