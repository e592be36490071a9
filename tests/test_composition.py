"""Composition on a device mesh (SPEC §6): memory multiplies, communication adds, five safety
rules."""

from __future__ import annotations

from fractions import Fraction

import pytest

from placement_edu import Mesh, ModelSpec, Placement, PlacementError, State, Strategy, analyze
from placement_edu.checker import check
from placement_edu.composition import RULES
from placement_edu.strategies import COMPOSITIONS, get_strategy

pytestmark = pytest.mark.fast

PSI = 8 * 10**9
MODEL = ModelSpec(psi=PSI, layers=8, boundary_elements=4096)


def test_named_compositions_include_the_published_layouts() -> None:
    assert {"dp×tp", "dp×pp", "zero1×tp×pp", "zero3×tp", "hsdp"} <= set(COMPOSITIONS)
    assert get_strategy("zero1xtpxpp") is COMPOSITIONS["zero1×tp×pp"]


def test_megatron_distributed_optimizer_is_6_plus_12_over_d_bytes_per_parameter() -> None:
    # Megatron-LM distributed optimizer docs: bf16 params (2) + fp32 main grads (4) + 12/d for the
    # sharded fp32 master, m and v; d = 8 gives 7.5 bytes per parameter.
    for d in (2, 4, 8, 64):
        mesh = Mesh.of(data=d, tensor=1, pipeline=1)
        report = analyze("zero1×tp×pp", MODEL, mesh=mesh, precision="mixed_adam_fp32_grads")
        assert report.memory.model_state / PSI == 6 + Fraction(12, d)
    d8 = analyze(
        "zero1×tp×pp",
        MODEL,
        mesh=Mesh.of(data=8, tensor=1, pipeline=1),
        precision="mixed_adam_fp32_grads",
    )
    assert d8.memory.model_state / PSI == Fraction(15, 2)  # 7.5


def test_3d_placement_sizes_multiply_over_sharded_axes() -> None:
    # SPEC §6: P = 2Ψ/(t·p) (replicated on data), O = 12Ψ/(t·p·d) (ZeRO-1 on data), mixed_adam.
    d, t, p = 4, 2, 2
    memory = analyze("zero1×tp×pp", MODEL, mesh=Mesh.of(data=d, tensor=t, pipeline=p)).memory
    assert memory.device[State.PARAMS] == Fraction(2 * PSI, t * p)
    assert memory.device[State.GRADS] == Fraction(2 * PSI, t * p)
    assert memory.device[State.OPTIMIZER] == Fraction(12 * PSI, t * p * d)
    with_fp32_grads = analyze(
        "zero1×tp×pp",
        MODEL,
        mesh=Mesh.of(data=8, tensor=t, pipeline=p),
        precision="mixed_adam_fp32_grads",
    ).memory
    assert with_fp32_grads.model_state * t * p / PSI == Fraction(
        15, 2
    )  # 7.5 B per parameter, per t·p


def test_communication_adds_per_axis_on_the_locally_remaining_sizes() -> None:
    # SPEC §6: the data-axis reduction moves Ψ/(t·p) elements, not Ψ.
    d, t, p = 4, 2, 2
    schedule = analyze("zero1×tp×pp", MODEL, mesh=Mesh.of(data=d, tensor=t, pipeline=p)).schedule
    data_ops = [(o.op, o.elements) for o in schedule.collectives if o.axis == "data"]
    assert data_ops == [
        ("reduce_scatter", Fraction(PSI, t * p)),
        ("all_gather", Fraction(PSI, t * p)),
    ]
    assert set(schedule.ring_bytes_by_axis()) == {"data", "tensor", "pipeline"}
    assert schedule.ring_bytes == sum(schedule.ring_bytes_by_axis().values())


def test_fsdp_plus_tp_gathers_over_data_and_yields_the_tensor_slice() -> None:
    # SPEC §6 rule 4: ZeRO-3 on d with TP on t gathers over d; memory 16Ψ/(d·t).
    report = analyze("zero3×tp", MODEL, mesh=Mesh.of(data=4, tensor=2))
    assert report.memory.model_state == Fraction(16 * PSI, 8)
    gathers = [o for o in report.schedule.collectives if o.op == "all_gather"]
    # each of the 8 layers is a unit (the default): a layer of the tensor slice, Ψ/(t·8)
    assert {(o.axis, o.elements, o.group) for o in gathers} == {("data", Fraction(PSI, 2 * 8), 4)}


def test_hsdp_shards_within_a_group_and_replicates_across_groups() -> None:
    # FSDP HYBRID_SHARD: 16Ψ/d per device; ZeRO-3 traffic inside the group (3Ψ) plus an all-reduce
    # of the Ψ/d gradient slice across the r replica groups (2Ψ/d in ZeRO's convention).
    r, d = 2, 4
    report = analyze("hsdp", MODEL, mesh=Mesh.of(replica=r, data=d))
    assert report.memory.model_state == Fraction(16 * PSI, d)
    assert report.volume_psi == 3 + Fraction(2, d)
    grads = [
        (o.op, o.axis, o.elements, o.group) for o in report.schedule.ops if o.state is State.GRADS
    ]
    assert grads == [
        ("reduce_scatter", "data", PSI, d),
        ("all_reduce", "replica", Fraction(PSI, d), r),
        ("scale", "data", 0, r * d),
    ]
    assert [(o.op, o.axis) for o in report.schedule.ops if o.phase == "startup"] == [
        ("broadcast", "replica")
    ]


def test_the_replica_axis_is_outermost_in_the_rank_layout() -> None:
    mesh = Mesh.parse("replica=2,data=2,tensor=2")
    assert mesh.coords(5) == {"replica": 1, "data": 0, "tensor": 1, "pipeline": 0}
    assert mesh.group(5, "replica") == [1, 5]
    assert Mesh.parse("data=2,tensor=2").coords(3) == {"data": 1, "tensor": 1, "pipeline": 0}


# --- the safety rules: one composition breaks each, and only it -----------------------------
BREAKS = {
    # One axis splitting two dimensions of the same tensors (two axes sharing one is nested: legal).
    1: (
        Strategy(
            "tp-on-two-dims",
            Placement(params={"tensor": "S"}, grads={"tensor": "S"}, optimizer={"tensor": "S"}),
            shard_dims={"tensor": ("hidden", "layer")},
        ),
        "tensor=2",
        "state_consistency",
    ),
    2: (
        Strategy("local-grads", Placement(params="R", grads="M", optimizer="R")),
        "data=4",
        "gradient_integrity",
    ),
    # Optimizer state whole on tensor, updated from a tensor-sliced gradient: the copies drift.
    3: (
        Strategy(
            "whole-optimizer-on-tensor",
            Placement(params={"tensor": "S"}, grads={"tensor": "S"}, optimizer={"tensor": "R"}),
        ),
        "tensor=4",
        "state_consistency",
    ),
    4: (
        Strategy(
            "sg-on-tensor",
            Placement(
                params={"data": "SG", "tensor": "SG"},
                grads={"data": "S", "tensor": "S"},
                optimizer={"data": "S", "tensor": "S"},
            ),
        ),
        "data=2,tensor=2",
        "state_consistency",
    ),
}
OFFENDERS = {
    1: ("params, grads, optimizer", ("tensor",)),
    2: ("grads", ("data",)),
    3: ("optimizer", ("tensor",)),
    4: ("params", ("tensor",)),
}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_each_safety_rule_has_a_composition_that_breaks_it_and_only_it(rule: int) -> None:
    strategy, mesh, condition = BREAKS[rule]
    result = check(strategy, mesh=mesh)
    assert [v.rule for v in result.rule_violations] == [rule]
    violation = result.rule_violations[0]
    assert (violation.state, violation.axes) == OFFENDERS[rule]
    assert violation.name == RULES[rule] and f"SPEC §6 rule {rule}" in violation.explanation
    assert result.broken == [condition]
    assert f"rule {rule} ({RULES[rule]}) broken" in getattr(result, condition).reason.lower()


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_a_composition_that_breaks_a_rule_is_not_silently_priced(rule: int) -> None:
    strategy, mesh, _ = BREAKS[rule]
    with pytest.raises(PlacementError, match=f"rule {rule} \\({RULES[rule]}\\) broken"):
        analyze(strategy, MODEL, mesh=mesh)


def test_shard_dims_default_to_flat_hidden_layer() -> None:
    s = get_strategy("zero1×tp×pp")
    assert [s.shard_dim(a) for a in ("data", "tensor", "pipeline")] == [
        ("flat",),
        ("hidden",),
        ("layer",),
    ]
    assert Strategy("x", Placement(), shard_dims={"tensor": "layer"}).shard_dims == (
        ("tensor", "layer"),
    )
    with pytest.raises(PlacementError, match="shard_dims names axis 'vocab'"):
        Strategy("x", Placement(), shard_dims={"vocab": "flat"})


def test_zero2_under_pipeline_micro_batching_is_priced_m_times_with_a_warning() -> None:
    # SPEC §6 rule 5: a cost, not an error. DeepSpeed forbids ZeRO-2/3 with pipeline parallelism.
    placement = Placement(
        params={"data": "R", "pipeline": "S"},
        grads={"data": "S", "pipeline": "S"},
        optimizer={"data": "S", "pipeline": "S"},
    )
    mesh = Mesh.of(data=4, pipeline=2)
    once = analyze(Strategy("zero2×pp", placement, micro_batches=1), MODEL, mesh=mesh).schedule
    for m in (2, 4, 8):
        zero2_pp = Strategy("zero2×pp", placement, micro_batches=m)
        schedule = analyze(zero2_pp, MODEL, mesh=mesh).schedule
        reduce = [o for o in schedule.collectives if o.state is State.GRADS]
        assert len(reduce) == m
        assert sum(o.ring_bytes for o in reduce) == m * sum(
            o.ring_bytes for o in once.collectives if o.state is State.GRADS
        )
        result = check(zero2_pp, mesh=mesh)
        assert result.broken == [] and result.rule_violations == ()
        assert len(result.warnings) == 1 and f"{m} micro-batches" in result.warnings[0]
        assert "rule 5" in result.warnings[0]
    zero3_pp = Strategy(
        "zero3×pp",
        Placement(
            params={"data": "SG", "pipeline": "S"},
            grads={"data": "S", "pipeline": "S"},
            optimizer={"data": "S", "pipeline": "S"},
        ),
        micro_batches=4,
    )
    assert check(zero3_pp, mesh=mesh).warnings


def test_single_axis_results_are_unchanged_by_composition() -> None:
    # ZeRO §7: dp 2Ψ, zero1 2Ψ, zero2 2Ψ, zero3 3Ψ; Table 1: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
    n = 64
    for name, volume, memory in (
        ("dp", 2, 16),
        ("zero1", 2, 4 + Fraction(12, n)),
        ("zero2", 2, 2 + Fraction(14, n)),
        ("zero3", 3, Fraction(16, n)),
    ):
        report = analyze(name, 7.5e9, n)
        assert report.volume_psi == volume and report.memory.model_state == memory * Fraction(7.5e9)
        assert all(o.micro_batches == () and not o.stale for o in report.schedule.ops)


def test_fsdp2_with_tp_shards_one_dimension_over_two_axes_nested_and_that_is_legal() -> None:
    # SPEC §6 rule 1 (corrected): FSDP2 + TP shards dim 0 of a column-parallel weight on tensor and
    # again on data (_StridedShard); JAX's P(('data', 'tensor')) does the same. Nested, so legal.
    nested = get_strategy("zero3×tp").with_(
        name="fsdp2+tp", shard_dims={"data": "dim0", "tensor": "dim0"}
    )
    result = check(nested, mesh="data=2,tensor=2")
    assert result.rule_violations == () and result.broken == []
    assert analyze(nested, MODEL, mesh="data=2,tensor=2").memory.model_state == Fraction(
        16 * PSI, 4
    )


def test_one_axis_splitting_two_dimensions_breaks_rule_1() -> None:
    two = get_strategy("zero3×tp").with_(name="two-dims", shard_dims={"tensor": ("dim0", "dim1")})
    result = check(two, mesh="data=2,tensor=2")
    assert [(v.rule, v.axes) for v in result.rule_violations] == [(1, ("tensor",))]
    assert "one axis may split one dimension only" in result.rule_violations[0].explanation
