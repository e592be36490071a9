""" "Measured = predicted" is a value comparison on the core's own types (Memory, Schedule), and it
fails -- naming what differs -- on a one-byte or one-op difference. No processes are started: the
measured side here is the prediction with one thing changed, as a faulty measurement would be."""

from __future__ import annotations

from dataclasses import replace

from placement_edu import State
from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.result import RunResult, Side, predict

import pytest

pytestmark = pytest.mark.fast


def _result(measured: list[Side], config: RunConfig) -> RunResult:
    return RunResult(config, [0.0], predict(config), measured, [[] for _ in measured])


def test_an_exact_copy_of_the_prediction_matches() -> None:
    config = RunConfig("zero3", world_size=4)
    result = _result(predict(config), config)
    assert result.memory_matches() and result.ledger_matches() and result.mismatches() == []


def test_one_byte_more_of_optimizer_state_is_detected_and_named() -> None:
    config = RunConfig("zero3", world_size=4)
    sides = predict(config)
    memory = sides[2].memory
    one_more = replace(
        memory, device={**memory.device, State.OPTIMIZER: memory.device[State.OPTIMIZER] + 1}
    )
    sides[2] = replace(sides[2], memory=one_more)
    result = _result(sides, config)
    assert not result.memory_matches() and result.ledger_matches()
    # Ψ = 624 float64 elements on 4 ranks: 156 per slice, Adam's m and v: 156 x 16 = 2496 B
    assert result.mismatches() == [
        "rank 2 optimizer (device): 2496 B vs 2497 B (predicted vs measured)"
    ]


def test_a_missing_collective_is_detected_and_named() -> None:
    config = RunConfig("zero1", world_size=4)
    sides = predict(config)
    step = sides[0].steps[0]
    without_gather = replace(step, entries=tuple(o for o in step.ops if o.op != "all_gather"))
    sides[0] = replace(sides[0], steps=(without_gather,))
    result = _result(sides, config)
    assert result.memory_matches() and not result.ledger_matches()
    (message,) = result.mismatches()
    assert message.startswith(
        "rank 0 step 0 ledger: entry 1 of 2: step all_gather params on data (group 4)"
    )
    assert message.endswith("vs nothing (2 vs 1 entries) (predicted vs measured)")


def test_a_one_byte_longer_message_is_detected() -> None:
    config = RunConfig("dp", world_size=2)
    sides = predict(config)
    step = sides[1].steps[0]
    first = step.ops[0]
    longer = replace(first, elements=first.elements + type(first.elements)(1) / first.element_bytes)
    sides[1] = replace(sides[1], steps=(replace(step, entries=(longer,) + step.ops[1:]),))
    result = _result(sides, config)
    assert not result.ledger_matches()
    assert "rank 1 step 0 ledger: entry 0 of 1" in result.mismatches()[0]
