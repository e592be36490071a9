"""The runtime, measured against the core's predictions and against one process (SPEC §7).

Starting ranks is the slow part (4 ranks take seconds on a small machine), so each world size is
one launch that runs every strategy and every applicable fault in turn; the tests read its results.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from placement_edu import Placement, Strategy
from placement_edu.runtime import RunConfig, run_many
from placement_edu.runtime.verdict import applicable

pytestmark = pytest.mark.runtime

DATA = [
    "dp",
    "zero1_allreduce",
    "zero1",
    "zero2",
    "zero3",
    "fsdp_grad_op",
    "zero2_offload",
    "zero3_offload",
]
MODEL = ["tp", "pp"]
COMPOSED = ["dp×tp", "dp×pp", "zero3×tp", "hsdp"]  # hsdp at 4 ranks: replica=2,data=2
PADDED = ("zero1", "zero2", "zero3", "zero2_offload", "zero3_offload")


#: A strategy of the user's own with zero2's placement: the engine is chosen by placement, not name.
MY_ZERO2 = Strategy("my_zero2", Placement(grads="S", optimizer="S"))


def _with_faults(configs: list[RunConfig]) -> list[RunConfig]:
    out = []
    for c in configs:
        out.append(c)
        out += [c.with_(fault=f) for f in applicable(c.resolved_strategy(), c.resolved_mesh())]
    return out


def _configs(n: int) -> list[RunConfig]:
    plain = [RunConfig(s, n) for s in DATA + MODEL + (COMPOSED if n >= 4 else [])]
    plain.append(RunConfig("pp", n, pipeline_schedule="gpipe"))
    if n == 4:  # Ψ = 550 is not a multiple of 4: ZeRO's flat buffer is padded to 552
        plain += [RunConfig(s, n, width=10, layers=5) for s in PADDED]
        # 3 weights of 144 and 3 biases of 12: whole-tensor owners hold uneven slices.
        plain += [RunConfig("zero1_allreduce", n, layers=3), RunConfig(MY_ZERO2, n)]
    return _with_faults(plain)


@pytest.fixture(scope="module")
def world2():
    return run_many(_configs(2), timeout_s=30, progress=False)


@pytest.fixture(scope="module")
def world4():
    return run_many(_configs(4), timeout_s=30, progress=False)


@pytest.fixture(scope="module")
def world8():
    return {
        r.config.strategy: r
        for r in run_many([RunConfig("dp", 8), RunConfig("zero3", 8)], timeout_s=60, progress=False)
    }


def _correct(results):
    return [r for r in results if r.config.fault is None]


def _faulted(results):
    return [r for r in results if r.config.fault is not None]


@pytest.mark.parametrize("world", ["world2", "world4"])
def test_every_strategy_equals_one_process_to_float64_rounding(world, request):
    results = _correct(request.getfixturevalue(world))
    assert len(results) >= (11 if world == "world2" else 22)
    for r in results:
        assert r.max_abs_deviation <= 1e-10, (r.config.label, r.deviation)
        assert r.equivalent and r.broken == []


@pytest.mark.parametrize("world", ["world2", "world4"])
def test_measured_state_bytes_equal_predicted_bytes_exactly(world, request):
    for r in request.getfixturevalue(world):
        assert r.memory_matches(), (r.config.label, r.mismatches())


@pytest.mark.parametrize("world", ["world2", "world4"])
def test_measured_ledger_equals_predicted_schedule_entry_by_entry(world, request):
    # Faulted runs are compared with the schedule the checker edits the fault into.
    for r in request.getfixturevalue(world):
        assert r.ledger_matches(), (r.config.label, r.mismatches())


@pytest.mark.parametrize("world", ["world2", "world4"])
def test_every_applicable_fault_diverges_and_names_its_broken_condition(world, request):
    expected = {
        "skip-grad-reduce": "gradient_integrity",
        "double-scale": "gradient_integrity",
        "skip-param-sync": "state_consistency",
        "unsynced-init": "state_consistency",
        "stale-gather": "state_consistency",
    }
    faulted = _faulted(request.getfixturevalue(world))
    assert {r.config.fault for r in faulted} == set(expected)
    for r in faulted:
        assert r.max_abs_deviation >= 1e-6, (r.config.label, r.deviation)
        assert not r.equivalent
        assert r.broken == [expected[r.config.fault]], (r.config.label, r.broken)
        assert r.reasons[r.broken[0]]  # the checker's sentence, shown beside it


def test_padding_is_stored_in_shards_and_reported(world4):
    padded = [r for r in world4 if r.config.width == 10 and r.config.fault is None]
    assert {r.config.strategy for r in padded} == set(PADDED)
    for r in padded:
        d = r.to_dict()
        assert d["psi"] == 550 and d["predicted"][0]["padding_elements"] == 2
        # ZeRO's rule: 552 / 4 = 138 elements per shard; Adam's m and v are 16 bytes per element.
        assert d["measured"][0]["optimizer"] + d["measured"][0]["host"]["optimizer"] == 138 * 16


def test_gpipe_keeps_m_micro_batches_in_flight_and_1f1b_at_most_p_minus_stage(world4):
    pp = {
        r.config.pipeline_schedule or "1f1b": r
        for r in _correct(world4)
        if r.config.strategy == "pp"
    }
    gpipe, one_f = pp["gpipe"].measured, pp["1f1b"].measured
    per_micro_batch = gpipe[3]["activations_peak"] // 4  # m = 4, one layer per stage
    assert [m["activations_peak"] for m in gpipe] == [4 * per_micro_batch] * 4
    assert [m["activations_peak"] for m in one_f] == [k * per_micro_batch for k in (4, 3, 2, 1)]


def test_zero3_holds_exactly_one_eighth_of_dp_and_sends_one_and_a_half_times_as_much(world8):
    dp, zero3 = world8["dp"], world8["zero3"]
    for r in (dp, zero3):
        assert r.equivalent and r.memory_matches() and r.ledger_matches()
    state = lambda m: m["params"] + m["grads"] + m["optimizer"]  # noqa: E731
    for m_dp, m_z3 in zip(dp.measured, zero3.measured):
        assert Fraction(state(m_z3), state(m_dp)) == Fraction(1, 8)  # SPEC §7, ZeRO §5
        assert Fraction(m_z3["comm_ring_bytes"], m_dp["comm_ring_bytes"]) == Fraction(3, 2)


def test_the_report_and_json_carry_what_the_issue_lists(world2):
    d = world2[0].to_dict()
    for key in (
        "strategy",
        "world_size",
        "steps",
        "max_abs_deviation",
        "equivalent",
        "broken_conditions",
        "predicted",
        "measured",
        "ledger",
    ):
        assert key in d
    for side in ("predicted", "measured"):
        assert set(d[side][0]) >= {
            "params",
            "grads",
            "optimizer",
            "activations_peak",
            "comm_ring_bytes",
        }
    assert "predicted" in str(world2[0]) and "measured" in str(world2[0])


def test_zero1_padded_buffers_are_predicted_and_measured(world4):
    # Ψ = 550 on 4 ranks: ZeRO's rule pads the flat buffer to 552. The replicated gradient and
    # parameters are stored unpadded, so the reduce-scatter reads and the all-gather fills a padded
    # copy: transients of 552 x 8 = 4416 B in backward and in the step.
    r = next(
        r
        for r in world4
        if r.config.strategy == "zero1" and r.config.width == 10 and not r.config.fault
    )
    assert r.measured[0]["reduce_bucket"] == r.predicted[0]["reduce_bucket"] == 552 * 8
    assert r.measured[0]["gather_buffer"] == r.predicted[0]["gather_buffer"] == 552 * 8


def test_zero3_offload_keeps_no_model_state_on_the_device_and_16_psi_over_n_on_the_host(world4):
    # Ψ = 624 float64 elements on 4 ranks: 156 per slice; P and G 8 B, Adam's m and v 16 B each.
    r = next(
        r for r in _correct(world4) if r.config.strategy == "zero3_offload" and r.config.width == 12
    )
    for m in r.measured:
        assert (m["params"], m["grads"], m["optimizer"]) == (0, 0, 0)
        assert m["host"] == {"params": 156 * 8, "grads": 156 * 8, "optimizer": 156 * 16}
        assert m["offload_staging"] == 156 * 8  # one slice crosses the host link at a time
    ops = [k[0] for k in r.measured[0]["steps"][0]]
    assert ops == ["h2d", "all_gather", "h2d", "all_gather", "reduce_scatter", "d2h"]


def test_hsdp_reduces_within_the_data_group_then_all_reduces_the_slice_across_replicas(world4):
    r = next(r for r in _correct(world4) if r.config.strategy == "hsdp")
    assert str(r.config.resolved_mesh()) == "replica=2,data=2"
    # The slice (624 / 2 = 312 elements, 2496 B) is broadcast along replica once, at start-up;
    # each step: zero3's traffic on data, plus an all-reduce of the slice on replica.
    m = r.measured[0]
    assert m["startup"] == [("broadcast", "params", "replica", 2496, 0)]
    assert [(k[0], k[2]) for k in m["steps"][0]] == [
        ("all_gather", "data"),
        ("all_gather", "data"),
        ("reduce_scatter", "data"),
        ("all_reduce", "replica"),
    ]
    assert (m["params"], m["grads"], m["optimizer"]) == (2496, 2496, 4992)  # 16Ψ/d bytes, d = 2


def test_zero1_allreduce_owns_whole_tensors_unevenly_and_sends_3_psi(world4):
    # PyTorch's ZeroRedundancyOptimizer rule (models.greedy_partition): the largest tensors first,
    # each to the least-loaded rank. A 3-layer MLP of width 12: weights of 144 elements go to
    # ranks 0, 1, 2; the three biases of 12 all go to rank 3 (12 < 144 after each).
    r = next(
        r
        for r in _correct(world4)
        if r.config.strategy == "zero1_allreduce" and r.config.layers == 3
    )
    assert r.equivalent and r.memory_matches() and r.ledger_matches()
    psi = 3 * (144 + 12)  # 468 float64 elements
    owned = [144, 144, 144, 36]
    assert [m["optimizer"] for m in r.measured] == [2 * 8 * e for e in owned]  # Adam's m and v
    assert [m["params"] for m in r.measured] == [psi * 8] * 4
    # Per step: DDP's all-reduce, 2(N-1)/N x 8Ψ B on every rank; then each owner broadcasts its
    # tensors, sending them to the N-1 others. Summed over ranks: 2(N-1)·8Ψ + (N-1)·8Ψ = 3(N-1)·8Ψ,
    # ZeRO's "3Ψ" against zero1's 2(N-1)·8Ψ ("2Ψ").
    all_reduce = 2 * 3 * psi * 8 // 4
    assert [m["comm_ring_bytes"] for m in r.measured] == [all_reduce + 3 * 8 * e for e in owned]
    assert sum(m["comm_ring_bytes"] for m in r.measured) == 3 * 3 * psi * 8
    # At equal Ψ (the default 4-layer MLP, 624 elements, no padding on 4 ranks): exactly 1.5x zero1.
    sent = {
        name: sum(
            m["comm_ring_bytes"]
            for m in next(
                z
                for z in _correct(world4)
                if z.config.strategy == name and z.config.width == 12 and z.config.layers == 4
            ).measured
        )
        for name in ("zero1_allreduce", "zero1")
    }
    assert Fraction(sent["zero1_allreduce"], sent["zero1"]) == Fraction(3, 2)
    steps = r.measured[3]["steps"][0]
    assert [k[0] for k in steps] == [
        "all_reduce",
        "broadcast",
        "broadcast",
        "broadcast",
        "broadcast",
    ]
    assert [k[4] for k in steps[1:]] == [0, 0, 0, 3 * 36 * 8]  # rank 3 sends only its own


def test_a_user_defined_placement_runs_on_the_engine_of_its_placement(world4):
    r = next(r for r in world4 if r.config.strategy == MY_ZERO2)
    zero2 = next(
        z for z in _correct(world4) if z.config.strategy == "zero2" and z.config.width == 12
    )
    assert r.to_dict()["strategy"] == "my_zero2"
    assert r.equivalent and r.memory_matches() and r.ledger_matches()
    assert r.measured == zero2.measured  # the zero2 engine, byte for byte
