"""What a plan's schedules and prices share (issue 43, plan's bound on 2^40 devices): the
parameters' gathers, the gradients' reductions and the pipeline's sends for every m and every
placement that reads them alike (``schedule.derive.kept_gather_before_use``,
``kept_reduce_partial_grads``, ``boundary``), each schedule's counted ops walked once
(``Schedule.counted``), every op's seconds and those on the critical path from one reading of
the schedule (``timing.communication.comm_times``), a placement's hash found once, and a
validation kept for every mesh of one shape. Each sharing rests on a claim these tests check
against the unshared derivation."""

from __future__ import annotations

import pickle
from dataclasses import fields
from itertools import product

import pytest

from placement_edu.axes import validate, validate_afresh
from placement_edu.candidates import compose
from placement_edu.errors import MAX_LISTED_OPS, PlacementError
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.placement import Placement, State
from placement_edu.precision import get_precision
from placement_edu.pricing import comm_seconds
from placement_edu.schedule import derive, derive_schedule
from placement_edu.strategies import COMPOSITIONS, STRATEGIES
from placement_edu.timing import HARDWARE, comm_time
from placement_edu.timing.communication import comm_times

pytestmark = pytest.mark.fast

MODEL = TransformerSpec(layers=8, hidden=64, heads=8, seq=32, vocab=100)
PRECISION = get_precision("mixed_adam")
MESH = Mesh.of(data=4, tensor=2, pipeline=2)
HW = HARDWARE["h100-nvlink-ib"]


def fresh(strategy, mesh=MESH):
    """The schedule derived with nothing shared kept from before."""
    derive._SHARED_OPS.clear()
    return derive_schedule(strategy, MODEL, mesh, PRECISION)


@pytest.mark.parametrize("data", ["zero1", "zero2", "zero3", "fsdp_grad_op"])
def test_a_schedule_is_the_same_whether_its_shared_ops_were_kept_or_not(data: str) -> None:
    # m = 1, 2, 8 of one placement, 1F1B and interleaved, share the gathers', the reductions' and
    # the pipeline sends' ops with each other and with dp's (derived first)
    for m, sp, v in product((2, 4, 8), (False, True), (1, 2)):
        strategy = compose(data, MESH, m, sp)
        if v > 1:
            strategy = strategy.with_(pipeline_schedule="interleaved", virtual_stages=v)
        derive_schedule(compose("dp", MESH, m, sp), MODEL, MESH, PRECISION)  # (kept first)
        kept = derive_schedule(strategy, MODEL, MESH, PRECISION)
        assert kept == fresh(strategy)
        assert list(kept.counted()) == list(kept.counted())  # (walked once, read again)


def test_zero3_gathers_its_parameters_in_forward_and_again_in_backward_at_every_m() -> None:
    for m in (1, 2):
        ops = [o for o, _ in fresh(compose("zero3", MESH, m)).counted()]
        gathers = [o for o in ops if o.op == "all_gather" and o.state is State.PARAMS]
        assert {(o.phase, o.axis) for o in gathers} == {("forward", "data"), ("backward", "data")}


@pytest.mark.parametrize("mesh", [MESH, Mesh.of(data=2, context=2, tensor=2)], ids=str)
def test_one_reading_prices_every_selection_as_comm_time_alone_does(mesh: Mesh) -> None:
    strategy = compose("zero2", mesh, 4, True)
    schedule = derive_schedule(strategy, MODEL, mesh, PRECISION)
    together = comm_times(schedule, HW, mesh, (None, True, False))
    alone = tuple(comm_time(schedule, HW, mesh, c) for c in (None, True, False))
    assert together == alone  # the same floats, summed in the same order
    assert together[1]["forward"] > 0 and together[0]["backward"] > together[1]["backward"]


def test_comm_seconds_answers_each_selection_from_the_shared_reading() -> None:
    strategy = compose("zero2", MESH, 1, True)
    schedule = derive_schedule(strategy, MODEL, MESH, PRECISION)
    for critical in (None, True, False):
        assert comm_seconds(strategy, MODEL, MESH, PRECISION, HW, critical) == comm_time(
            schedule, HW, MESH, critical
        )


def test_a_placements_hash_is_its_fields_hash_and_never_travels_to_another_process() -> None:
    placement = Placement(params="SG", grads="S", optimizer="S")
    compared = tuple(getattr(placement, f.name) for f in fields(placement) if f.compare)
    assert hash(placement) == hash(compared)  # (what dataclass's own __hash__ gives)
    assert hash(placement) == hash(Placement(params={"data": "SG"}, grads="S", optimizer="S"))
    copy = pickle.loads(pickle.dumps(placement))  # (a str's hash differs between processes)
    assert "_hash" not in copy.__dict__ and copy == placement and hash(copy) == hash(placement)


def verdict(strategy, mesh: Mesh, strict: bool = True) -> str:
    """What ``axes.validate_afresh`` says, derived afresh: "" or its refusal."""
    try:
        validate_afresh(strategy, mesh, strict)
    except PlacementError as error:
        return type(error).__name__
    return ""


def test_validation_reads_a_meshs_shape_never_its_degrees() -> None:
    # validate keeps a pass by the mesh's axes, which split and which are too wide to broadcast
    # rank by rank: every named strategy and composition gets one verdict on meshes of one shape
    shapes = [
        [Mesh.of(data=d) for d in (2, 3, 1024, 2**16)],
        [Mesh.of(data=d) for d in (2**17, 2**40)],  # (over MAX_LISTED_OPS)
        [Mesh.of(data=d, tensor=t, pipeline=p) for d, t, p in ((2, 2, 2), (2**16, 8, 64))],
        [Mesh.of(data=d, tensor=t, pipeline=p) for d, t, p in ((2**17, 2, 2), (2**30, 8, 64))],
        [Mesh.of(replica=r, data=d) for r, d in ((2, 2), (2**10, 8), (2**30, 2**10))],
        [Mesh.of(data=d, context=c, tensor=2) for d, c in ((2, 2), (2**16, 2**10))],
        [Mesh.of(data=1, tensor=t) for t in (2, 8)],
    ]
    for strategy, meshes in product([*STRATEGIES.values(), *COMPOSITIONS.values()], shapes):
        for strict in (True, False):
            assert len({verdict(strategy, mesh, strict) for mesh in meshes}) == 1, strategy.name
    # the one degree it reads: an owner's broadcast rank by rank, up to MAX_LISTED_OPS ranks
    owners = STRATEGIES["zero1_allreduce"]
    assert verdict(owners, Mesh.of(data=MAX_LISTED_OPS)) == ""
    assert verdict(owners, Mesh.of(data=MAX_LISTED_OPS + 1)) == "PlacementError"
    validate(owners, Mesh.of(data=MAX_LISTED_OPS))  # (kept)
    with pytest.raises(PlacementError, match="one broadcast per data rank"):
        validate(owners, Mesh.of(data=MAX_LISTED_OPS + 1))
