"""PyTorch's own implementations predicted byte for byte and op for op (issue 9).

Each launch trains the MLP 64-128-128-16 (float64, seed 0) with DDP, ZeroRedundancyOptimizer under
DDP, FSDP2 with reshard_after_forward True / False / None, and torch.distributed.pipelining's GPipe,
1F1B and zero bubble (one stage per rank, 8 micro-batches) and interleaved 1F1B (two stages per
rank), and the transformer toy with DTensor tensor
parallelism (where N divides its 8 heads), on N real gloo ranks; every rank's state bytes
and its ledger of collectives must equal the core's prediction, and its parameters a single
process's within float64 rounding.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from placement_edu.implementations import (
    IMPLEMENTATIONS,
    TorchRefConfig,
    ddp_buckets,
    fsdp2_order,
    predict,
    zero_redundancy_broadcasts,
)

pytestmark = pytest.mark.runtime

MLP = "mlp:64,128,128,16"


def model_for(impl: str, n: int) -> str:
    """The MLP, the transformer toy for tensor parallelism, and for a pipeline of more stages than
    the MLP's 3 Linears, one Linear per stage (128 wide, so every stage boundary is the same
    size). Interleaved: 2n stages on n ranks, rank r holding Linears r and r + n -- as many bytes
    as the core's contiguous split (its first and last Linear where the core puts them, the middle
    ones all 128 × 128)."""
    if impl == "dtensor_tp":
        return "transformer"
    stages = n * IMPLEMENTATIONS[impl].virtual_stages
    if impl.startswith("pipelining") and stages > 3:
        return "mlp:64," + "128," * (stages - 1) + "16"
    return MLP


@pytest.fixture(scope="module", params=[2, 3, 4, pytest.param(8, marks=pytest.mark.slow)])
def results(request):
    from placement_edu.runtime.measurement.torch_ref_result import run_torch_refs

    n = request.param
    configs = [
        TorchRefConfig(impl, n, model_for(impl, n), steps=2)
        for impl in IMPLEMENTATIONS
        if impl not in ("dtensor_tp", "pipelining_interleaved") or 8 % n == 0
    ]  # tp splits 8 heads; interleaving needs m = 8 a multiple of the ranks
    return n, run_torch_refs(configs, timeout_s=60)


def test_every_implementation_is_predicted_byte_for_byte_and_op_for_op(results):
    n, runs = results
    for run in runs:
        assert run.differences() == [], str(run)
        assert run.ops_match and run.bytes_match
        assert run.equivalent, f"{run.config.impl} at N={n}: max |Δθ| = {run.deviation}"
        assert len(run.measured) == n


def test_fsdp2_slices_are_uneven_and_padded_at_three_ranks(results):
    n, runs = results
    if n != 3:
        pytest.skip("the N = 3 case")
    fsdp2 = next(r for r in runs if r.config.impl == "fsdp2")
    # Rows 128 -> chunks of 43, 43, 42; 16 -> 6, 6, 4: rank 2 holds fewer elements than its padded
    # storage.
    held = [m["params"] for m in fsdp2.measured]
    storage = [m["storage_params"] for m in fsdp2.measured]
    assert held == [72_928, 72_928, 69_312] and storage == [72_928] * 3


def test_zero_redundancy_shards_the_optimizer_unevenly_and_ddp_does_not(results):
    n, runs = results
    by = {r.config.impl: r for r in runs}
    psi = 64 * 128 + 128 + 128 * 128 + 128 + 128 * 16 + 16  # 26,896 parameters
    assert [m["optimizer"] for m in by["ddp"].measured] == [16 * psi] * n  # m and v, float64
    zero = [m["optimizer"] for m in by["zero_redundancy"].measured]
    assert sum(zero) == 16 * psi and len(set(zero)) > 1  # whole tensors, greedily


def test_dtensor_tp_all_reduces_each_column_input_gradient_apart(results):
    n, runs = results
    tp = [r for r in runs if r.config.impl == "dtensor_tp"]
    if not tp:
        pytest.skip(f"N = {n} does not divide the 8 heads")
    step = [o["op"] for o in tp[0].measured[0]["ops"] if o["step"] == 1]
    # Megatron (the ideal): 2 all-reduces forward + 2 backward per layer; DTensor: 2 + 4
    # (q, k, v, up).
    assert step == ["all_reduce"] * 6 and len(tp[0].ideal) == 4
    h, f = 16, 32  # the toy's widths
    assert tp[0].measured[0]["params"] == 8 * (
        h * h + (4 * h * h + 2 * f * h) // n
    )  # embed whole, the rest 1/N


def test_1f1b_as_torch_runs_it_one_more_warm_up_forward_and_fused_send_recv():
    from placement_edu.implementations import torch_1f1b_order

    # Stage 0 of 4, m = 8: 4 warm-up forwards (the textbook: 3); the 4th forward's send goes out
    # with the first backward's recv; stage 0 receives no forward and sends no backward.
    assert torch_1f1b_order(4, 0, 8)[:6] == [
        ("send", "forward", 0),
        ("send", "forward", 1),
        ("send", "forward", 2),
        ("send", "forward", 3),
        ("recv", "backward", 0),
        ("send", "forward", 4),
    ]
    for stage in range(4):  # every message once: m forward and m backward
        ops = torch_1f1b_order(4, stage, 8)
        assert len(ops) == 2 * 8 * ((stage > 0) + (stage < 3)) and len(set(ops)) == len(ops)


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [1, 2, 3])
@pytest.mark.parametrize("rounds", [1, 2, 3])
@pytest.mark.parametrize("zero_bubble", [False, True])
def test_the_looped_order_is_the_order_torch_s_schedule_classes_build(p, v, rounds, zero_bubble):
    # torch's own construction (schedules.py: _get_warmup_ops and _get_1f1b_rank_ops, as
    # ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble call them for m = rounds·p), its
    # idle slots (None) dropped, against the core's looped_order.
    from torch.distributed.pipelining import schedules as torch_schedules

    from placement_edu.schedule import looped_order

    m, factor = rounds * p, 1 if zero_bubble else 2
    for rank in range(p):
        warmup = torch_schedules._get_warmup_ops(rank, v, p, p, m, multiply_factor=factor)

        def forward_stage(step: int) -> int:
            return (step // p) % v * p + rank

        def backward_stage(step: int) -> int:
            return (v - 1 - ((step - warmup) // p) % v) * p + rank

        torch_order = torch_schedules._get_1f1b_rank_ops(
            v,
            p,
            warmup,
            v * m - warmup,
            warmup,
            rank,
            forward_stage,
            backward_stage,
            rank if zero_bubble else 0,
            enable_zero_bubble=zero_bubble,
        )
        theirs = [
            (a.computation_type.value, a.stage_index, a.microbatch_index)  # "F", "B", "I", "W"
            for a in torch_order
            if a is not None
        ]
        assert theirs == looped_order(p, rank, m, v, zero_bubble), (rank, theirs[:8])


@pytest.mark.parametrize("p, v, m", [(2, 2, 2), (2, 2, 8), (3, 2, 6), (4, 2, 8), (4, 3, 12)])
@pytest.mark.parametrize("zero_bubble", [False, True])
def test_the_sends_and_recvs_are_in_the_order_torch_s_lowering_puts_them(p, v, m, zero_bubble):
    # torch's own lowering (schedules.py: _add_unshard_reshard, _add_reduce_grad, _add_send_recv,
    # as _PipelineScheduleRuntime._prepare_schedule_with_comms runs them) of torch's compute
    # order, against the core's torch_looped_order: the order the ledger measures on gloo.
    from torch.distributed.pipelining import schedules as torch_schedules

    from placement_edu.implementations import torch_looped_order
    from placement_edu.schedule import looped_order

    v = 1 if zero_bubble else v
    compute = {
        r: [
            torch_schedules._Action(s, torch_schedules._ComputationType.from_str(k), mb)
            for k, s, mb in looped_order(p, r, m, v, zero_bubble)
        ]
        for r in range(p)
    }
    lowered = torch_schedules._add_send_recv(
        {
            r: torch_schedules._add_reduce_grad(torch_schedules._add_unshard_reshard(a), m)
            for r, a in compute.items()
        },
        stage_to_rank=lambda s: s % p,
        num_stages=v * p,
    )
    names = {"SEND_F": ("send", "forward"), "RECV_F": ("recv", "forward")}
    names |= {"SEND_B": ("send", "backward"), "RECV_B": ("recv", "backward")}
    theirs = [
        [
            (*names[a.computation_type.name], a.microbatch_index)
            for a in lowered[r]
            if a.computation_type.name in names
        ]
        for r in range(p)
    ]
    assert theirs == torch_looped_order(p, m, v, zero_bubble)


def test_a_one_byte_or_one_op_difference_is_named():
    from dataclasses import replace

    from placement_edu.runtime.measurement.torch_ref_result import TorchRefResult

    config = TorchRefConfig("ddp", 2, MLP, steps=1)
    predicted = predict(config)
    raw = [
        {
            "steps": [
                {
                    "step": -1,
                    "ops": [
                        {"op": o[0], "payload_bytes": o[1], "group": o[2]} for o in p["steps"][0]
                    ],
                },
                {
                    "step": 0,
                    "ops": [
                        {"op": o[0], "payload_bytes": o[1], "group": o[2]} for o in p["steps"][1]
                    ],
                    "held": {
                        **{s: p[s] for s in ("params", "grads", "optimizer", "storage_params")},
                        "optimizer_step_counters": 48,
                    },
                    "deviation": 0.0,
                },
            ],
            "wall_s": 0.0,
        }
        for p in predicted
    ]
    good = TorchRefResult.build(config, raw)
    assert good.differences() == [] and good.ops_match and good.bytes_match
    raw[1]["steps"][1]["held"]["grads"] += 1
    raw[0]["steps"][1]["ops"][0]["payload_bytes"] -= 8
    bad = TorchRefResult.build(config, raw)
    assert not bad.ops_match and not bad.bytes_match
    assert bad.differences() == [
        "rank 0 op 1: measured all_reduce 215,160 B/2, predicted all_reduce "
        "215,168 B/2 (2 vs 2 ops)",
        "rank 1 grads: measured 215,169 B, predicted 215,168 B",
    ]
    assert replace(good, deviation=1e-3).equivalent is False


def test_ddp_buckets_one_at_the_first_step_then_1_mib_then_25_mib():
    # mlp:512,512,512,512,16 in float64, reverse order: Linear 3 (65,664 B) + Linear 2 (2,101,248 B)
    # reach 1 MiB; the rest is one 25 MiB bucket -- measured: all_reduce 2,166,912 then 4,202,496 B.
    sizes = [512 * 512 * 8, 512 * 8] * 3 + [16 * 512 * 8, 16 * 8]
    assert ddp_buckets(sizes, 0) == [6_369_408]
    assert ddp_buckets(sizes, 1) == [2_166_912, 4_202_496]


def test_zero_redundancy_broadcasts_owner_by_owner_largest_first():
    # Tensors of mlp:64,128,128,16: rank 0 owns 1.weight alone (16,384); rank 1 the rest, largest
    # first.
    numels = [8192, 128, 16384, 128, 2048, 16]
    assert zero_redundancy_broadcasts(numels, 2) == [
        (0, 16384),
        (1, 8192),
        (1, 2048),
        (1, 128),
        (1, 128),
        (1, 16),
    ]


def test_fsdp2_order_root_first_prefetch_and_the_final_callback():
    # Measured with 4 Linears (3 fully_shard-ed + the root) at N = 3, reshard_after_forward=True.
    assert fsdp2_order(4, True) == [
        ("all_gather", 3),
        ("all_gather", 0),
        ("all_gather", 1),
        ("all_gather", 2),
        ("all_gather", 3),
        ("all_gather", 2),
        ("all_gather", 1),
        ("reduce_scatter", 2),
        ("all_gather", 0),
        ("reduce_scatter", 1),
        ("reduce_scatter", 3),
        ("reduce_scatter", 0),
    ]
    # None (the default) keeps the root gathered into backward: one gather fewer than True.
    assert [op for op in fsdp2_order(4, None) if op[0] == "all_gather"].count(
        ("all_gather", 3)
    ) == 1
    assert [op for op in fsdp2_order(4, False) if op[0] == "all_gather"] == [
        ("all_gather", u) for u in (3, 0, 1, 2)
    ]


@pytest.mark.slow
def test_ddp_and_zero_redundancy_with_several_buckets_are_predicted():
    from placement_edu.runtime.measurement.torch_ref_result import run_torch_refs

    runs = run_torch_refs(
        [
            TorchRefConfig(impl, 2, "mlp:512,512,512,512,16", steps=2)
            for impl in ("ddp", "zero_redundancy", "fsdp2")
        ]
    )
    for run in runs:
        assert run.differences() == [] and run.equivalent, str(run)


def test_the_command_prints_json_with_the_issue_s_fields(capsys):
    # (the command's own main, in this process: its ranks are forked from the forkserver either way)
    from placement_edu.cli import main

    returncode = main("torch-ref fsdp2_root_kept --world-size 2 --steps 1 --json".split())
    out = capsys.readouterr()
    assert returncode == 0, out.err
    result = json.loads(out.out)
    assert result["impl"] == "fsdp2_root_kept" and result["world_size"] == 2
    assert result["ops_match"] and result["bytes_match"] and result["equivalent"]
    rank = result["measured"][0]
    assert set(rank) >= {"params", "grads", "optimizer", "storage_params", "ops"}
    assert set(rank["ops"][0]) == {"step", "op", "payload_bytes", "group"}
    assert rank == {
        **result["predicted"][0],
        "optimizer_step_counters": rank["optimizer_step_counters"],
    }


@pytest.mark.parametrize(
    "argv, says",
    [
        (["ddpx"], "invalid choice: 'ddpx'"),
        (["ddp", "--world-size", "1"], "world_size must be at least 2"),
        (["ddp", "--model", "mlp:64"], "at least two positive integers"),
        (["ddp", "--model", "cnn:3"], "model must be transformer or look like mlp:"),
        (["ddp", "--model", "transformer"], "ddp trains an MLP"),
        (["dtensor_tp", "--world-size", "3"], "world_size must divide 8"),
        (
            ["pipelining_gpipe", "--world-size", "4"],
            "mlp:64,128,128,16 has 3; give an MLP with at least 4 Linears",
        ),
        (["pipelining_1f1b", "--model", "mlp:64,128,96,16", "--world-size", "2"], "hidden widths"),
        (
            [
                "pipelining_interleaved",
                "--world-size",
                "3",
                "--model",
                "mlp:64" + ",128" * 5 + ",16",
            ],
            "world_size must divide 8",
        ),
        (["ddp", "--steps", "0"], "steps"),
        (["ddp", "--timeout", "nan"], "nan"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, says):
    out = subprocess.run(
        [sys.executable, "-m", "placement_edu.cli", "torch-ref", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, (
        out.stderr
    )
    assert says in out.stderr


# --- issue 42, item 1: FSDP2's mixed precision on the wire ------------------------------------
def test_fsdp2_mixed_precision_gathers_bf16_and_reduce_scatters_fp32_measured_as_predicted():
    """FSDP2 with ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` over float32
    shards, on 2 gloo ranks: every collective's bytes measured = predicted, each all-gather 2 B
    per element and each reduce-scatter 4 B (the fp32 reduction of bf16 gradients is priced at
    its 4 B, not at the 2 B of the gradients' compute dtype); with reduce_dtype unset, 2 B."""
    from placement_edu.runtime.measurement.torch_ref_result import run_torch_refs

    configs = [TorchRefConfig("fsdp2", 2, MLP, steps=2, precision=p) for p in
               ("fsdp2_bf16", "fsdp2_bf16_reduce_bf16")]  # fmt: skip
    fp32_reduce, bf16_reduce = run_torch_refs(configs, timeout_s=60)
    # MLP 64-128-128-16: units (Linears) of 64·128 + 128, 128·128 + 128 and 128·16 + 16 elements.
    units = {64 * 128 + 128, 128 * 128 + 128, 128 * 16 + 16}
    for result, reduce_bytes in ((fp32_reduce, 4), (bf16_reduce, 2)):
        assert result.ops_match and result.bytes_match, result.differences()
        ops = [o for o in result.measured[0]["ops"] if o["step"] == 1]
        gathers = {o["payload_bytes"] for o in ops if o["op"] == "all_gather"}
        reduces = {o["payload_bytes"] for o in ops if o["op"] == "reduce_scatter"}
        assert gathers == {2 * u for u in units}
        assert reduces == {reduce_bytes * u for u in units}
        # fp32 shards, gradients and Adam's m and v: 4 / 4 / 8 B per element, half each on a rank
        total = sum(units)
        held = result.measured[0]
        assert (held["params"], held["grads"], held["optimizer"]) == (
            2 * total, 2 * total, 4 * total)  # fmt: skip
        assert result.equivalent is None and 0 < result.deviation < 1e-1
