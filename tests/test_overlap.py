"""The "bucketed" overlap model (issue 27, item 5): gradient reductions and parameter gathers
overlap compute unit by unit, the last reduced bucket and the first gathered unit exposed --
between "none" and "per_pass". Pinned to a hand derivation, to an event-by-event timeline written
independently of the formula, and to hand calculations of DDP-style and Megatron-style steps."""

from __future__ import annotations

import json

import pytest

from placement_edu import Mesh, ModelSpec, TransformerSpec, derive_schedule, get_precision
from placement_edu.cli import main
from placement_edu.planner import plan
from placement_edu.pricing import compose, price_configuration
from placement_edu.strategies import get_strategy
from placement_edu.timing import (
    BUCKET_BYTES,
    Hardware,
    Link,
    bucketed_exposed,
    comm_time,
    compute_bound_tokens,
    get_hardware,
    overlapped,
    step_time,
    units_on_stage,
)

pytestmark = pytest.mark.fast

# A DDP-style step priced by hand: one node, α = 0, W = 100 GB/s, 100e12 FLOP/s achieved.
W, F, N = 100e9, 100e12, 8
HW = Hardware("hand", F, 80 * 2**30, Link(0.0, W))
# Ψ = 100 Mi parameters: 2-byte gradients (mixed_adam) are 200 MiB = 8 buckets of DDP's 25 MiB.
PSI = 100 * 2**20
GRAD_BYTES = 2 * PSI
K = 8
ALL_REDUCE_S = 2 * (N - 1) / N * GRAD_BYTES / W  # ring all-reduce: 2(N-1)/N · S / W (SPEC §9)


def timeline(a: float, b: float, k: int) -> float:
    """Seconds a reduction of ``a`` seconds in ``k`` equal buckets ends after backward compute of
    ``b`` seconds, simulated bucket by bucket: bucket j is ready when j/k of backward has run,
    and one stream sends the buckets in turn (each waits for the one before)."""
    end = 0.0
    for j in range(1, k + 1):
        end = max(end, j * b / k) + a / k
    return end - b


@pytest.mark.parametrize(
    "a, b, k", [(0.4, 1.0, 4), (2.0, 1.0, 4), (1.0, 1.0, 25), (3.0, 0.5, 1), (0.7, 0.2, 7)]
)
def test_the_formula_matches_a_bucket_by_bucket_timeline(a: float, b: float, k: int) -> None:
    assert bucketed_exposed(a, a / k, k, b) == pytest.approx(timeline(a, b, k), rel=1e-12)


def test_the_formula_by_hand_and_its_two_limits() -> None:
    # A = 0.4 s in 4 buckets behind B = 1 s: only the last bucket, A/4 = 0.1 s, is exposed.
    assert bucketed_exposed(0.4, 0.1, 4, 1.0) == pytest.approx(0.1, rel=1e-12)
    # A = 2 s, B = 1 s: A/k + (A - B)(k - 1)/k = 0.5 + 0.75 = 1.25 s.
    assert bucketed_exposed(2.0, 0.5, 4, 1.0) == pytest.approx(1.25, rel=1e-12)
    # one bucket: nothing overlaps ("none"); no unit-wise collective: max(0, A - B) ("per_pass")
    assert bucketed_exposed(2.0, 2.0, 1, 1.0) == 2.0
    assert bucketed_exposed(2.0, 0.0, None, 1.0) == 1.0


def test_ddp_buckets_are_25_mib_of_gradient() -> None:
    assert BUCKET_BYTES == 25 * 1024 * 1024  # PyTorch DDP: bucket_cap_mb = 25, × 1024 × 1024
    (reduction,) = overlapped("dp", ModelSpec(PSI), Mesh.of(data=N), "mixed_adam", HW)
    assert (reduction.op, reduction.phase, reduction.units, reduction.runs) == (
        "all_reduce",
        "backward",
        K,
        1,
    )
    assert reduction.seconds == pytest.approx(ALL_REDUCE_S, rel=1e-12)


@pytest.mark.parametrize("tokens", [4096, 512])
def test_a_ddp_step_exposes_the_last_bucket(tokens: int) -> None:
    backward_s = 4 * PSI * tokens / F
    t = {
        o: step_time("dp", ModelSpec(PSI), Mesh.of(data=N), "mixed_adam", HW, tokens, o)
        for o in ("none", "per_pass", "bucketed")
    }
    a = ALL_REDUCE_S  # 3.670016e-3 s
    if tokens == 4096:  # B = 17.18e-3 s > A: the last bucket alone, A/8 = 0.458752e-3 s
        assert t["bucketed"].exposed_comm_s == pytest.approx(0.458752e-3, rel=1e-12)
    else:  # B = 2.147e-3 s < A: A/8 + (A - B)·7/8
        want = a / K + (a - backward_s) * (K - 1) / K
        assert t["bucketed"].exposed_comm_s == pytest.approx(want, rel=1e-12)
    assert t["none"].exposed_comm_s == pytest.approx(a, rel=1e-12)
    assert t["per_pass"].exposed_comm_s == pytest.approx(max(0.0, a - backward_s), abs=1e-15)


def test_with_micro_batches_the_reduction_hides_under_the_last_backward_only() -> None:
    # m = 4, 2048 tokens per device: B = 8.59e-3 s in all, 2.147e-3 s per micro-batch < A. DDP's
    # no_sync (and Megatron's --overlap-grad-reduce) reduce only during the last micro-batch's
    # backward; per_pass hid A under all four.
    tokens, m = 2048, 4
    strategy = get_strategy("dp").with_(micro_batches=m)
    model, mesh = ModelSpec(PSI), Mesh.of(data=N)
    bucketed = step_time(strategy, model, mesh, "mixed_adam", HW, tokens, "bucketed")
    per_pass = step_time(strategy, model, mesh, "mixed_adam", HW, tokens, "per_pass")
    last_backward_s = 4 * PSI * tokens / F / m
    a = ALL_REDUCE_S
    assert per_pass.exposed_comm_s == 0.0
    want = a / K + (a - last_backward_s) * (K - 1) / K
    assert bucketed.exposed_comm_s == pytest.approx(want, rel=1e-12)


def test_megatron_style_zero1_hides_its_parameter_all_gather_but_the_first_bucket() -> None:
    # ZeRO-1 (Megatron's distributed optimizer): a reduce-scatter of 2-byte gradients after
    # backward, an all-gather of 2-byte parameters after the step, each (N-1)/N · 2Ψ / W = A/2.
    # --overlap-param-gather moves the all-gather into the next step's forward (2Ψ·T/F = 8.59e-3 s
    # at 4096 tokens, more than A/2 = 1.835e-3 s): only its first of 8 buckets waits.
    model, mesh, tokens = ModelSpec(PSI), Mesh.of(data=N), 4096
    streams = overlapped("zero1", model, mesh, "mixed_adam", HW)
    by_op = {s.op: s for s in streams}
    gather = by_op["all_gather"]
    assert (gather.phase, gather.hides_under, gather.units, gather.runs) == (
        "step",
        "forward",
        8,
        1,
    )
    assert gather.seconds == pytest.approx(ALL_REDUCE_S / 2, rel=1e-12)
    half = ALL_REDUCE_S / 2
    bucketed = step_time("zero1", model, mesh, "mixed_adam", HW, tokens, "bucketed")
    per_pass = step_time("zero1", model, mesh, "mixed_adam", HW, tokens, "per_pass")
    assert bucketed.exposed_comm_s == pytest.approx(half / 8 + half / 8, rel=1e-12)
    assert per_pass.exposed_comm_s == pytest.approx(half, rel=1e-12)  # the step's, all of it


def test_fsdp_units_are_the_layers_of_rank_0s_stage() -> None:
    model = TransformerSpec(layers=7, hidden=64, heads=4, seq=16, vocab=100)
    assert units_on_stage(model, 1) == 7
    assert units_on_stage(model, 2) == 4  # stage 0 of 7 layers over 2 stages holds 4
    zero3 = get_strategy("zero3").with_(micro_batches=4)
    streams = overlapped(zero3, model, Mesh.of(data=4), "mixed_adam", "h100-nvlink")
    # ZeRO-3 gathers before each micro-batch's forward and backward, and reduce-scatters after
    # each backward (grads sharded: SPEC §4 rule 5): every kind runs m = 4 times, per layer.
    assert {(s.op, s.phase, s.runs, s.units, s.unit) for s in streams} == {
        ("all_gather", "forward", 4, 7, "layer"),
        ("all_gather", "backward", 4, 7, "layer"),
        ("reduce_scatter", "backward", 4, 7, "layer"),
    }
    grad_op = get_strategy("fsdp_grad_op").with_(micro_batches=4)
    gathers = [
        s
        for s in overlapped(grad_op, model, Mesh.of(data=4), "mixed_adam", "h100-nvlink")
        if s.op == "all_gather"
    ]
    # SHARD_GRAD_OP keeps the gathered parameters after the first forward: one run per step
    assert [(s.phase, s.runs) for s in gathers] == [("forward", 1)]


def test_bucketed_tp_hides_the_critical_path_too() -> None:
    # zero1×tp on data=2, tensor=4, 2 micro-batches of 64 sequences: compute enough to hide every
    # collective but the unit-wise ones' exposed units. "bucketed" then exposes those units and
    # tensor parallelism's critical seconds; "bucketed+tp" (--tp-comm-overlap) the units alone.
    model = TransformerSpec(layers=4, hidden=1024, heads=8, seq=2048, vocab=1000, micro_batch=64)
    mesh = Mesh.of(data=2, tensor=4)
    strategy = compose("zero1", mesh, 2)
    hw = get_hardware("h100-nvlink")
    units = sum(s.unit_s for s in overlapped(strategy, model, mesh, "mixed_adam", hw))
    schedule = derive_schedule(strategy, model, mesh, get_precision("mixed_adam"))
    critical = sum(comm_time(schedule, hw, mesh, critical=True).values())
    t = {
        o: step_time(strategy, model, mesh, "mixed_adam", hw, overlap=o).exposed_comm_s
        for o in ("bucketed", "bucketed+tp")
    }
    assert t["bucketed+tp"] == pytest.approx(units, rel=1e-9)
    assert t["bucketed"] == pytest.approx(units + critical, rel=1e-9)


@pytest.mark.parametrize("other", [0.0, 0.3, 2.0])
def test_other_collectives_share_the_compute_the_buckets_leave(other: float) -> None:
    # A = 0.4 s in 4 buckets, B = 1 s, and `other` seconds of collectives that need no unit (a
    # pipeline send): the buckets' rest needs 0.3 s of the 0.75 s after the first chunk, and
    # everything left 0.3 + other of the 1 s.
    want = 0.1 + max(0.0, 0.3 - 0.75, 0.3 + other - 1.0)
    assert bucketed_exposed(0.4, 0.1, 4, 1.0, other) == pytest.approx(want, rel=1e-12)
    # one unit: it cannot overlap, the others still hide under the compute
    assert bucketed_exposed(0.4, 0.4, 1, 1.0, other) == pytest.approx(
        0.4 + max(0.0, other - 1.0), rel=1e-12
    )


def test_the_time_command_prices_bucketed_as_the_planner_does() -> None:
    model = TransformerSpec(layers=4, hidden=512, heads=4, seq=256, vocab=1000, micro_batch=2)
    hw, precision = get_hardware("h100-nvlink-ib"), get_precision("mixed_adam")
    for mesh, strategy in (("data=2,tensor=2,pipeline=2", "zero1"), ("data=8", "zero3")):
        priced = price_configuration(
            model, Mesh.parse(mesh), strategy, 64, hw, precision, overlap="bucketed"
        )
        ranked = plan(model, 8, hardware=hw, global_batch=64, overlap="bucketed").ranked
        (same,) = [
            c
            for c in ranked
            if c.mesh == Mesh.parse(mesh)
            and c.strategy == priced.choice.strategy
            and c.recompute == "none"
        ]
        assert same.time is not None and priced.step_s == same.time.total_s


def _time(capsys, *extra: str) -> str:
    argv = ["time", "--layers", "30", "--hidden", "4096", "--heads", "32", "--seq", "4096"]
    argv += ["--vocab", "131072", "--global-batch", "192", "--mesh", "data=48,tensor=2"]
    argv += ["--strategy", "zero1", "--sequence-parallel", "--recompute", "selective", *extra]
    assert main(argv) == 0
    return capsys.readouterr().out


def test_the_breakdown_says_which_bucket_stays_exposed(capsys) -> None:
    # Megatron-LM's 7.1B H100 row (t = 2, d = 48, 192 sequences of 4096): distributed optimizer
    text = _time(capsys, "--overlap", "bucketed")
    assert "backward reduce_scatter on data" in text
    assert "partly exposed (the last of " in text
    assert "step     all_gather on data" in text
    assert "partly exposed (moved into the next step's forward, the first of " in text
    out = json.loads(_time(capsys, "--overlap", "bucketed", "--json"))
    assert out["overlap"] == "bucketed"
    rows = {(r["op"], r["axis"], r["pass"]): r for r in out["breakdown"]["collectives"]}
    gather = rows[("all_gather", "data", "step")]
    assert gather["hides_under"] == "forward" and gather["unit"] == "bucket"
    assert gather["exposed_unit_s"] == pytest.approx(gather["seconds"] / gather["units"])
    assert gather["overlap"].startswith("partly exposed")
    per_pass = json.loads(_time(capsys, "--overlap", "per_pass", "--json"))
    step_rows = [r for r in per_pass["breakdown"]["collectives"] if r["pass"] == "step"]
    assert step_rows[0]["overlap"] == "exposed" and "units" not in step_rows[0]
    assert out["step_s"] < per_pass["step_s"]


def test_plan_accepts_the_bucketed_model(capsys) -> None:
    argv = ["plan", "--params", "1e9", "--devices", "8", "--overlap", "bucketed", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["overlap"] == "bucketed"


def test_compute_bound_under_bucketed_counts_the_moved_all_gather_against_forward() -> None:
    # ZeRO-1 on data = 8: reduce-scatter and all-gather each 7/8 · 2Ψ / W. per_pass asks only
    # backward to hide the reduce-scatter: 4Ψ·T/F >= 7/8 · 2Ψ/W, T* = 7/16 · F/W = 437.5 tokens.
    # bucketed moves the all-gather into forward, 2Ψ·T/F >= 7/8 · 2Ψ/W: T* = 7/8 · F/W = 875.
    args = ("zero1", ModelSpec(PSI), Mesh.of(data=N), "mixed_adam", HW)
    assert compute_bound_tokens(*args, "per_pass") == pytest.approx(437.5, rel=1e-12)
    assert compute_bound_tokens(*args, "bucketed") == pytest.approx(875.0, rel=1e-12)
