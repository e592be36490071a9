"""Time (SPEC §9): α·steps + bytes/W per collective, 6Ψ per token, two overlap models, and the
compute-bound threshold -- pinned to exact formulas and to published worked figures."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction


import pytest

from placement_edu import (
    Mesh,
    ModelSpec,
    PlacementError,
    State,
    TransformerSpec,
    derive_schedule,
    get_precision,
    get_strategy,
)
from placement_edu.schedule import Op
from placement_edu.timing import (
    HARDWARE,
    IB_NDR,
    attention_flops_per_token,
    flops_per_token,
    logit_flops_per_token,
    megatron_flops_per_token,
    model_flops_per_token,
    on_critical_path,
    startup_time,
    Hardware,
    Link,
    comm_time,
    compute_bound_tokens,
    compute_time,
    exposed,
    op_time,
    ring_steps,
    step_time,
    tokens_of,
    tp_compute_bound,
)

pytestmark = pytest.mark.fast

ALPHA, W = 1e-6, 1e9  # 1 µs per ring step, 1 GB/s: every figure below is easy to check by hand
LINK = Link(ALPHA, W)
S = 8_000_000  # bytes of payload: 4e6 bf16 elements


def hw(
    alpha: float = 0.0, bandwidth: float = W, flops: float = 1e12, host: Link | None = None
) -> Hardware:
    """Every device in one node, on one link of ``bandwidth`` B/s and ``alpha`` s per step."""
    return Hardware("test", flops, 80 * 10**9, Link(alpha, bandwidth), host_link=host)


def op(kind: str, group: int = 8, **extra) -> Op:
    return Op(kind, State.GRADS, "data", "backward", S // 2, 2, group, **extra)


# --- the α-β formula, one collective at a time ----------------------------------------------------
def test_all_reduce_takes_2_n_minus_1_steps_and_sends_2_n_minus_1_over_n_of_s() -> None:
    assert ring_steps("all_reduce", 8) == 14
    assert op_time(op("all_reduce"), LINK) == pytest.approx(
        14 * ALPHA + 2 * 7 / 8 * S / W
    )  # 0.014014 s


def test_an_ops_seconds_are_the_same_whether_its_size_is_an_int_or_an_equal_fraction() -> None:
    # op_time keeps each op's seconds by what it reads (a plan prices the same ops thousands of
    # times): 4e6 elements as an int and as Fraction(8e6, 2) are one key and one exact answer
    whole = Op("all_reduce", State.GRADS, "data", "backward", S // 2, 2, 8)
    halves = Op("all_reduce", State.PARAMS, "tensor", "forward", Fraction(S, 2), 2, 8)
    assert op_time(whole, LINK) == op_time(halves, LINK) == 14 * ALPHA + 14_000_000 / W
    assert op_time(whole, Link(ALPHA, 2 * W)) == 14 * ALPHA + 7_000_000 / W  # another link


def test_all_gather_and_reduce_scatter_take_n_minus_1_steps_and_half_the_all_reduce_bytes() -> None:
    for kind in ("all_gather", "reduce_scatter"):
        assert ring_steps(kind, 8) == 7
        assert op_time(op(kind), LINK) == pytest.approx(7 * ALPHA + 7 / 8 * S / W)  # 0.007007 s


def test_send_is_one_step_of_s_bytes_and_recv_is_priced_at_the_sender() -> None:
    assert op_time(op("send", group=4), LINK) == pytest.approx(ALPHA + S / W)
    assert op_time(op("recv", group=4), LINK) == 0.0


def test_broadcast_root_sends_n_minus_1_copies_and_every_member_waits_n_minus_1_steps() -> None:
    assert op_time(op("broadcast", root=True), LINK) == pytest.approx(7 * ALPHA + 7 * S / W)
    assert op_time(op("broadcast", root=False), LINK) == pytest.approx(7 * ALPHA)


def test_libraries_broadcast_down_a_ring_nccl_or_a_binomial_tree_gloo() -> None:
    # SPEC §9: every member waits for the last copy. NCCL pipelines a broadcast down a ring: N-1
    # hops, S/W. gloo::broadcast (what PyTorch's ProcessGroupGloo calls) is a binomial tree:
    # ⌈log2 8⌉ = 3 rounds of α + S/W. The schedule's bytes stay the star above.
    for root in (True, False):
        assert op_time(op("broadcast", root=root), LINK, "nccl") == pytest.approx(7 * ALPHA + S / W)
        assert op_time(op("broadcast", root=root), LINK, "gloo") == pytest.approx(
            3 * (ALPHA + S / W)
        )
    assert ring_steps("broadcast", 9, "gloo") == 4 and ring_steps("broadcast", 9, "nccl") == 8
    # zero1_allreduce's owners broadcast their updated slices after the step (SPEC §4 rule 1):
    # 8 broadcasts of Ψ/8 bf16 values, 2.5e8 bytes each: NCCL 8 × S/W = 2 s, gloo 8 × 3·S/W = 6 s.
    mesh = Mesh.of(data=8)
    schedule = derive_schedule(
        _s("zero1_allreduce"), ModelSpec(10**9), mesh, get_precision("mixed_adam")
    )
    gloo, nccl = (replace(hw(), collectives=library) for library in ("gloo", "nccl"))
    assert comm_time(schedule, nccl, mesh)["step"] == pytest.approx(8 * 2.5e8 / W)
    assert comm_time(schedule, gloo, mesh)["step"] == pytest.approx(8 * 3 * 2.5e8 / W)
    assert HARDWARE["h100-nvlink-ib"].collectives == "nccl"
    assert HARDWARE["this_machine"].collectives == "gloo"  # calibrated on the runtime's gloo


def test_the_start_up_broadcast_is_booked_once_not_per_step() -> None:
    # SPEC §4 rule 4: dp's replicas start identical by one broadcast of the bf16 parameters (2Ψ
    # bytes); its seconds are the run's, once: 7α + 2Ψ/W down NCCL's ring, 3(α + 2Ψ/W) down
    # gloo's tree; never in a step's comm_time.
    mesh = Mesh.of(data=8)
    schedule = derive_schedule(_s("dp"), ModelSpec(10**9), mesh, get_precision("mixed_adam"))
    nccl, gloo = (replace(hw(ALPHA), collectives=library) for library in ("nccl", "gloo"))
    assert startup_time(schedule, nccl, mesh) == pytest.approx(7 * ALPHA + 2e9 / W)
    assert startup_time(schedule, gloo, mesh) == pytest.approx(3 * (ALPHA + 2e9 / W))
    assert comm_time(schedule, nccl, mesh)["backward"] == pytest.approx(3.5 + 14 * ALPHA)


def test_local_ops_startup_ops_and_groups_of_one_cost_nothing() -> None:
    assert op_time(op("scale"), LINK) == 0.0
    assert (
        op_time(Op("broadcast", State.PARAMS, "data", "startup", S, 2, 8, root=True), LINK) == 0.0
    )
    assert op_time(op("all_reduce", group=1), LINK) == 0.0


def test_comm_time_of_dp_is_its_one_all_reduce_in_backward() -> None:
    # Ψ = 1e9, bf16 gradients, N = 8: 2·7/8·2e9 bytes / 1e9 B/s + 14 α = 3.5 s + 14 µs.
    schedule = derive_schedule(
        _s("dp"), ModelSpec(10**9), Mesh.of(data=8), get_precision("mixed_adam")
    )
    assert comm_time(schedule, hw(ALPHA), "data=8") == pytest.approx(
        {"forward": 0.0, "backward": 3.5 + 14e-6, "step": 0.0}
    )


def test_zero3_costs_1_5_times_dp_in_seconds_too_when_nothing_overlaps() -> None:
    model, mesh, precision = ModelSpec(10**9), Mesh.of(data=8), get_precision("mixed_adam")
    dp, z3 = (
        sum(comm_time(derive_schedule(_s(s), model, mesh, precision), hw(), mesh).values())
        for s in ("dp", "zero3")
    )
    assert z3 / dp == pytest.approx(1.5)  # SPEC §4: 3Ψ vs 2Ψ; at α = 0 seconds are bytes / W


def test_offloaded_state_is_timed_on_the_host_link_and_refused_without_one() -> None:
    schedule = derive_schedule(
        _s("zero2_offload"), ModelSpec(10**9), Mesh.of(data=8), get_precision("mixed_adam")
    )
    host = Link(0.0, 25e9)
    # d2h of the 2 B gradient slice (2e9/8 bytes) and h2d of the 2 B parameter slice: 0.25e9 B each.
    network = sum(comm_time(schedule, hw(host=Link(0.0, 1e30)), "data=8").values())
    assert sum(comm_time(schedule, hw(host=host), "data=8").values()) - network == pytest.approx(
        2 * 0.25e9 / 25e9
    )
    with pytest.raises(PlacementError, match="no host link"):
        comm_time(schedule, hw(), "data=8")


def test_each_host_transfer_charges_the_host_links_latency_once() -> None:
    # Issue 23: a transfer runs on a "group" of one device; it is still one message (one α).
    schedule = derive_schedule(
        _s("zero2_offload"), ModelSpec(10**9), Mesh.of(data=8), get_precision("mixed_adam")
    )
    transfers = sum(1 for op in schedule.ops if op.op in ("h2d", "d2h") and not op.once)
    assert transfers == 2  # the gradient slice down, the parameter slice up
    slow, fast = (hw(host=Link(alpha, 25e9)) for alpha in (1e-3, 0.0))
    extra = sum(comm_time(schedule, slow, "data=8").values()) - sum(
        comm_time(schedule, fast, "data=8").values()
    )
    assert extra == pytest.approx(transfers * 1e-3)


# --- compute: 6Ψ per token ------------------------------------------------------------------------
def test_compute_is_2_psi_forward_and_4_psi_backward_per_token_8_psi_with_full_recomputation() -> (
    None
):
    t = compute_time(10**9, 1000, hw(flops=1e12))
    assert t == pytest.approx({"forward": 2.0, "backward": 4.0, "step": 0.0})  # 2e12 and 4e12 FLOPs
    full = compute_time(10**9, 1000, hw(flops=1e12), recompute="full")
    assert full["backward"] == pytest.approx(6.0) and sum(full.values()) == pytest.approx(8.0)
    assert compute_time(10**9, 1000, hw(flops=1e12), recompute="selective") == pytest.approx(t)


GPT3 = TransformerSpec(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200)  # Brown et al.


def test_attention_adds_12_l_h_s_per_token_palms_6n_plus_12lhqt() -> None:
    # Chowdhery et al. 2022 (PaLM), Appendix B: model FLOPs per token 6N + 12·L·H·Q·T; with
    # H·Q = h = 12288, T = s = 2048, L = 96: 12·96·12288·2048 = 28,991,029,248 (4 forward, 8
    # backward).
    attention = attention_flops_per_token(GPT3)
    assert attention == {"forward": 9_663_676_416, "backward": 19_327_352_832, "step": 0}
    assert model_flops_per_token(GPT3) == 6 * GPT3.psi + 28_991_029_248
    assert model_flops_per_token(10**9) == 6 * 10**9  # an abstract model has no sequence
    # Per pass: forward 2Ψ + 4Lhs, backward 4Ψ + 8Lhs; full recomputation replays the forward.
    full = flops_per_token(GPT3, "full")
    assert full["backward"] == 6 * GPT3.psi + 3 * 9_663_676_416


def test_megatron_counts_72_l_h2_times_1_plus_s_over_6h_plus_v_over_12hl_per_token() -> None:
    # Narayanan et al. 2021, eq. 3 without recomputation (3 passes, not 4), as Korthikanti et al.
    # 2022 eq. 7 and Megatron-LM's num_floating_point_operations count: per token
    # 72·L·h²·(1 + s/(6h) + V/(12hL)) for f = 4h; the same attention term as PaLM's.
    L, h, s, v = 96, 12288, 2048, 51200
    expected = Fraction(72 * L * h * h) * (1 + Fraction(s, 6 * h) + Fraction(v, 12 * h * L))
    assert megatron_flops_per_token(GPT3) == expected
    # 6Ψ also counts biases, norms and position embeddings: 0.02% more for GPT-3 175B.
    assert model_flops_per_token(GPT3) / megatron_flops_per_token(GPT3) == pytest.approx(
        1.0002, abs=1e-4
    )


def test_selective_recomputation_replays_4_b_s2_h_per_layer_a_third_of_korthikantis_2_7_percent():
    # Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    # §4.2 and Appendix A: selective recomputation replays QKᵀ (2·b·s²·h) and attention over V
    # (2·b·s²·h) per layer: 4·L·h·s FLOPs per token, 0.90% of GPT-3 175B's model FLOPs.
    replayed = flops_per_token(GPT3, "selective")["backward"] - flops_per_token(GPT3)["backward"]
    assert replayed == 4 * 96 * 12288 * 2048
    ours = replayed / megatron_flops_per_token(GPT3)
    assert ours == pytest.approx(0.00898, abs=1e-5)
    # The paper's "2.7% FLOPs overhead" for GPT-3 is its eq. 8 over eq. 7: hardware FLOPs
    # 72BLsh²(1 + s/(3h) + V/(12hL)) against model FLOPs 72BLsh²(1 + s/(6h) + V/(12hL)). Its
    # s/(3h) adds 12·b·s²·h per layer, three times the replayed forward the paper describes.
    s, h, tail = 2048, 12288, 51200 / (12 * 12288 * 96)
    paper = (1 + s / (3 * h) + tail) / (1 + s / (6 * h) + tail) - 1
    assert paper == pytest.approx(0.027, abs=5e-4)  # 2.69%: the published "2.7%"
    assert ours == pytest.approx(paper / 3)


# --- overlap models and the step ------------------------------------------------------------------
def test_none_exposes_everything_and_per_pass_only_what_a_pass_cannot_hide() -> None:
    compute, comm = (
        {"forward": 2.0, "backward": 4.0, "step": 0.0},
        {"forward": 1.0, "backward": 5.0, "step": 0.5},
    )
    assert exposed(compute, comm, "none") == pytest.approx(6.5)
    assert exposed(compute, comm, "per_pass") == pytest.approx(
        1.0 + 0.5
    )  # backward's excess, step's all-gather
    with pytest.raises(PlacementError, match="unknown overlap model 'some'"):
        exposed(compute, comm, "some")


def test_step_time_adds_compute_exposed_comm_and_the_pipeline_bubble() -> None:
    model = TransformerSpec(layers=8, hidden=64, heads=4, seq=16, vocab=100)
    st = step_time("pp", model, "pipeline=4", "mixed_adam", hw(), micro_batches=8)
    assert st.bubble_s == pytest.approx(3 / 8 * st.compute_s)  # (p-1)/m of the ideal time
    assert st.total_s == pytest.approx(st.compute_s + st.comm_s + st.bubble_s)
    # The transformer fixes the tokens: m·b·s/p = 8·1·16/4 = 32 per device, each 6Ψ FLOPs plus
    # attention's 12·L·h·s = 12·8·64·16 = 98,304, plus, at the pace of the last stage, the logit
    # layer the 3 other stages leave to it: 3 · 6·V·h = 3 · 6·100·64 = 115,200.
    assert st.compute_s == pytest.approx((6 * model.psi + 98_304 + 115_200) * 32 / 1e12)
    with pytest.raises(PlacementError, match=r"m·b·s/\(t·p\) = 8·1·16/4 = 32"):
        step_time(
            "pp", model, "pipeline=4", "mixed_adam", hw(), tokens_per_device=100, micro_batches=8
        )


def test_tensor_parallel_collectives_stay_on_the_critical_path_unless_tp_comm_overlap() -> None:
    # SPEC §9: the matmul after Megatron's g (forward) or f (backward) all-reduce needs its result,
    # so per_pass hides the data axis' gradient all-reduce under backward but not the tensor
    # axis' all-reduces; "per_pass+tp" (Megatron's --tp-comm-overlap) hides those too.
    model = TransformerSpec(layers=4, hidden=1024, heads=8, seq=512, vocab=100)
    mesh = Mesh.of(data=2, tensor=2)
    schedule = derive_schedule(_s("dp×tp"), model, mesh, get_precision("mixed_adam"))
    tp = sum(comm_time(schedule, hw(), mesh, critical=True).values())
    # 4 layers × 2 blocks × 2 passes all-reduce b·s·h = 524,288 bf16 values, (2-1)/2·2 of 1 MiB
    assert tp == pytest.approx(16 * 2**20 / W)
    times = {
        o: step_time("dp×tp", model, mesh, "mixed_adam", hw(flops=1e11), overlap=o)
        for o in ("none", "per_pass", "per_pass+tp")
    }
    assert times["per_pass"].compute_s > times["per_pass"].comm_s  # compute could hide it all
    assert times["none"].exposed_comm_s == pytest.approx(times["none"].comm_s)
    assert times["per_pass"].exposed_comm_s == pytest.approx(tp)  # the data all-reduce hides
    assert times["per_pass+tp"].exposed_comm_s == 0.0
    assert on_critical_path(next(o for o in schedule.ops if o.axis == "tensor"))
    assert not on_critical_path(next(o for o in schedule.ops if o.axis == "data"))


def test_sequence_parallelism_gathers_each_blocks_input_again_in_backward() -> None:
    # SPEC §9 (Korthikanti et al. 2022 §4.2.2): Megatron keeps only its slice of the sequence and
    # all-gathers the block input again for the column-parallel weight gradient. Per block:
    # forward all-gather + reduce-scatter; backward two all-gathers + a reduce-scatter.
    model = TransformerSpec(layers=2, hidden=64, heads=4, seq=16, vocab=100)
    sp = _s("tp").with_(name="tp+sp", sequence_parallel=True)
    schedule = derive_schedule(sp, model, Mesh.of(tensor=4), get_precision("mixed_adam"))
    tensor = [o for o in schedule.ops if o.axis == "tensor" and o.state is State.ACTIVATIONS]
    kinds = [(o.phase, o.op) for o in tensor]
    blocks = 2 * 2  # two layers of two blocks
    assert kinds.count(("forward", "all_gather")) == kinds.count(("forward", "reduce_scatter"))
    assert kinds.count(("forward", "all_gather")) == blocks
    assert kinds.count(("backward", "all_gather")) == 2 * blocks
    assert kinds.count(("backward", "reduce_scatter")) == blocks
    # each moves (t-1)/t of b·s·h = 1024 bf16 values: 3/4 · 2048 B
    assert {o.ring_bytes for o in tensor} == {1536}


def test_tp_times_pp_sends_one_tensor_ranks_chunk_and_gathers_on_the_other_side() -> None:
    # SPEC §9: under TP × PP each of the t tensor ranks sends b·s·h/t of the boundary activation
    # (Megatron's scatter/gather, Narayanan et al. 2021 §4.1); the receiving ranks all-gather the
    # chunks on tensor. With sequence parallelism the activation is already split: no gather.
    model = TransformerSpec(layers=4, hidden=64, heads=4, seq=16, vocab=100)  # b·s·h = 1024
    mesh, precision = Mesh.of(data=1, tensor=2, pipeline=2), get_precision("mixed_adam")
    tp_pp = _s("zero1×tp×pp").with_(micro_batches=2)
    last = next(r for r in range(4) if mesh.coords(r)["pipeline"] == 1)

    def boundary(strategy, rank: int) -> list[Op]:
        ops = derive_schedule(strategy, model, mesh, precision, rank).ops
        return [o for o in ops if o.axis == "pipeline" or "boundary" in o.why]

    sent = [o for o in boundary(tp_pp, 0) if o.op == "send"]
    assert len(sent) == 2 and {o.payload_bytes for o in sent} == {1024 // 2 * 2}  # bsh/t, bf16
    gathers = [o for o in boundary(tp_pp, last) if o.op == "all_gather"]
    assert len(gathers) == 2 and {(o.axis, o.payload_bytes) for o in gathers} == {("tensor", 2048)}
    sp = tp_pp.with_(sequence_parallel=True)
    assert sorted(o.op for o in boundary(sp, last)) == ["recv", "recv", "send", "send"]


# --- the compute-bound threshold ------------------------------------------------------------------
@pytest.mark.parametrize("n", [8, 64])
def test_dp_threshold_is_two_thirds_f_over_w_without_overlap_and_f_over_w_per_pass(n: int) -> None:
    h = hw(flops=4e14, bandwidth=1e11)  # F/W = 4000 tokens
    shrink = (n - 1) / n  # a ring's (N-1)/N
    assert compute_bound_tokens(
        "dp", ModelSpec(10**9), Mesh.of(data=n), "mixed_adam", h, "none"
    ) == pytest.approx(2 / 3 * 4000 * shrink)
    assert compute_bound_tokens(
        "dp", ModelSpec(10**9), Mesh.of(data=n), "mixed_adam", h, "per_pass"
    ) == pytest.approx(4000 * shrink)


@pytest.mark.parametrize("n", [8, 64])
def test_zero3_threshold_is_f_over_w_under_both_models_so_per_pass_hides_its_extra_half(
    n: int,
) -> None:
    h = hw(flops=4e14, bandwidth=1e11)
    for overlap in ("none", "per_pass"):
        assert compute_bound_tokens(
            "zero3", ModelSpec(10**9), Mesh.of(data=n), "mixed_adam", h, overlap
        ) == pytest.approx(4000 * (n - 1) / n)
    dp = compute_bound_tokens("dp", ModelSpec(10**9), Mesh.of(data=n), "mixed_adam", h, "per_pass")
    z3 = compute_bound_tokens(
        "zero3", ModelSpec(10**9), Mesh.of(data=n), "mixed_adam", h, "per_pass"
    )
    assert z3 == pytest.approx(dp)  # ZeRO-3's 1.5× volume costs nothing more, per pass


def test_latency_adds_alpha_steps_to_the_threshold() -> None:
    # dp per_pass: 4Ψ·T/F >= 2(N-1)α + 2(N-1)/N·2Ψ/W.
    psi, n, f, w, a = 10**9, 8, 4e14, 1e11, 1e-5
    expected = (14 * a + 2 * 7 / 8 * 2 * psi / w) * f / (4 * psi)
    assert compute_bound_tokens(
        "dp", ModelSpec(psi), Mesh.of(data=n), "mixed_adam", hw(a, w, f), "per_pass"
    ) == pytest.approx(expected)


def test_zero1_and_zero2_hide_reduce_scatter_at_half_the_dp_threshold_not_the_step_gather() -> None:
    h = hw(flops=4e14, bandwidth=1e11)
    for name in ("zero1", "zero2"):
        t = compute_bound_tokens(
            name, ModelSpec(10**9), Mesh.of(data=8), "mixed_adam", h, "per_pass"
        )
        assert t == pytest.approx(2000 * 7 / 8)
        st = step_time(
            name,
            ModelSpec(10**9),
            "data=8",
            "mixed_adam",
            h,
            tokens_per_device=10 * t,
            overlap="per_pass",
        )
        assert st.exposed_comm_s == pytest.approx(
            7 / 8 * 2e9 / 1e11
        )  # the parameter all-gather after the step


def test_at_the_threshold_the_step_is_exactly_compute_bound() -> None:
    h = hw(flops=4e14, bandwidth=1e11)
    for name in ("dp", "zero3"):
        t = compute_bound_tokens(
            name, ModelSpec(10**9), Mesh.of(data=8), "mixed_adam", h, "per_pass"
        )
        above = step_time(name, ModelSpec(10**9), "data=8", "mixed_adam", h, t * 1.001, "per_pass")
        below = step_time(name, ModelSpec(10**9), "data=8", "mixed_adam", h, t * 0.9, "per_pass")
        assert above.exposed_comm_s == 0.0 and below.exposed_comm_s > 0.0


def test_tensor_parallelism_is_compute_bound_by_width_not_tokens() -> None:
    model = TransformerSpec(layers=2, hidden=8192, heads=64, seq=2048, vocab=100)
    h100 = HARDWARE["h100-nvlink-ib"]
    # (t-1)/3 · F/W = 7/3 · 395.6e12/450e9 = 2051.3: h = 8192 is 4x wider, so comm is ~1/4 of
    # compute.
    got = tp_compute_bound(model, 8, h100)
    assert got["h_needed"] == pytest.approx(7 / 3 * 395.6e12 / 450e9)
    assert got["ratio"] == pytest.approx(2051.26 / 8192, rel=1e-4)


def test_threshold_refuses_communication_that_grows_with_tokens() -> None:
    model = TransformerSpec(layers=2, hidden=64, heads=4, seq=16, vocab=100)
    with pytest.raises(PlacementError, match="tp_compute_bound"):
        compute_bound_tokens("tp", model, "tensor=2", "mixed_adam", hw())


# --- published reference points -------------------------------------------------------------------
def test_jax_scaling_book_data_parallel_threshold_for_tpu_v5p_is_2550_tokens_per_chip() -> None:
    # Austin et al., "How to Scale Your Model" (2025), Part 5 "Training", Data Parallelism:
    # "For TPUv5p, C=4.6e14 and W=2 * 9e10 for 1D data parallelism over ICI, so our batch size
    # per chip must be at least 2,550 to avoid being communication-bound." Their W is the
    # bidirectional ICI bandwidth, the bytes per second one chip moves around a ring -- our W.
    # The book counts the backward pass only (forward has no communication): our per_pass model.
    # Tolerance 0.3%: 4.6e14 / 1.8e11 = 2555.6, which the book rounds to 2,550 (0.22%); N = 8960
    # chips (a v5p pod) makes the ring's (N-1)/N = 0.99989.
    v5p = hw(alpha=0.0, bandwidth=2 * 9e10, flops=4.6e14)
    dp = compute_bound_tokens(
        "dp", ModelSpec(10**9), Mesh.of(data=8960), "mixed_adam", v5p, "per_pass"
    )
    assert dp == pytest.approx(2550, rel=3e-3)
    # Same section, FSDP: "we are compute bound when B/X < C/W = 2550 ... the same as data
    # parallelism".
    fsdp = compute_bound_tokens(
        "zero3", ModelSpec(10**9), Mesh.of(data=8960), "mixed_adam", v5p, "per_pass"
    )
    assert fsdp == pytest.approx(2550, rel=3e-3)


def test_jax_scaling_book_llama3_70b_trains_in_about_17_days() -> None:
    # Same section: "For LLaMA-3 70B, which was trained for approximately 6.3e24 (15e12 * 70e9 * 6)
    # FLOPs, we could split a batch of 16M tokens over roughly 16e6 / (2550 / 3) = 18,823 chips
    # ..., each with 4.59e14 FLOPs running at 50% peak FLOPs utilization (often called MFU), and
    # train it in approximately 17 days." Ours: 16.88 days. Tolerance 3%: "approximately 17 days"
    # is rounded to whole days (±0.5 day).
    chip = hw(flops=0.5 * 4.59e14)
    seconds = sum(compute_time(70e9, 15e12 / 18_823, chip).values())
    assert seconds / 86_400 == pytest.approx(17, rel=0.03)


@pytest.mark.parametrize(
    "psi, tokens, gpus, flops, days",
    [
        (175e9, 300e9, 1024, 140e12, 34),  # GPT-3 on 1024 A100s at 140 teraFLOP/s: "about 34 days"
        (
            1008e9,
            450e9,
            3072,
            163e12,
            84,
        ),  # the 1T model (1008B in Table 1) on 3072 A100s: "about 84 days"
    ],
)
def test_megatron_end_to_end_training_time_8tp_over_nx(
    psi: float, tokens: float, gpus: int, flops: float, days: int
) -> None:
    # Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
    # Megatron-LM" (SC'21), §5.1: training time ≈ 8TP/(nX) -- 8 because their runs recompute
    # activations (full recomputation: 8Ψ FLOPs per token, SPEC §9). Tolerance 1.5%: the paper
    # rounds to whole days (±0.5 of 34).
    seconds = sum(compute_time(int(psi), tokens / gpus, hw(flops=flops), recompute="full").values())
    assert seconds / 86_400 == pytest.approx(days, rel=0.015)


def test_presets_cite_their_sources_and_put_8_gpus_on_nvlink_in_a_node() -> None:
    h100 = HARDWARE["h100-nvlink-ib"]
    # DGX H100: 8 GPUs per node on NVLink 4 (450 GB/s each way), one NDR NIC per GPU (50 GB/s).
    assert h100.gpus_per_node == 8
    assert h100.node_link.bandwidth == 450e9 and h100.network_link == IB_NDR
    assert h100.flops == pytest.approx(0.4 * 989e12, rel=1e-3) and "MFU" in h100.source
    assert HARDWARE["a100-nvlink-ib"].network_link.bandwidth == 25e9  # type: ignore[union-attr]
    assert h100.memory_bytes == 80 * 2**30  # "80GB" of HBM is 80 GiB
    assert HARDWARE["h100-nvlink"].gpus_per_node is None  # every device in one NVLink domain
    with pytest.raises(PlacementError, match="give gpus_per_node and network_link together"):
        Hardware("x", 1e12, 10**9, LINK, gpus_per_node=8)
    with pytest.raises(PlacementError, match="faster than its node link"):
        Hardware("x", 1e12, 10**9, LINK, Link(0.0, 2 * W), gpus_per_node=8)
    with pytest.raises(PlacementError, match="bandwidth is bytes per second > 0"):
        Link(0.0, 0.0)


def _s(name: str):
    from placement_edu import get_strategy

    return get_strategy(name)


def test_a_pipeline_runs_at_the_pace_of_its_last_stage_which_holds_the_logit_layer() -> None:
    # Megatron-LM puts the output layer on the last stage: besides its L/p layers it computes the
    # logits (2·V·h FLOPs a token forward, 4·V·h backward) for the whole pipeline, so it does
    # (p - 1) × those FLOPs more per token of the device than an even share.
    model = TransformerSpec(layers=8, hidden=1024, heads=16, seq=2048, vocab=50_000)
    hw = replace(HARDWARE["h100-nvlink-ib"], flops=1e15)
    assert logit_flops_per_token(model) == {
        "forward": 102_400_000,  # 2 · 50,000 · 1,024
        "backward": 204_800_000,
        "step": 0,
    }
    even, last = compute_time(model, 4096, hw), compute_time(model, 4096, hw, stages=4)
    assert last["forward"] - even["forward"] == pytest.approx(3 * 102_400_000 * 4096 / 1e15)
    assert last["backward"] - even["backward"] == pytest.approx(3 * 204_800_000 * 4096 / 1e15)
    # recomputation replays layers, never the logits: the same extra under full recomputation
    full = compute_time(model, 4096, hw, "full", stages=4)
    assert full["backward"] - compute_time(model, 4096, hw, "full")["backward"] == pytest.approx(
        3 * 204_800_000 * 4096 / 1e15
    )
    # an abstract Ψ has no vocabulary: no stage is slower than another
    assert compute_time(1e9, 4096, hw, stages=4) == compute_time(1e9, 4096, hw)
    # step_time prices rank 0 of the slowest stage's pace on a pipeline mesh
    on_pipeline = step_time("pp", model, "pipeline=4", "mixed_adam", hw)
    tokens = tokens_of(model, get_strategy("pp"), Mesh.parse("pipeline=4"))
    paced = compute_time(model, tokens, hw, stages=4)
    assert on_pipeline.compute_s == pytest.approx(sum(paced.values()), rel=1e-12)
    # a split that counts the logit layer as work (Strategy.balanced_stages) spreads it evenly
    balanced = get_strategy("pp").with_(balanced_stages=True)
    even_step = step_time(balanced, model, "pipeline=4", "mixed_adam", hw)
    assert even_step.compute_s == pytest.approx(
        sum(compute_time(model, tokens, hw).values()), rel=1e-12
    )
    assert even_step.compute_s < on_pipeline.compute_s
