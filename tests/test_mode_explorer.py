"""The mode explorer: each mode's knob moves the device grid and the numbers, and every number it
shows is the core's (SPEC §2-§4)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from placement_edu import ModelSpec, analyze
from placement_edu.units import GB
from placement_edu.errors import PlacementError
from placement_edu.presentation.mode_explorer import ModeExplorer, grouped_ops, schedule_text
from placement_edu.strategies import get_strategy

pytestmark = pytest.mark.fast


def test_replicated_costs_the_whole_state_per_device_and_the_precision_knob_moves_it() -> None:
    explorer = ModeExplorer("R", psi=7.5e9, devices=64)
    assert explorer.values["model_state"] == 120 * GB  # ZeRO Table 1: 16 B x 7.5e9
    assert explorer.values["volume_psi"] == 2
    before = bytes(explorer.image.value)
    explorer.precision.value = "mixed_adam_fp32_accum"  # the Playbook's 20 B per parameter
    assert explorer.values["model_state"] == 150 * GB
    assert (
        explorer.values["model_state"]
        == analyze("dp", 7.5e9, 64, "mixed_adam_fp32_accum").memory.model_state
    )
    assert bytes(explorer.image.value) != before and bytes(explorer.image.value[:4]) == b"\x89PNG"
    assert "start-up" in explorer.readout.value  # rule 4: one broadcast, not per step


def test_sharded_knob_switches_between_zero1_schedules_and_zero2() -> None:
    explorer = ModeExplorer("S", psi=7.5e9, devices=64)
    assert (
        explorer.values["model_state"] == Fraction(3140625, 100000) * GB
    )  # 4Ψ + 12Ψ/N: 31.40625 GB
    assert explorer.values["volume_psi"] == 2  # ZeRO §7
    explorer.strategy.value = "zero1_allreduce"
    assert explorer.values["volume_psi"] == 3  # ZeroRedundancyOptimizer
    assert (
        explorer.values["model_state"] == Fraction(3140625, 100000) * GB
    )  # same placement, same memory
    explorer.strategy.value = "zero2"
    assert explorer.values["model_state"] == Fraction(16640625, 1000000) * GB  # 2Ψ + 14Ψ/N
    explorer.devices.value = 8
    expected = analyze("zero2", explorer.model(), 8)
    assert explorer.values["model_state"] == expected.memory.model_state
    assert explorer.values["peak"] == expected.memory.peak
    assert (
        "reduce_scatter grads" in explorer.readout.value
        and "all_gather params" in explorer.readout.value
    )


def test_gather_units_shrink_only_the_peak_and_micro_batches_multiply_the_gathers() -> None:
    explorer = ModeExplorer("SG", psi=1e9, devices=8, units=1)
    assert explorer.values["model_state"] == 2 * GB  # 16Ψ/N
    assert explorer.values["peak"] == 2 * GB + 2 * GB + 2 * GB  # + window 2Ψ + bucket 2Ψ
    image = bytes(explorer.image.value)
    explorer.units.value = 4
    assert explorer.values["model_state"] == 2 * GB
    # two quarters gathered (the one computing, the next prefetched) + one quarter's bucket
    assert explorer.values["peak"] == 2 * GB + 2 * (GB // 2) + GB // 2
    assert (
        explorer.values["peak"] == analyze("zero3", ModelSpec(10**9, gather_units=4), 8).memory.peak
    )
    explorer.micro_batches.value = 8  # rule 5: 3Ψ x 8
    assert explorer.values["volume_psi"] == 24
    explorer.micro_batches.value = 1
    explorer.reshard.value = False  # FSDP SHARD_GRAD_OP
    assert explorer.values["strategy"] == "fsdp_grad_op" and explorer.values["volume_psi"] == 2
    assert (
        explorer.values["peak"]
        == analyze("fsdp_grad_op", ModelSpec(10**9, gather_units=4), 8).memory.peak
    )
    assert bytes(explorer.image.value) != image


def test_grouped_ops_keep_the_cores_bytes_and_a_bad_mode_is_refused() -> None:
    report = analyze(get_strategy("zero3"), ModelSpec(10**9, gather_units=4), 8)
    lines = grouped_ops(report)
    assert [(o.phase, o.op, o.count) for o in lines] == [
        ("forward", "all_gather", 4),
        ("backward", "all_gather", 4),
        ("backward", "reduce_scatter", 1),
    ]  # an abstract model reduces in one collective
    assert sum(o.ring_bytes for o in lines) == report.ring_bytes
    text = schedule_text(report, grouped=True)
    assert "4 × all_gather params" in text and text.endswith("ring bytes sent by this device")
    assert "per step: 3Ψ (ZeRO convention)" in schedule_text(report)  # 1.5x dp (SPEC §4)
    with pytest.raises(PlacementError, match="mode must be one of R, S, SG"):
        ModeExplorer("M")
