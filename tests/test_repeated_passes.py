"""Repeated micro-batch passes are held once, with their count (issue 12).

A step of m micro-batches repeats the same passes m times. ``derive_schedule`` holds each run of
identical passes once (``schedule.Repeat``), so deriving, checking, timing and reporting cost the
same at m = 10^8 as at m = 8, and every total is exact: the listed schedule (``Schedule.ops``)
is the one a pass-by-pass loop gives, and the totals grow by exactly one micro-batch's worth per
micro-batch.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import pytest

from placement_edu import (
    PlacementError,
    State,
    TransformerSpec,
    analyze,
    check,
    derive_schedule,
    get_precision,
)
from placement_edu import schedule as sch
from placement_edu.faults import FAULTS, apply_fault, applicable_faults
from placement_edu.mesh import Mesh
from placement_edu.schedule.context import context_attention_collectives
from placement_edu.schedule import (
    MAX_LISTED_OPS,
    Op,
    Repeat,
    Schedule,
    pipeline_order,
    pipeline_runs,
)
from placement_edu.strategies import COMPOSITIONS, STRATEGIES, example_mesh, get_strategy
from placement_edu.timing import HARDWARE, comm_time

pytestmark = pytest.mark.fast

MODEL = TransformerSpec(layers=8, hidden=64, heads=4, seq=16, vocab=100, micro_batch=1)
MIXED = get_precision("mixed_adam")
NAMES = sorted(STRATEGIES) + sorted(COMPOSITIONS)


def pass_by_pass(strategy, mesh: Mesh, rank: int) -> list[tuple]:
    """The schedule as one loop over ``pipeline_order`` derives it, one pass at a time (the
    derivation before passes were held once), each op as (op, state, axis, phase, bytes, group,
    micro-batches)."""
    dev = sch.Device(strategy, MODEL, mesh, MIXED, rank, mesh.coords(rank))
    m, reshard = strategy.micro_batches, strategy.reshard_after_forward
    per_micro_batch, _ = sch.reduces_per_micro_batch(dev)
    ops = sch.startup_broadcasts(dev)
    for kind, k in pipeline_order(strategy.pipeline_schedule, dev.stages, dev.stage, m):
        phase = "forward" if kind == "F" else "backward"
        ops += sch.pipeline_boundary(dev, "recv", phase, (k,))
        if reshard or (kind == "F" and k == 0):
            ops += sch.gather_before_use(dev, phase, "")
        ops += sch.tensor_parallel_collectives(dev, phase) + context_attention_collectives(
            dev, phase
        )
        ops += sch.pipeline_boundary(dev, "send", phase, (k,))
        if kind == "B" and (per_micro_batch or k == m - 1):
            tag = (k,) if per_micro_batch else ()
            ops += sch.sequence_parallel_norms(dev, tag) + sch.reduce_partial_grads(dev, tag)
            ops += sch.scale_once(dev, tag) + sch.offload_grad_slice(dev, tag)
    ops += [dev.op("optimizer_step", State.OPTIMIZER, None, "step", 0, 1)] + sch.owner_update_sync(
        dev
    )
    return [shape(o) for o in Schedule(tuple(ops)).ops]  # a run of equal units, unit by unit


def shape(o) -> tuple:
    return (
        o.op,
        o.state,
        o.axis,
        o.phase,
        o.payload_bytes,
        o.group,
        tuple(o.micro_batches),
        o.root,
    )


CASES = [
    (name, m, schedule, reshard)
    for name in NAMES
    for m, schedule, reshard in itertools.product((1, 2, 3, 7), ("gpipe", "1f1b"), (True, False))
]


@pytest.mark.parametrize("name, m, schedule, reshard", CASES)
def test_the_listed_schedule_is_the_pass_by_pass_one_on_every_stage(
    name, m, schedule, reshard
) -> None:
    strategy = get_strategy(name).with_(
        micro_batches=m, pipeline_schedule=schedule, reshard_after_forward=reshard
    )
    mesh = example_mesh(strategy)
    for rank in mesh.group(0, "pipeline"):
        derived = derive_schedule(strategy, MODEL, mesh, MIXED, rank, strict=False)
        assert [shape(o) for o in derived.ops] == pass_by_pass(strategy, mesh, rank)
        assert derived.length == len(derived.ops)


@pytest.mark.parametrize("name", NAMES)
def test_totals_grow_by_one_micro_batchs_worth_per_micro_batch_up_to_10_to_the_8(name) -> None:
    # r(m) = r(2) + (m - 2)·(r(3) - r(2)), exactly: what one more micro-batch costs, times the
    # count. (m = 1 can differ: with one micro-batch the kept gather and the final reduction
    # share a pass.)
    base = get_strategy(name)
    mesh = example_mesh(base)
    hw = HARDWARE["h100-nvlink-ib"]
    for rank in mesh.group(0, "pipeline"):
        at = {
            m: derive_schedule(base.with_(micro_batches=m), MODEL, mesh, MIXED, rank, strict=False)
            for m in (2, 3, 1000, 10**8)
        }
        for m in (1000, 10**8):
            s = at[m]
            assert s.ring_bytes == at[2].ring_bytes + (m - 2) * (
                at[3].ring_bytes - at[2].ring_bytes
            )
            assert s.host_link_bytes == at[2].host_link_bytes + (m - 2) * (
                at[3].host_link_bytes - at[2].host_link_bytes
            )
            assert s.length == at[2].length + (m - 2) * (at[3].length - at[2].length)
            assert (
                len(s.entries) == len(at[1000].entries) <= 64
            )  # held once: a few entries, whatever m is
            for phase, seconds in comm_time(s, hw, mesh).items():
                one = comm_time(at[3], hw, mesh)[phase] - comm_time(at[2], hw, mesh)[phase]
                assert seconds == pytest.approx(
                    comm_time(at[2], hw, mesh)[phase] + (m - 2) * one, rel=1e-9
                )


def test_a_pipeline_of_10_to_the_8_micro_batches_sends_exactly_m_boundary_activations() -> None:
    # The command: L=64 h=8192 a=64 s=4096, 64 stages. Stage 0 sends each micro-batch's
    # boundary activation on, b·s·h = 4096·8192 elements of 2 bytes (mixed precision)
    # = 67,108,864 B; it only receives gradients back (a recv is counted by its sender).
    model = TransformerSpec(layers=64, hidden=8192, heads=64, seq=4096, vocab=50000, micro_batch=1)
    m = 10**8
    report = analyze(get_strategy("pp").with_(micro_batches=m), model, mesh="pipeline=64")
    assert report.ring_bytes == m * 4096 * 8192 * 2 == 6_710_886_400_000_000
    assert len(report.schedule.entries) <= 6
    last = analyze(get_strategy("pp").with_(micro_batches=m), model, mesh="pipeline=64", rank=63)
    assert last.ring_bytes == m * 4096 * 8192 * 2  # the last stage sends each gradient back


def test_listing_a_step_beyond_the_cap_is_refused_with_its_count_but_the_totals_answer() -> None:
    s = derive_schedule(
        get_strategy("zero3").with_(micro_batches=10**8), MODEL, Mesh.of(data=4), MIXED
    )
    with pytest.raises(
        PlacementError, match=r"this step runs 1,800,000,001 operations .* stops at 100,000"
    ):
        s.ops
    assert s.length == 1_800_000_001 > MAX_LISTED_OPS
    assert any(isinstance(e, Repeat) and e.times == 10**8 for e in s.entries)
    with pytest.raises(PlacementError, match="micro_batches must be at most 2\\^40"):
        get_strategy("pp").with_(micro_batches=2**40 + 1)


def test_pipeline_runs_are_pipeline_order_held_in_a_few_runs() -> None:
    # 1F1B on stage 0 of 4, m = 6: 3 warm-up forwards, then one forward / one backward, then
    # the last 3 backwards (Narayanan et al. 2021, Figure 4).
    assert pipeline_order("1f1b", 4, 0, 6) == [
        ("F", 0),
        ("F", 1),
        ("F", 2),
        ("F", 3),
        ("B", 0),
        ("F", 4),
        ("B", 1),
        ("F", 5),
        ("B", 2),
        ("B", 3),
        ("B", 4),
        ("B", 5),
    ]
    assert pipeline_runs("1f1b", 4, 0, 10**12) == [
        ((("F", 0),), 3),
        ((("F", 3), ("B", 0)), 10**12 - 3),
        ((("B", 10**12 - 3),), 3),
    ]
    assert pipeline_runs("gpipe", 4, 2, 5) == [((("F", 0),), 5), ((("B", 0),), 5)]
    with pytest.raises(PlacementError, match="stops at 100,000; pipeline_runs"):
        pipeline_order("gpipe", 4, 0, 10**8)


def test_the_checker_follows_classes_of_micro_batches_and_names_the_one_left_partial() -> None:
    m = 10**6
    strategy = get_strategy("zero3").with_(micro_batches=m)
    mesh = Mesh.of(data=4)
    s = derive_schedule(strategy, MODEL, mesh, MIXED)
    assert check(strategy, mesh).gradient_integrity.holds
    # Drop the last micro-batch from the repeated backward pass: its gradient is never reduced.
    [backward] = [
        e
        for e in s.entries
        if isinstance(e, Repeat) and not e.unit and next(e.expand()).phase == "backward"
    ]
    shorter = Repeat(
        tuple(
            replace(o, micro_batches=range(0, m - 1))
            if isinstance(o, Op) and o.micro_batches
            else o
            for o in backward.ops
        ),
        m - 1,
    )
    broken = Schedule(tuple(shorter if e is backward else e for e in s.entries), s.warnings)
    from placement_edu.checker import gradient_integrity

    condition = gradient_integrity(broken, strategy, mesh)
    assert not condition.holds and f"for micro-batch {m - 1}:" in condition.reason, condition.reason
    # ... and the walk's classes come from the entries, not from m
    from placement_edu.checker import micro_batch_classes

    assert micro_batch_classes(broken, m) == [(0, m - 1), (m - 1, m)]


@pytest.mark.parametrize("name", NAMES)
def test_a_fault_edits_a_repeated_pass_as_it_would_each_listed_pass(name) -> None:
    strategy = get_strategy(name).with_(micro_batches=3)
    mesh = example_mesh(strategy)
    schedule = derive_schedule(strategy, MODEL, mesh, MIXED, strict=False)
    for fault in applicable_faults(strategy, mesh):
        edited = apply_fault(schedule, fault, strategy, mesh)
        assert [shape(o) + (o.stale,) for o in edited.ops] == [
            shape(o) + (o.stale,) for o in FAULTS[fault].edit(schedule.ops)
        ], fault


def test_check_and_table_answer_at_10_to_the_8_micro_batches_with_the_fault_found() -> None:
    strategy = get_strategy("zero3").with_(micro_batches=10**8)
    assert (
        "divided 2 times"
        in check(strategy, "data=4", fault="double-scale").gradient_integrity.reason
    )
    assert not check(strategy, "data=4", fault="stale-gather").state_consistency.holds
    assert not check(strategy, "data=4", fault="skip-grad-reduce").gradient_integrity.holds
    rows = dict(
        analyze(
            get_strategy("pp").with_(micro_batches=10**8), MODEL, mesh="pipeline=4", rank=1
        ).lines()
    )
    assert any("×99,999,998, one per micro-batch" in v for v in rows.values())
    assert Fraction(analyze(strategy, MODEL, mesh="data=4").volume_psi) > 10**8
