"""Expert parallelism run on gloo (issue 26, item 2): a toy MoE layer on e ranks, its all-to-alls
measured against the core's schedule entry by entry, its gradients against one process
(``placement_edu/runtime/expert_layer.py``)."""

from __future__ import annotations

import pytest

from placement_edu.runtime.expert_layer import ExpertRun, launch

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


def test_dropping_the_tokens_routed_to_one_rank_breaks_the_equivalence() -> None:
    # the drop-routed-tokens fault run for real: the same bytes move, the gradient is not the
    # single-process one
    results = launch(ExpertRun(2, 2, drop=True))
    assert max(r["deviation"] for r in results) > 1e-3
