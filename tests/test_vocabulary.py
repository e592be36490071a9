"""One vocabulary: op kinds and faults are str enums, and a composed name has one printer and one
parser. A member equals, hashes and prints as its string, so callers, flags and printed output
read as before; a misspelt kind is an error, not an op no rule matches."""

from __future__ import annotations

import json

import pytest

from placement_edu import analyze, check
from placement_edu.errors import PlacementError
from placement_edu.faults import FAULTS, FaultName
from placement_edu.names import composed_name, data_part, parts, sequence_parallel, spelled
from placement_edu.placement import State
from placement_edu.pricing import compose
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.schedule import OP_COSTS, Op, OpKind
from placement_edu.strategies import COMPOSITIONS, get_strategy

pytestmark = pytest.mark.fast


def test_an_op_kind_is_its_string_to_a_caller_a_format_and_json() -> None:
    kind = OpKind.REDUCE_SCATTER
    assert kind == "reduce_scatter" and {"reduce_scatter": 1}[kind] == 1
    assert f"[{kind:16}]" == "[reduce_scatter  ]" and str(kind) == "reduce_scatter"
    assert json.dumps({"op": kind}) == '{"op": "reduce_scatter"}'


def test_an_op_made_from_a_name_holds_its_kind_and_a_misspelt_one_is_refused() -> None:
    op = Op("all_gather", State.PARAMS, "data", "forward", 8, 2, 4)
    assert op.op is OpKind.ALL_GATHER and op.ring_bytes == 12  # (N-1)/N of 16 B, N = 4
    with pytest.raises(PlacementError, match="unknown op 'all_gathr'; known: all_reduce"):
        Op("all_gathr", State.PARAMS, "data", "forward", 8, 2, 4)


def test_every_op_of_a_derived_schedule_is_a_kind_and_the_cost_table_is_keyed_by_kinds() -> None:
    model = TransformerSpec(layers=4, hidden=256, heads=4, seq=128, vocab=1000)
    report = analyze("zero1×tp×pp", model, mesh="data=2,tensor=2,pipeline=2")
    kinds = {o.op for o in report.schedule.ops}
    assert all(isinstance(k, OpKind) for k in kinds)
    assert {OpKind.ALL_REDUCE, OpKind.SEND, OpKind.RECV, OpKind.OPTIMIZER_STEP} <= kinds
    assert all(isinstance(k, OpKind) for k in OP_COSTS)


def test_a_fault_by_its_member_or_its_string_is_the_same_fault() -> None:
    assert list(FAULTS) == [f.value for f in FaultName]
    by_member = check("zero2", fault=FaultName.SKIP_PARAM_SYNC)
    by_string = check("zero2", fault="skip-param-sync")
    assert str(by_member) == str(by_string) and by_member.state_consistency.verdict == "BROKEN"


@pytest.mark.parametrize(
    "data, mesh, sp, attention, name",
    [
        ("zero1", "data=2,tensor=2,pipeline=2", False, "ring", "zero1×tp×pp"),
        ("zero1", "data=2,tensor=4", True, "ring", "zero1×tp+sp"),
        ("zero1", "data=2,context=2,tensor=2", False, "ring", "zero1×cp×tp"),
        ("dp", "data=4,context=2", False, "ulysses", "dp×cp_ulysses"),
        ("zero3", "replica=2,data=4", False, "ring", "hsdp"),
        ("zero2", "replica=2,data=2,tensor=2", False, "ring", "zero2+replica×tp"),
        ("dp", "tensor=8", False, "ring", "tp"),
        ("dp", "data=1", False, "ring", "single"),
    ],
)
def test_the_printer_names_a_composition_as_plan_prints_it(data, mesh, sp, attention, name):
    axes = [a for a, n in Mesh.parse(mesh) if n > 1]
    assert composed_name(data, axes, sp, attention) == name
    assert compose(data, Mesh.parse(mesh), 1, sp, attention).name == name


def test_the_parser_reads_what_a_user_types_and_what_the_printer_prints() -> None:
    assert spelled(" ZERO1xTP*pp ") == "zero1×tp×pp" and parts("zero1xtp+sp") == ["zero1", "tp+sp"]
    assert data_part("zero3×tp+sp") == "zero3" and data_part("dp") == "dp"
    assert sequence_parallel("zero1xtp+sp") and not sequence_parallel("zero1×tp×pp")
    assert all(get_strategy(n.replace("×", "x")).name == n for n in COMPOSITIONS)
    assert spelled("dpxtp", names=("dpxtp",)) == "dpxtp"  # a name with an x of its own stays
