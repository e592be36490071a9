"""The static checker (SPEC §5): gradient integrity and state consistency, and the five named
faults."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace

import pytest

from placement_edu import Mesh, Placement, PlacementError, State, Strategy, get_precision
from placement_edu.models import ConcreteModel
from placement_edu.checker import (
    CONDITIONS,
    check,
    default_model,
    gradient_integrity,
    state_consistency,
)
from placement_edu.cli import main
from placement_edu.faults import FAULTS, applicable_faults, apply_fault
from placement_edu.models import TensorSpec
from placement_edu.schedule import Schedule, derive_schedule
from placement_edu.strategies import COMPOSITIONS, STRATEGIES, example_mesh, get_strategy

pytestmark = pytest.mark.fast

NAMED = [*STRATEGIES, *COMPOSITIONS]
FAULTED = [
    (name, fault)
    for name in NAMED
    for fault in applicable_faults(get_strategy(name), example_mesh(get_strategy(name)))
]


def schedule_of(strategy: Strategy, mesh: Mesh) -> Schedule:
    return derive_schedule(strategy, default_model(mesh), mesh, get_precision("mixed_adam"))


@pytest.mark.parametrize("name", NAMED)
def test_every_named_strategy_and_composition_holds_both_conditions(name: str) -> None:
    result = check(name)
    assert result.broken == [], result
    assert result.rule_violations == ()
    for condition in CONDITIONS:
        assert getattr(result, condition).reason.endswith(".")


@pytest.mark.parametrize("name,fault", FAULTED)
def test_each_fault_breaks_exactly_its_own_condition(name: str, fault: str) -> None:
    # SPEC §5's table: each named fault breaks one condition and leaves the other intact.
    result = check(name, fault=fault)
    assert result.broken == [FAULTS[fault].condition]


def test_every_fault_applies_somewhere_and_the_pairs_match_the_spec() -> None:
    # expert parallelism's two faults need an expert axis: tests/test_expert_parallel.py
    assert {f for _, f in FAULTED} == set(FAULTS) - {
        "drop-routed-tokens",
        "skip-expert-grad-reduce",
    }
    assert applicable_faults(get_strategy("dp"), Mesh.of(data=4)) == (
        "skip-grad-reduce",
        "double-scale",
        "unsynced-init",
    )
    assert "skip-param-sync" in applicable_faults(
        get_strategy("zero1"), Mesh.of(data=4)
    )  # zero1, zero2
    assert "skip-param-sync" in applicable_faults(get_strategy("zero2"), Mesh.of(data=4))
    assert applicable_faults(get_strategy("zero3"), Mesh.of(data=4)) == (
        "skip-grad-reduce",
        "double-scale",
        "stale-gather",
    )
    assert applicable_faults(get_strategy("tp"), Mesh.of(tensor=4)) == ()


def test_faults_are_decided_from_placements_not_names() -> None:
    mine = Strategy("my-zero1", Placement(params="R", grads="R", optimizer="S"))
    assert applicable_faults(mine, Mesh.of(data=4)) == applicable_faults(
        get_strategy("zero1"), Mesh.of(data=4)
    )
    assert check(mine, fault="skip-param-sync").broken == ["state_consistency"]


def test_a_fault_that_does_not_apply_is_refused_naming_where_it_does() -> None:
    with pytest.raises(
        PlacementError, match="stale-gather.*does not apply to zero1.*applies to: zero3, fsdp"
    ):
        check("zero1", fault="stale-gather")
    with pytest.raises(
        PlacementError,
        match="skip-param-sync.*does not apply to dp.*applies to: zero1_allreduce, zero1, zero2",
    ):
        check("dp", fault="skip-param-sync")
    with pytest.raises(
        PlacementError, match="unknown fault 'skip-sync'; known faults: skip-grad-reduce"
    ):
        check("dp", fault="skip-sync")


def test_faults_are_small_edits_of_the_schedule() -> None:
    mesh = Mesh.of(data=4)
    zero1, zero3 = get_strategy("zero1"), get_strategy("zero3")
    s1, s3 = schedule_of(zero1, mesh), schedule_of(zero3, mesh)
    removed = [o for o in s1.ops if o not in apply_fault(s1, "skip-param-sync", zero1, mesh).ops]
    assert [(o.op, o.state, o.axis, o.phase) for o in removed] == [
        ("all_gather", State.PARAMS, "data", "step")
    ]
    removed = [o for o in s1.ops if o not in apply_fault(s1, "unsynced-init", zero1, mesh).ops]
    assert [(o.op, o.phase) for o in removed] == [("broadcast", "startup")]
    removed = [o for o in s3.ops if o not in apply_fault(s3, "skip-grad-reduce", zero3, mesh).ops]
    assert [(o.op, o.state) for o in removed] == [("reduce_scatter", State.GRADS)]
    doubled = apply_fault(s3, "double-scale", zero3, mesh)
    assert [o.group for o in doubled.ops if o.op == "scale"] == [4, 4]
    stale = apply_fault(s3, "stale-gather", zero3, mesh)
    assert len(stale.ops) == len(s3.ops) and all(o.stale for o in stale.ops if o.op == "all_gather")


def _paragraphs(result) -> list[str]:
    """The check's text, one entry a condition: its lines (wrapped at 100 characters, continued
    indented) joined back into one."""
    return [" ".join(p.split()) for p in re.split(r"\n(?! )", str(result))]


def test_a_fault_breaks_one_condition_directly_and_the_other_as_a_consequence() -> None:
    # SPEC §5: "from the next step on the other fails too as a consequence ... Say both, in that
    # order". Once the checker said state consistency holds under skip-grad-reduce, "from the same
    # summed gradient" (there is no sum), and gradient integrity holds under unsynced-init.
    skip = check("dp", fault="skip-grad-reduce")
    assert (skip.broken, skip.consequences) == (["gradient_integrity"], ["state_consistency"])
    assert "summed gradient" not in skip.state_consistency.reason
    assert "differ from the next step on" in skip.state_consistency.reason
    assert _paragraphs(skip)[1:] == [
        f"gradient integrity: BROKEN. {skip.gradient_integrity.reason}",
        f"state consistency: BROKEN as a consequence. {skip.state_consistency.reason}",
    ]
    assert skip.gradient_integrity.reason.endswith(
        "From the next step on, state consistency fails too, as a consequence."
    )
    init = check("dp", fault="unsynced-init")
    assert (init.broken, init.consequences) == (["state_consistency"], ["gradient_integrity"])
    lines = _paragraphs(init)  # the direct one first
    assert lines[1].startswith("state consistency: BROKEN. Params are replicated")
    assert lines[2].startswith("gradient integrity: BROKEN as a consequence. State consistency")
    assert "not the single-device gradient" in init.gradient_integrity.reason
    for strategy, fault in (("zero1", "skip-param-sync"), ("zero3", "stale-gather")):
        assert check(strategy, fault=fault).consequences == ["gradient_integrity"]
    # where no replica drifts, the other condition really holds: a gradient divided twice is the
    # same on every rank; owners' slices are re-gathered (zero2) or never copied (zero3)
    for strategy, fault in (("dp", "double-scale"), ("zero2", "skip-grad-reduce")):
        result = check(strategy, fault=fault)
        assert result.consequences == [] and result.state_consistency.holds
        assert "summed" not in result.state_consistency.reason or fault == "double-scale"
    assert "drift apart" not in check("zero3", fault="skip-grad-reduce").gradient_integrity.reason


def test_fault_records_are_frozen_and_say_what_they_break() -> None:
    for name, fault in FAULTS.items():
        assert fault.name == name and fault.condition in CONDITIONS and fault.what
    with pytest.raises(FrozenInstanceError):
        FAULTS["double-scale"].condition = "state_consistency"  # type: ignore[misc]
    with pytest.raises(TypeError):
        FAULTS["new"] = FAULTS["double-scale"]  # type: ignore[index]


def test_reasons_name_the_state_the_axis_and_the_collective() -> None:
    skip = check("zero3", fault="skip-grad-reduce").gradient_integrity.reason
    assert "partial on the data axis" in skip and "reduce_scatter of grads on data" in skip
    double = check("dp", fault="double-scale").gradient_integrity.reason
    assert "divided 2 times (4 then 4, 16 in all) instead of once by 4" in double
    sync = check("zero1", fault="skip-param-sync").state_consistency.reason
    assert "no all-gather of params on data follows optimizer_step" in sync
    init = check("dp", fault="unsynced-init").state_consistency.reason
    assert "no start-up broadcast" in init and "broadcast params on data" in init
    stale = check("zero3", fault="stale-gather").state_consistency.reason
    assert "previous step's slices" in stale and "all-gather of params on data" in stale


def test_hsdp_gradients_are_partial_on_both_batch_axes_and_scaled_once_by_r_times_d() -> None:
    result = check("hsdp", mesh="replica=2,data=4")
    assert "partial on data and replica (4 × 2 ranks)" in result.gradient_integrity.reason
    assert "divided by 8 exactly once" in result.gradient_integrity.reason
    # unsynced-init on hsdp removes the replica broadcast of the parameter slices
    assert check("hsdp", fault="unsynced-init").broken == ["state_consistency"]


def test_a_reduction_after_the_optimizer_step_leaves_the_gradient_partial() -> None:
    mesh = Mesh.of(data=4)
    dp = get_strategy("dp")
    ops = list(schedule_of(dp, mesh).ops)
    reduce = next(o for o in ops if o.op == "all_reduce")
    ops.remove(reduce)
    ops.append(reduce)  # misplaced: after optimizer_step
    condition = gradient_integrity(Schedule(tuple(ops)), dp, mesh)
    assert not condition.holds and "still partial on the data axis" in condition.reason


def test_an_extra_reduction_sums_twice_and_a_missing_scale_is_named() -> None:
    mesh = Mesh.of(data=4)
    dp = get_strategy("dp")
    ops = schedule_of(dp, mesh).ops
    reduce = next(o for o in ops if o.op == "all_reduce")
    twice = Schedule(ops[: ops.index(reduce)] + (reduce,) + ops[ops.index(reduce) :])
    assert "extra all_reduce" in gradient_integrity(twice, dp, mesh).reason
    unscaled = Schedule(tuple(o for o in ops if o.op != "scale"))
    assert "never divided by 4" in gradient_integrity(unscaled, dp, mesh).reason


def test_split_gradients_are_tracked_per_micro_batch() -> None:
    # zero2 under 4 micro-batches reduces each micro-batch's gradient as it is made
    # (SPEC §4 rule 5).
    z2 = get_strategy("zero2").with_(micro_batches=4)
    mesh = Mesh.of(data=4)
    ops = schedule_of(z2, mesh).ops
    assert [o.micro_batches for o in ops if o.op == "reduce_scatter"] == [(0,), (1,), (2,), (3,)]
    assert gradient_integrity(Schedule(ops), z2, mesh).holds
    first = next(o for o in ops if o.op == "reduce_scatter")
    condition = gradient_integrity(Schedule(tuple(o for o in ops if o is not first)), z2, mesh)
    assert not condition.holds and "for micro-batch 0:" in condition.reason


def test_sequence_parallel_norms_need_their_gradients_all_reduced_on_tensor() -> None:
    # SPEC §6 rule 3's example: params replicated across tensor ranks under sequence parallelism.
    # (SPEC §6 rule 3 as corrected: in plain Megatron TP the norms' inputs are identical, no extra
    # reduction; with sequence parallelism each tensor rank saw its own slice of the sequence.)
    plain = get_strategy("tp")
    sp = plain.with_(name="tp+sp", sequence_parallel=True)
    mesh = Mesh.of(tensor=2)
    assert check(sp, mesh=mesh).broken == [] and check(plain, mesh=mesh).broken == []
    assert [o for o in schedule_of(plain, mesh).ops if o.state is State.GRADS] == []
    ops = schedule_of(sp, mesh).ops
    # the checker's model leaves 8 layers x 6 x 64 elements whole on every tensor rank (norms,
    # biases)
    assert [(o.op, o.axis, o.elements) for o in ops if o.state is State.GRADS] == [
        ("all_reduce", "tensor", 8 * 6 * 64)
    ]
    without = Schedule(tuple(o for o in ops if o.state is not State.GRADS))
    condition = gradient_integrity(without, sp, mesh)
    assert (
        not condition.holds
        and "partial on the tensor axis" in condition.reason
        and "rule 3" in condition.reason
    )


def test_a_gather_on_an_axis_with_nothing_to_gather_is_misplaced() -> None:
    mesh = Mesh.of(data=2, tensor=2)
    z3tp = get_strategy("zero3×tp")
    ops = schedule_of(z3tp, mesh).ops
    gather = next(o for o in ops if o.op == "all_gather")
    wrong = Schedule(tuple(replace(o, axis="tensor") if o == gather else o for o in ops))
    assert (
        "all-gather of params on tensor in forward has no slices to rebuild"
        in state_consistency(wrong, z3tp, mesh).reason
    )


def test_the_default_mesh_is_small_and_documented() -> None:
    assert str(check("zero3").mesh) == "data=4"
    assert str(check("zero1×tp×pp").mesh) == "data=2,tensor=2,pipeline=2"
    assert str(check("hsdp").mesh) == "replica=2,data=2"


def test_check_result_serialises_and_is_frozen() -> None:
    result = check("zero3", fault="skip-grad-reduce")
    out = result.to_dict()
    assert out["gradient_integrity"]["holds"] is False and out["state_consistency"]["holds"] is True
    assert out["broken"] == ["gradient_integrity"] and out["warnings"] == []
    with pytest.raises(FrozenInstanceError):
        result.fault = None  # type: ignore[misc]


# --- command line -----------------------------------------------------------------------------
def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    status = main(["check", *args, "--json"])
    out = json.loads(capsys.readouterr().out)
    # a linter's exit status (issue 43 item 8): 1 exactly when a condition is broken
    assert status == (1 if out["broken"] or out["broken_as_consequence"] else 0)
    return out


def test_cli_zero3_holds_both_conditions(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "zero3")
    assert out["gradient_integrity"]["holds"] and out["state_consistency"]["holds"]
    assert out["warnings"] == []


def test_cli_skip_grad_reduce_breaks_gradient_integrity_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run_json(capsys, "zero3", "--fault", "skip-grad-reduce")
    assert not out["gradient_integrity"]["holds"] and out["state_consistency"]["holds"]


def test_cli_zero1_skip_param_sync_breaks_state_consistency_then_integrity_as_its_consequence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run_json(capsys, "zero1", "--fault", "skip-param-sync")
    assert out["broken"] == ["state_consistency"]
    assert out["broken_as_consequence"] == ["gradient_integrity"]
    assert out["state_consistency"] == {
        "holds": False,
        "direct": True,
        "reason": out["state_consistency"]["reason"],
    }
    assert not out["gradient_integrity"]["holds"] and not out["gradient_integrity"]["direct"]


def test_cli_composition_on_a_given_mesh(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "zero3xtp", "--mesh", "data=4,tensor=2")
    assert out["mesh"] == {"data": 4, "tensor": 2} and out["broken"] == []


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["zero1", "--fault", "stale-gather"],
            "applies to: zero3, fsdp, fsdp_grad_op, zero3_offload, zero3×tp, hsdp",
        ),
        (["zero9"], "unknown strategy 'zero9'"),
        (["dp", "--fault", "nope"], "unknown fault 'nope'"),
        (["dp", "--mesh", "data=two"], "mesh degree 'two' for axis 'data' is not a whole number"),
        (["dp", "--mesh", "tensor=2"], "the mesh (tensor=2) has no data axis"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "placement_edu.cli", "check", *args], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_cli_text_output_says_holds_or_broken(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "dp", "--fault", "double-scale"]) == 1
    text = capsys.readouterr().out
    assert "gradient integrity: BROKEN" in text and "state consistency: holds" in text


def _by_layer(equal: bool) -> ConcreteModel:
    """8 layers, one gather unit each (FSDP's wrapping): equal layers, or every third one wider
    (the schedule then holds runs of equal units between single ones)."""
    tensors = []
    for layer in range(8):
        w = 8 if equal or layer % 3 else 16
        tensors += [
            TensorSpec(f"{layer}.q", (w, 8), layer, "col"),
            TensorSpec(f"{layer}.o", (8, w), layer, "row"),
            TensorSpec(f"{layer}.norm", (8,), layer, None),
        ]
    return ConcreteModel(tuple(tensors), units="layer", boundary_elements=16)


@pytest.mark.parametrize("equal", [True, False], ids=["equal layers", "unequal layers"])
def test_a_gradient_reduced_unit_by_unit_is_reduced_once_and_faults_are_still_caught(equal):
    # once: zero3 on ConcreteModel(units="layer") was BROKEN, "an extra reduce_scatter": each
    # unit's reduce-scatter was taken for a second reduction of the whole gradient
    model = _by_layer(equal)
    for name in (*STRATEGIES, *COMPOSITIONS):
        strategy = get_strategy(name)
        assert check(name, model=model).broken == [], name
        for fault in applicable_faults(strategy, example_mesh(strategy)):
            assert FAULTS[fault].condition in check(name, model=model, fault=fault).broken


def test_a_unit_wise_reduction_done_twice_is_still_an_extra_reduction() -> None:
    zero3, mesh, model = get_strategy("zero3"), Mesh.of(data=4), _by_layer(equal=False)
    entries = derive_schedule(zero3, model, mesh, get_precision("mixed_adam")).entries
    # the 8 units' reduce-scatters: single ops and runs of equal units (Repeat), then the scale
    reductions = tuple(e for e in entries if next(iter(Schedule((e,)).ops)).op == "reduce_scatter")
    assert sum(units for _, units, _ in Schedule(reductions).held()) == model.gather_units == 8
    scale = entries.index(next(e for e in entries if getattr(e, "op", "") == "scale"))
    twice = Schedule(entries[:scale] + reductions + entries[scale:])
    assert gradient_integrity(Schedule(entries), zero3, mesh, model=model).holds
    assert gradient_integrity(twice, zero3, mesh, model=model).reason.startswith(
        "Grads are summed on the data axis where they are not partial (an extra reduce_scatter)"
    )


@pytest.mark.parametrize(
    "args, status",
    [
        (["zero3"], 0),
        (["zero3", "--fault", "skip-grad-reduce"], 1),  # broken directly
        (["zero1", "--fault", "skip-param-sync"], 1),  # and the other as its consequence
        (["dp×tp", "--mesh", "data=2,tensor=2"], 0),
        (["zero9"], 2),  # bad input
    ],
)
def test_check_exits_1_when_a_condition_is_broken_as_a_linter_does(
    args: list[str], status: int
) -> None:
    """Issue 43 item 8: a script can tell a broken condition from a clean check; the status and
    its meaning are in ``check --help``."""
    result = subprocess.run(
        [sys.executable, "-m", "placement_edu.cli", "check", *args], capture_output=True, text=True
    )
    assert result.returncode == status, result.stderr
    if status == 1:
        assert "BROKEN" in result.stdout
    help_text = " ".join(
        subprocess.run(
            [sys.executable, "-m", "placement_edu.cli", "check", "--help"],
            capture_output=True,
            text=True,
        ).stdout.split()
    )
    assert "Exit status: 0 when every condition holds, 1 when one is broken, 2 on bad input" in (
        help_text
    )


def test_check_on_a_tensor_axis_says_the_heads_are_assumed(capsys) -> None:
    """Issue 43 item 7: ``check tp --mesh tensor=3`` holds as placements; it says that no head
    count was checked, and where one is."""
    assert main(["check", "tp", "--mesh", "tensor=3"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "assumed: the checker's abstract model has no attention heads, so tensor=3" in text
    assert "table --heads H --mesh tensor=3 refuses them otherwise" in text
    assert main(["check", "dp", "--mesh", "data=3"]) == 0
    assert "assumed" not in capsys.readouterr().out  # no tensor axis, nothing assumed


def test_every_sentence_the_checker_says_is_written_in_its_messages_module() -> None:
    """Issue 41 item 4: the walks (integrity.py, consistency.py) decide which findings a schedule
    has, messages.py says them. A sentence typed into a walk (a string literal of prose, outside
    a docstring) is one a reader looking at messages.py would miss."""
    import ast
    from pathlib import Path

    import placement_edu.checker as checker

    typed = {}
    for walk in ("integrity.py", "consistency.py"):
        tree = ast.parse((Path(checker.__file__).parent / walk).read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        typed[walk] = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and len(node.value.split()) >= 4  # prose, not a name such as "optimizer_step"
        ]
    assert typed == {"integrity.py": [], "consistency.py": []}
    # ...and the guard sees one: the messages module is full of them
    assert (
        "params are replicated on the data axis (4 ranks)"
        in checker.messages.no_startup_broadcast("data", 4)
    )
