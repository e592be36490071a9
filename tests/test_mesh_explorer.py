"""The mesh explorer: moving a degree or a per-axis placement re-prices the composition with the
core (memory multiplies, communication adds, SPEC §6), and a composition that breaks a safety rule
is not priced -- the rule is shown instead."""

from __future__ import annotations

import pytest

from placement_edu import State, analyze, get_strategy
from placement_edu.presentation.mesh_explorer import (
    MODEL,
    TENSOR_CHOICES,
    MeshExplorer,
    composed_strategy,
)

pytestmark = pytest.mark.fast


def test_the_default_is_zero1_tp_pp_and_every_number_is_the_cores():
    explorer = MeshExplorer(data=2, tensor=2, pipeline=2, micro_batches=4)
    view = explorer.view
    assert view.priced and str(view.mesh) == "data=2,tensor=2,pipeline=2"
    # The same placement as the named composition: the core prices it the same, bytes and ops.
    named = analyze(get_strategy("zero1×tp×pp"), MODEL, mesh="data=2,tensor=2,pipeline=2")
    assert view.strategy.placement == named.strategy.placement
    assert view.report.memory.model_state == named.memory.model_state
    assert view.report.schedule.ring_bytes == named.schedule.ring_bytes
    heights = [bar.get_height() for bar in explorer.memory_bars[:3]]
    assert heights == pytest.approx(
        [float(named.memory.device[s]) / 1e9 for s in (State.PARAMS, State.GRADS, State.OPTIMIZER)]
    )
    by_axis = named.schedule.ring_bytes_by_axis()
    assert [b.get_height() for b in explorer.comm_bars] == pytest.approx(
        [float(by_axis[a]) / 1e9 for a in ("data", "tensor", "pipeline")]
    )
    assert bytes(explorer.image.value[:4]) == b"\x89PNG"


def test_moving_the_data_degree_divides_the_optimizer_and_moves_the_bars():
    explorer = MeshExplorer(data=2, tensor=2, pipeline=2)
    before = explorer.memory_bars[2].get_height()
    explorer.data.value = 8  # O is S on data: memory multiplies
    assert explorer.memory_bars[2].get_height() == pytest.approx(before / 4)
    strategy, mesh = explorer.strategy_and_mesh()
    assert (
        explorer.view.report.memory.device[State.OPTIMIZER]
        == analyze(strategy, MODEL, mesh=mesh).memory.device[State.OPTIMIZER]
    )


@pytest.mark.parametrize(
    "choice,rule", [(c, int(c.split("rule ")[1][0])) for c in TENSOR_CHOICES if "rule" in c]
)
def test_a_composition_that_breaks_a_rule_is_not_priced_and_the_rule_is_named(choice, rule):
    explorer = MeshExplorer(data=2, tensor=2, pipeline=1)
    explorer.tensor_choice.value = choice
    assert not explorer.view.priced and explorer.memory_bars == []
    assert [v.rule for v in explorer.view.checked.rule_violations] == [rule]
    assert f"rule {rule} (" in explorer.readout.value and "not priced" in explorer.readout.value


def test_rule_2_and_a_split_nothing_axis_and_rule_5_warnings():
    explorer = MeshExplorer(data=2, tensor=2, pipeline=1)
    explorer.data_choice.value = "G M, no reduction (breaks rule 2)"
    assert [v.rule for v in explorer.view.checked.rule_violations] == [2]
    assert explorer.view.checked.broken == ["gradient_integrity"]
    explorer.data_choice.value = "dp: P R, G R, O R"
    explorer.tensor_choice.value = "P R, G R, O R: nothing split (refused)"
    assert (
        explorer.view.refused.startswith("refused:") and "nothing is split" in explorer.view.refused
    )
    explorer.tensor_choice.value = "Megatron TP: P S, G S, O S"
    explorer.data_choice.value = "zero3: P SG, G S, O S"
    explorer.pipeline.value, explorer.micro_batches.value = (
        2,
        8,
    )  # ZeRO-3 under micro-batching: ×m, warned
    assert explorer.view.priced and "rule 5" in explorer.view.checked.warnings[0]


def test_hybrid_sharding_on_a_replica_axis_is_hsdp():
    strategy, mesh = composed_strategy(
        2, 4, 1, 1, "zero3: P SG, G S, O S", "Megatron TP: P S, G S, O S", "stages: P S, G S, O S"
    )
    assert strategy.placement == get_strategy("hsdp").placement and str(mesh) == "replica=2,data=4"
