"""Expert parallelism run on gloo (issue 26, item 2): a toy MoE layer on d·e ranks, its
all-to-alls and gradient reductions measured against the core's schedule entry by entry, its
outputs and gradients against one process (``placement_edu/runtime/expert_layer.py``)."""

from __future__ import annotations

import pytest

from placement_edu import Mesh, get_precision
from placement_edu.runtime.expert_layer import ExpertRun, launch
from placement_edu.schedule import derive_schedule
from placement_edu.strategies import get_strategy

pytestmark = pytest.mark.runtime


@pytest.mark.parametrize("ranks, top_k, each", [(2, 2, 2048), (4, 1, 1024)])
def test_the_measured_all_to_alls_are_the_predicted_ones_and_match_one_process(
    ranks: int, top_k: int, each: int
) -> None:
    # By hand: T = b·s = 16 tokens per rank, E = 4, cf = 1: C = ⌈k·16/4⌉ = 4k slots per expert,
    # an E·C·h float64 buffer of 4·4k·8·8 B = 1024·k B per all-to-all; dispatch and combine in
    # forward, the same two in backward; then the router's grads (h·E = 32 float64) all-reduced.
    run = ExpertRun(ranks, top_k)
    assert (
        run.predicted()
        == [("all_to_all", "forward", each, ranks)] * 2
        + [("all_to_all", "backward", each, ranks)] * 2
    )
    for result in launch(run):
        assert result["ledger"] == [*run.predicted(), ("all_reduce", "backward", 256, ranks)]
        assert result["deviation"] < 1e-12  # float64 rounding (measured: 1.1e-16)


def test_on_data_times_expert_the_two_gradient_groups_are_the_cores() -> None:
    # data=2,expert=2: the router's grads over all 4 ranks; each rank's 2 experts' grads
    # (2·3·h·f = 768 float64 = 6,144 B) over their 2 data replicas -- the core's expert all-reduce
    # exactly; its dense one counts a whole model's dense weights, so only its group is compared
    run = ExpertRun(2, 2, data=2)
    core = derive_schedule(
        get_strategy("dp"), run.spec(), Mesh.of(data=2, expert=2), get_precision("fp64_adam")
    )
    reductions = [
        (o.op, o.axis, o.group, o.payload_bytes) for o in core.ops if o.op == "all_reduce"
    ]
    assert reductions[1] == ("all_reduce", "data", 2, 6144)
    assert reductions[0][:3] == ("all_reduce", "expert", 4)
    for result in launch(run):
        assert result["ledger"] == [
            *run.predicted(),
            ("all_reduce", "backward", 256, 4),
            ("all_reduce", "backward", 6144, 2),
        ]
        assert result["deviation"] < 1e-12


@pytest.mark.parametrize(
    "run",
    [ExpertRun(2, 2, drop=True), ExpertRun(2, 2, data=2, skip_expert_reduce=True)],
    ids=["drop-routed-tokens", "skip-expert-grad-reduce"],
)
def test_each_expert_fault_run_for_real_breaks_the_equivalence(run: ExpertRun) -> None:
    assert max(r["deviation"] for r in launch(run)) > 1e-3
