"""Expert parallelism run on gloo (issue 26, item 2): a toy MoE layer on d·e ranks, its
all-to-alls and gradient reductions recorded by the runtime's ledger (``runtime.comm.Comm``) and
measured against the core's schedule entry by entry, its outputs and gradients against one
process (``placement_edu/runtime/axes/expert_layer.py``). The runs go through the runtime's
launcher,
as ``placement-edu run`` does: ranks forked from its forkserver, which imported torch once (about a
second a run, where ``expert_layer.launch`` spawns d·e fresh interpreters: 3-6 s); one test checks
that both launches measure the same."""

from __future__ import annotations

from typing import Any

import pytest

from placement_edu.runtime.axes import expert_layer
from placement_edu.runtime.axes.expert_layer import ExpertRun, measured_is_predicted
from placement_edu.runtime.axes.expert_measure import measurement
from placement_edu.runtime.processes.launcher import launch as launch_jobs

pytestmark = pytest.mark.runtime


def launch(run: ExpertRun) -> list[dict[str, Any]]:
    """``run`` on the runtime's launcher: each rank's result, by rank (as ``expert_layer.launch``
    returns them)."""
    return launch_jobs([run], run.world, progress=False)[0]


def test_the_spawned_launch_measures_what_the_runtimes_launcher_measures() -> None:
    run = ExpertRun(2, 2)
    spawned, forked = expert_layer.launch(run), launch(run)
    assert [r["ledger"] for r in spawned] == [r["ledger"] for r in forked]
    assert [r["rank"] for r in spawned] == [0, 1]
    assert [r["dropped"] for r in spawned] == [r["dropped"] for r in forked]
    assert max(r["deviation"] for r in spawned + forked) < 1e-12


@pytest.mark.parametrize("ranks, top_k, each", [(2, 2, 2048), (4, 1, 1024)])
def test_the_measured_all_to_alls_are_the_predicted_ones_and_match_one_process(
    ranks: int, top_k: int, each: int
) -> None:
    # By hand: T = b·s = 16 tokens per rank, E = 4, cf = 1: C = ⌈k·16/4⌉ = 4k slots per expert,
    # an E·C·h float64 buffer of 4·4k·8·8 B = 1024·k B per all-to-all, (e-1)/e of it sent;
    # dispatch and combine in forward, the same two in backward; then the dense grads all-reduced
    # over the e ranks: the toy's router, h·E = 32 float64 = 256 B, ring 2·(e-1)/e of it -- the
    # core's too (its model is the layer alone), so every entry is compared whole.
    run = ExpertRun(ranks, top_k)
    sent = each * (ranks - 1) // ranks
    a2a = ("activations", "expert", ranks, each, sent)
    assert (
        run.predicted()[:4]
        == [("forward", "all_to_all", *a2a)] * 2 + [("backward", "all_to_all", *a2a)] * 2
    )
    router = (
        "backward",
        "all_reduce",
        "grads",
        "expert",
        ranks,
        256,
        2 * 256 * (ranks - 1) // ranks,
    )
    assert run.predicted()[4] == router
    results = launch(run)
    for result in results:
        assert measured_is_predicted(result["ledger"], run.predicted())
        assert result["ledger"][4] == router
        assert result["deviation"] < 1e-12  # float64 rounding (measured: 1.1e-16)
    # the router's tokens: what arrived at each expert from each rank is what the core's routing
    # of that rank's gate logits keeps (top-k, then the first C = 4k per expert)
    measured = measurement(run, results)
    assert measured.tokens_match
    assert [sum(r.kept) for r in measured.routed] == [sum(a) for a in measured.arrived]
    assert all(sum(r.chosen) == 16 * top_k for r in measured.routed)  # T·k copies a rank


def test_on_data_times_expert_the_two_gradient_groups_are_the_cores() -> None:
    # data=2,expert=2: the dense grads over all 4 ranks; each rank's 2 experts' grads
    # (2·3·h·f = 768 float64 = 6,144 B) over their 2 data replicas -- the core's expert all-reduce
    # to the byte (ring 2·1/2·6,144 = 6,144 B)
    run = ExpertRun(2, 2, data=2)
    expert_reduce = ("backward", "all_reduce", "grads", "data", 2, 6144, 6144)
    assert run.predicted()[-1] == expert_reduce
    assert run.predicted()[-2][:5] == ("backward", "all_reduce", "grads", "expert", 4)
    for result in launch(run):
        assert measured_is_predicted(result["ledger"], run.predicted())
        assert result["ledger"][-1] == expert_reduce
        assert result["deviation"] < 1e-12


def test_a_one_byte_difference_fails_the_comparison() -> None:
    predicted = ExpertRun(2, 2).predicted()
    shorter = [(*predicted[0][:5], predicted[0][5] - 1, predicted[0][6]), *predicted[1:]]
    assert measured_is_predicted(predicted, predicted)
    assert not measured_is_predicted(shorter, predicted)
    assert not measured_is_predicted(predicted[:-1], predicted)


@pytest.mark.parametrize(
    "run",
    [ExpertRun(2, 2, drop=True), ExpertRun(2, 2, data=2, skip_expert_reduce=True)],
    ids=["drop-routed-tokens", "skip-expert-grad-reduce"],
)
def test_each_expert_fault_run_for_real_breaks_the_equivalence(run: ExpertRun) -> None:
    results = launch(run)
    assert max(r["deviation"] for r in results) > 1e-3
    # dropping the block bound for the last expert rank empties its experts' arrivals: the
    # routing comparison names it; skipping the data reduction leaves the routing intact
    arrived = measurement(run, results)
    assert arrived.tokens_match is not run.drop
    if run.drop:
        assert all(a[2:] == (0, 0) for a in arrived.arrived)


def test_run_executes_the_moe_layer_on_an_expert_axis(capsys) -> None:
    from placement_edu.cli import main

    # one launch of d·e = 2·2 ranks through the runtime's launcher and worker
    assert main(["run", "dp", "--world-size", "4", "--mesh", "data=2,expert=2"]) == 0
    out = capsys.readouterr().out
    assert "top-2 MoE layer on data=2,expert=2" in out
    # by hand: top-2, T = 16, E = 4: C = 8 slots, 4·8·8 float64 = 2,048 B per all-to-all, half of
    # it sent over e = 2; the router's grads h·E = 32 float64 = 256 B over the 4 ranks (ring
    # 2·3/4·256 = 384 B); the experts' grads 2·3·h·f = 768 float64 = 6,144 B over their 2 data
    # replicas (ring 2·1/2·6,144 = 6,144 B)
    assert out.count("all_to_all activations on expert over 2: 2,048, 1,024 | 2,048, 1,024") == 4
    assert "backward all_reduce grads on expert over 4: 256, 384 | 256, 384" in out
    assert "backward all_reduce grads on data over 2: 6,144, 6,144 | 6,144, 6,144" in out
    assert "measured = predicted on every rank, entry by entry: yes; tokens per expert: yes" in out
    assert ": equivalent (float64 tolerance 1e-10)" in out


@pytest.mark.parametrize(
    "argv, says",
    [
        (["zero3", "--world-size", "4", "--mesh", "data=2,expert=2"], "'zero3' on data=2,expert=2"),
        (["dp", "--world-size", "6", "--mesh", "data=2,expert=3"], "4 experts cannot be split"),
        (["dp", "--world-size", "2", "--mesh", "expert=2", "--fault", "hang"], "got --fault hang"),
    ],
    ids=["a-sharding-strategy", "e-not-dividing-E", "a-fault-the-layer-has-not"],
)
def test_run_refuses_what_the_expert_axis_cannot_derive_in_one_line(
    capsys, argv: list[str], says: str
) -> None:
    from placement_edu.cli import main

    assert main(["run", *argv]) == 2  # refused before any rank starts
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and says in err
