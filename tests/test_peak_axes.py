"""fit on a tensor axis (issue 39, item 1): the measured one-device profile scaled by the placement
(``placement_edu.peak_axes``) against PyTorch's ``MemTracker`` on tensor rank 0 of a fake process
group, the blocks split by ``parallelize_module`` (``runtime/axes/axis_tracker.py``): every state
equal
to the byte, the activations and both peaks within 2 % (they came out within 0.01 % or 0.8 %:
docs/peak.md). GPT-2 at its 12 blocks, Llama shapes on their widths at ``BLOCKS`` blocks."""

from __future__ import annotations

import json
import math

import pytest

from placement_edu.architectures import REFERENCE_SEQ, get_architecture
from placement_edu.errors import PlacementError
from placement_edu.mesh import Mesh
from placement_edu.peak_axes import RECEIVE_BUFFERS, derive_on_mesh, tensor_rank
from placement_edu.runtime.axes.axis_tracker import measure_here
from placement_edu.runtime.measurement.peak_tracker import states
from placement_edu.runtime.measurement.profiles import get_profile
from tests.tracker_cases import BLOCKS
from placement_edu.step_case import StepCase

pytestmark = pytest.mark.runtime


def _compare(model: str, t: int, sp: bool, blocks: int | None, **options: str) -> None:
    arch = get_architecture(model)
    arch = arch.with_(layers=blocks) if blocks else arch
    seq = REFERENCE_SEQ[model]
    recompute, attention = options.get("recompute", "none"), options.get("attention", "eager")
    case = StepCase(arch, 1, seq, "fp32", attention, recompute)
    profile, _ = get_profile(case)
    predicted = derive_on_mesh(arch, profile, Mesh.of(tensor=t), 0, "fp32", sequence_parallel=sp)
    raw = measure_here(case, tensor=t, sequence_parallel=sp)
    measured = states(raw, False)
    assert (predicted.params, predicted.grads, predicted.optimizer) == (
        measured["params"],
        measured["grads"],
        measured["optimizer"],
    )
    for ours, theirs in (
        (predicted.activations, measured["activations"]),
        (predicted.forward_backward_peak.total, measured["forward_backward_peak"]),
        (predicted.step_peak.total, measured["step_peak"]),
    ):
        assert ours == pytest.approx(theirs, rel=0.02)


@pytest.mark.parametrize("t, sp", [(2, False), (2, True), (4, False), (4, True)])
def test_gpt2_under_tensor_parallelism_matches_memtracker(t: int, sp: bool) -> None:
    _compare("gpt2", t, sp, None)


@pytest.mark.parametrize("model, t, sp", [("llama-1b", 2, False), ("llama-1b", 4, True)])
def test_llama_under_tensor_parallelism_matches_memtracker(model: str, t: int, sp: bool) -> None:
    _compare(model, t, sp, BLOCKS)


def test_full_recomputation_and_sdpa_under_tensor_parallelism_match_too() -> None:
    _compare("llama-1b", 2, True, BLOCKS, recompute="full")
    _compare("llama-8b", 2, False, 2, attention="sdpa")


def test_a_tensor_rank_holds_the_pairs_split_and_the_rest_whole() -> None:
    # GPT-2's block at t = 2, by hand: norms 4·768 whole; c_attn 768 x 1152 + 1152; c_proj
    # 384 x 768 + 768 (bias whole); c_fc 768 x 1536 + 1536; mlp.c_proj 1536 x 768 + 768.
    rank = tensor_rank("gpt2", 2)
    block = sum(math.prod(shape) for _, shape in rank.block_tensors())
    by_hand = 3072 + 768 * 1152 + 1152 + 384 * 768 + 768 + 768 * 1536 + 1536 + 1536 * 768 + 768
    assert block == by_hand == 3_546_240
    with pytest.raises(PlacementError, match="heads"):
        tensor_rank("llama-1b", 16)  # 8 key/value heads: 16 ranks cannot each hold whole ones


def test_fit_verify_on_a_tensor_mesh_prints_the_tracker_beside(capsys) -> None:
    from placement_edu.cli import main

    argv = (
        "fit --model gpt2 --mesh tensor=2 --sequence-parallel --precision fp32 --attention eager "
        "--json --verify"
    ).split()
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mesh"] == "tensor=2" and out["sequence_parallel"]
    for key in ("params", "grads", "optimizer"):
        assert out["memory"][key] == out["measured"]["memory"][key]
    assert out["peak_bytes"] == pytest.approx(out["measured"]["peak_bytes"], rel=0.02)


def test_hsdp_s_replica_axis_leaves_a_rank_what_its_data_group_gives_it() -> None:
    # replica=2,data=4: rank 5 is data index 1 of its group of 4 (tensor innermost, then data,
    # replica outermost), so it holds exactly what FSDP2 over 4 gives rank 1.
    from placement_edu.peak import derive

    profile, _ = get_profile(StepCase.of("gpt2", 1, 1024, "bf16", "sdpa", "none"))
    hsdp = derive_on_mesh("gpt2", profile, Mesh.of(replica=2, data=4), 5, "fsdp2_bf16")
    assert hsdp == derive("gpt2", profile, 4, 1, "fsdp2_bf16")


# --- pipeline (issue 39, item 1 (b)) ------------------------------------------------------------
def _compare_pipeline(
    model: str, blocks: int | None, p: int, rank: int, schedule: str, v: int = 1, **options: str
) -> None:
    """``derive_pipeline`` against ``MemTracker`` on pipeline rank ``rank``: its stages in
    ``torch.distributed.pipelining`` on a fake group of p ranks, run by torch's schedule over 2p
    micro-batches (``axis_tracker.pipeline_measure``)."""
    from placement_edu.peak_axes import PipelineRank, derive_pipeline
    from placement_edu.runtime.axes.axis_tracker import pipeline_measure

    arch = get_architecture(model)
    arch = arch.with_(layers=blocks) if blocks else arch
    seq, attention = REFERENCE_SEQ[model], options.get("attention", "eager")
    case = StepCase(arch, 1, seq, "fp32", attention)
    profile, _ = get_profile(case)
    where = PipelineRank(p, rank, schedule, v)
    predicted = derive_pipeline(arch, profile, where)
    raw = measure_here(case, pipeline_measure, pipeline=where)
    measured = states(raw, False)
    assert (predicted.params, predicted.grads, predicted.optimizer) == (
        measured["params"],
        measured["grads"],
        measured["optimizer"],
    )
    # the ids (first stage), the labels (last) and the receive buffers: the tracker's "Other"
    receive = predicted.step_peak.terms[RECEIVE_BUFFERS]
    assert (
        predicted.inputs + receive
        == raw["after_step"]["Other"]
        == predicted.inputs + raw["recv_buffers"]
    )
    for ours, theirs in (
        (predicted.activations, measured["activations"]),
        (predicted.forward_backward_peak.total, measured["forward_backward_peak"]),
        (predicted.step_peak.total, measured["step_peak"]),
    ):
        assert ours == pytest.approx(theirs, rel=0.02)


@pytest.mark.parametrize(
    "p, rank, schedule, v",
    [
        # 2 and 4 stages, 1F1B and interleaved, a first and a last rank; every rank of each is
        # benchmarks/bench_pipeline_tracker.py's (the suite's minutes on two cores are CI's)
        (2, 0, "1f1b", 1),
        (4, 3, "1f1b", 1),
        (2, 1, "interleaved", 2),
        (4, 0, "interleaved", 2),
    ],
)
def test_gpt2_pipeline_ranks_match_memtracker(p: int, rank: int, schedule: str, v: int) -> None:
    _compare_pipeline("gpt2", None, p, rank, schedule, v)


@pytest.mark.parametrize(
    "blocks, p, rank, schedule, v",
    [
        (BLOCKS, 2, 0, "1f1b", 1),
        (BLOCKS, 4, 2, "1f1b", 1),  # (a middle stage)
        (BLOCKS, 2, 1, "interleaved", 2),
        (8, 4, 3, "interleaved", 2),
        (BLOCKS, 2, 0, "gpipe", 1),
        # zero bubble (torch's ScheduleInterleavedZeroBubble, one stage per rank) on the first
        # rank: on a later one MemTracker's module hooks cannot follow the input-gradient pass
        # (autograd.grad on the received leaf: "A leaf node was passed to
        # _will_engine_execute_node"), so it is predicted there, not tracked
        (BLOCKS, 4, 0, "zero_bubble", 1),
    ],
)
def test_llama_pipeline_ranks_match_memtracker(
    blocks: int, p: int, rank: int, schedule: str, v: int
) -> None:
    _compare_pipeline("llama-1b", blocks, p, rank, schedule, v)


def test_llama_8b_sdpa_pipeline_matches_memtracker() -> None:
    _compare_pipeline("llama-8b", BLOCKS, 2, 0, "1f1b", attention="sdpa")
    _compare_pipeline("llama-8b", BLOCKS, 2, 1, "interleaved", 2, attention="sdpa")


def test_a_stage_holds_its_slice_and_the_schedule_s_micro_batches() -> None:
    from placement_edu.peak_axes import IN_FLIGHT, PipelineRank, derive_pipeline, pipeline_chunks
    from placement_edu.schedule.pipeline import looped_warmup

    profile, _ = get_profile(StepCase.of("gpt2", 1, 1024, "fp32", "eager", "none"))
    # GPT-2's first stage of 2, by hand: wte 50257 x 768, wpe 1024 x 768, blocks 0-5 of 7,087,872
    # parameters each; its last stage: blocks 6-11, ln_f (2 x 768) and its own copy of the head.
    first, last = (derive_pipeline("gpt2", profile, PipelineRank(2, r)) for r in (0, 1))
    assert first.params == 4 * (50257 * 768 + 1024 * 768 + 6 * 7_087_872) == 327_644_160
    assert last.params == 4 * (6 * 7_087_872 + 2 * 768 + 50257 * 768) == 324_504_576
    # 1F1B: stage i of p has p - i micro-batches in flight at its peak (Narayanan et al. 2021)
    for p in (2, 4):
        for rank in range(p):
            (chunk,) = pipeline_chunks(get_architecture("gpt2"), profile, p, rank)
            peak = derive_pipeline("gpt2", profile, PipelineRank(p, rank, "1f1b", micro_batches=8))
            assert peak.peak.terms[IN_FLIGHT] == (p - rank) * chunk.keep
    # interleaved: rank 0 holds torch's warm-up forwards + 1 chunks, (v-1)p + 2(p-1) + 1
    peak = derive_pipeline("gpt2", profile, PipelineRank(4, 0, "interleaved", 2, 8))
    chunks = pipeline_chunks(get_architecture("gpt2"), profile, 4, 0, 2)
    flight = peak.forward_backward_peak.terms[IN_FLIGHT]
    counts = [
        (n0, n1)
        for n0 in range(9)
        for n1 in range(9)
        if n0 * chunks[0].keep + n1 * chunks[1].keep == flight
    ]
    assert [n0 + n1 for n0, n1 in counts] == [looped_warmup(4, 0, 8, 2) + 1] == [11]


def test_a_pipeline_is_refused_in_one_line_where_it_is_not_priced() -> None:
    profile, _ = get_profile(StepCase.of("gpt2", 1, 1024, "fp32", "eager", "none"))
    with pytest.raises(PlacementError, match="pipeline axis on its own"):
        derive_on_mesh("gpt2", profile, Mesh.of(data=2, pipeline=2), 0, "fp32")
    bf16, _ = get_profile(StepCase.of("gpt2", 1, 1024, "bf16", "sdpa", "none"))
    with pytest.raises(PlacementError, match="give the fp32 precision"):
        derive_on_mesh("gpt2", bf16, Mesh.of(pipeline=2), 0, "fsdp2_bf16")


def test_fit_verify_on_a_pipeline_prints_the_tracker_beside(capsys) -> None:
    from placement_edu.cli import main

    argv = (
        "fit --model llama-1b --mesh pipeline=2 --rank 1 --schedule interleaved:2 "
        "--precision fp32 --attention eager --seq 512 --json --verify"
    ).split()
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["schedule"], out["micro_batches"]) == ("interleaved:2", 4)
    for key in ("params", "grads", "optimizer"):
        assert out["memory"][key] == out["measured"]["memory"][key]
    assert out["peak_bytes"] == pytest.approx(out["measured"]["peak_bytes"], rel=0.02)


# --- context and expert axes (issue 39, item 1 (c)) ---------------------------------------------
@pytest.mark.parametrize("attention", ["ring", "ulysses"])
def test_a_context_rank_adds_the_long_context_buffers_to_its_blocks(attention: str) -> None:
    # Llama-3-8B at s = 8192 over c = 4 (bf16, SDPA): the rank's profile is measured at its
    # 2048 tokens; its blocks carry the K/V (ring: 2 chunks of 2·(s/c)·h_kv, 4 in backward) or
    # Q/K/V (Ulysses: (s/c)(h + 2h_kv), twice in backward) buffers, by hand and as the long-context
    # notebook's figure (long_context.context_costs) has them.
    from placement_edu.long_context import context_costs, long_context_model
    from placement_edu.peak_axes import CONTEXT_BUFFERS, context_seq

    assert context_seq(8192, 4) == 2048
    profile, _ = get_profile(StepCase.of("llama-8b", 1, 2048, "bf16", "sdpa", "none"))
    mesh = Mesh.of(data=2, context=4)
    peak = derive_on_mesh("llama-8b", profile, mesh, 0, "fsdp2_bf16", context_attention=attention)
    h, h_kv = 4096, 8 * 128
    by_hand = 2 * (2 * 2048 * h_kv) * 2 if attention == "ring" else 2048 * (h + 2 * h_kv) * 2
    assert by_hand == context_costs(long_context_model(8192), 4, attention).buffers
    for e in peak.events:
        expected = by_hand * (2 if e.phase == "backward" else 1) if "block" in e.name else 0
        assert e.terms.get(CONTEXT_BUFFERS, 0) == expected
    plain = derive_on_mesh("llama-8b", profile, Mesh.of(data=2), 0, "fsdp2_bf16")
    assert (peak.params, peak.grads, peak.optimizer) == (plain.params, plain.grads, plain.optimizer)


def test_context_and_expert_axes_refuse_in_one_line_what_they_cannot_price() -> None:
    from placement_edu.peak_axes import context_seq

    with pytest.raises(PlacementError, match="does not divide by 3"):
        context_seq(1024, 3)
    eager, _ = get_profile(StepCase.of("gpt2", 1, 1024, "fp32", "eager", "none"))
    with pytest.raises(PlacementError, match="give sdpa"):
        derive_on_mesh("gpt2", eager, Mesh.of(context=2), 0, "fp32")
    sdpa, _ = get_profile(StepCase.of("gpt2", 1, 1024, "bf16", "sdpa", "none"))
    with pytest.raises(PlacementError, match="Ulysses"):  # 12 heads over c = 8
        derive_on_mesh(
            "gpt2", sdpa, Mesh.of(context=8), 0, "fsdp2_bf16", context_attention="ulysses"
        )
    with pytest.raises(PlacementError, match="dense model"):
        derive_on_mesh("gpt2", sdpa, Mesh.of(data=2, expert=2), 0, "fsdp2_bf16")


@pytest.mark.parametrize(
    "argv, named",
    [
        ("--devices 2 --schedule gpipe", "--schedule applies to a pipeline axis"),
        # (--micro-batches without a pipeline is gradient accumulation: test_mesh_tracker.py)
        (
            "--mesh tensor=2 --micro-batches 2 --verify",
            "a data axis of 2 or more: give --devices N",
        ),
        ("--devices 2 --context-attention ulysses", "--context-attention applies to a context"),
        ("--mesh expert=2", "dense model"),
        ("--mesh data=2,pipeline=2 --precision fp32", "pipeline axis on its own"),
    ],
)
def test_fit_refuses_in_one_line_an_axis_flag_it_cannot_honour(
    capsys, argv: str, named: str
) -> None:
    from placement_edu.cli import main

    assert main(["fit", "--model", "gpt2", *argv.split()]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and named in err, err


def test_fit_on_a_pipeline_offers_only_the_alternatives_its_mesh_prices(capsys) -> None:
    # bf16 and SDPA are not priced on a pipeline stage (fp32, one device per stage): they are not
    # offered, and the answer is not refused for them; full recomputation is, with its own peak
    from placement_edu.cli import main

    argv = "fit --model gpt2 --mesh pipeline=2 --precision fp32 --attention eager --memory-gb 4"
    assert main([*argv.split(), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not out["fits"] and out["peak_bytes"] > 4e9
    offered = {(fix["flag"], fix["value"]): fix["peak_bytes"] for fix in out["would_fit_with"]}
    assert ("--precision", "fsdp2_bf16") not in offered and ("--recompute", "full") in offered
