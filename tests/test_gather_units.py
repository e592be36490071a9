"""The gather window and the reduce bucket of an SG placement, by hand (issue 25, item 2): units are
layers by default, FSDP keeps two units alive (the one computing and the one prefetched), and a
pipeline stage's units are its own layers, not 1/p of one."""

from __future__ import annotations

from fractions import Fraction

import pytest

from placement_edu import ModelSpec, analyze
from placement_edu.memory import GATHER_WINDOW, REDUCE_BUCKET, derive_memory
from placement_edu.mesh import Mesh
from placement_edu.models import prefetched_window
from placement_edu.models import per_layer_model
from placement_edu.pricing import compose
from placement_edu.precision import get_precision

pytestmark = pytest.mark.fast

PSI = 7_500_000_000  # ZeRO's Table 1 model (Rajbhandari et al. 2020), README's first table


def test_an_abstract_model_is_gathered_one_layer_at_a_time_by_default() -> None:
    assert ModelSpec(PSI, layers=32).gather_units == 32
    assert ModelSpec(PSI).gather_units == 1  # one layer: one unit
    assert ModelSpec(PSI, layers=32, gather_units=1).gather_units == 1  # the worst case, asked
    # a bare Ψ takes the layers of the nearest published shape: Llama-2-7B's L = 32
    assert per_layer_model(PSI).layers == 32 and per_layer_model(PSI).gather_units == 32


def test_readme_first_table_zero3_peaks_below_zero2() -> None:
    # 7.5e9 on N = 64, mixed_adam 2/2/12, 32 units of Ψ/32 = 234,375,000 parameters each.
    model = per_layer_model(PSI)
    zero2 = analyze("zero2", model, 64).memory
    zero3 = analyze("zero3", model, 64).memory
    unit = 2 * PSI // 32  # one unit's bf16 parameters or gradient: 468,750,000 B
    # zero2: 2Ψ + 14Ψ/N persistent (16.640625 GB, ZeRO Table 1) + one unit's reduce bucket
    assert zero2.transient["backward"][REDUCE_BUCKET] == unit
    assert zero2.peak == 2 * PSI + 14 * PSI // 64 + unit == 17_109_375_000
    # zero3: 16Ψ/N (1.875 GB, ZeRO Table 1) + two units gathered + one unit's bucket in backward
    assert zero3.transient["backward"][GATHER_WINDOW] == 2 * unit
    assert zero3.peak == 16 * PSI // 64 + 2 * unit + unit == 3_281_250_000
    assert zero3.peak < zero2.peak


def test_the_window_is_the_unit_computing_and_the_next_prefetched() -> None:
    assert prefetched_window([(3, 2), (5, 1)]) == 3 + 5  # the largest neighbours: units 2 and 3
    assert prefetched_window([(3, 4)]) == 3 + 3
    assert prefetched_window([(9, 1), (1, 1), (8, 1)]) == 9 + 1  # neighbours, not the two largest
    assert prefetched_window([(5, 1)]) == 5  # a lone unit is the whole window
    # Ψ = 1,200 in 4 layers on N = 4, fp32_adam (4 B): units of 300 elements, 2 live = 2,400 B.
    memory = analyze("zero3", ModelSpec(1_200, layers=4), 4, "fp32_adam").memory
    assert memory.transient["forward"][GATHER_WINDOW] == 2 * 300 * 4
    assert memory.transient["backward"][REDUCE_BUCKET] == 300 * 4  # one unit's gradient
    # SHARD_GRAD_OP keeps every unit: the whole 1,200 elements, prefetch or not
    grad_op = analyze("fsdp_grad_op", ModelSpec(1_200, layers=4), 4, "fp32_adam").memory
    assert grad_op.transient["backward"][GATHER_WINDOW] == 1_200 * 4


def test_a_pipeline_stage_gathers_its_own_layers_whole() -> None:
    # Ψ = 8,000 in 8 layers, zero3 on data=2 × pipeline=4, fp32_adam: each stage holds 2 layers,
    # 2,000 elements; a unit is one layer, 1,000 elements (not 2,000 / 8 = 250: the stage's
    # share divided by all 8 layers).
    model = ModelSpec(8_000, layers=8, boundary_elements=16)
    mesh = Mesh.of(data=2, pipeline=4)
    strategy = compose("zero3", mesh, micro_batches=4)
    for rank in range(mesh.world_size):
        memory = derive_memory(strategy, model, mesh, get_precision("fp32_adam"), rank)
        assert memory.transient["forward"][GATHER_WINDOW] == 2 * 1_000 * 4  # two layers live
        assert memory.transient["backward"][REDUCE_BUCKET] == 1_000 * 4  # one layer's gradient
    # uneven stages (7 layers on 4 stages: 2, 2, 2, 1) keep Ψ/p per stage at the Ψ level
    uneven = ModelSpec(7_000, layers=7, boundary_elements=16)
    last = derive_memory(strategy, uneven, mesh, get_precision("fp32_adam"), mesh.world_size - 1)
    assert last.transient["forward"][GATHER_WINDOW] == Fraction(7_000, 4) * 4  # its one unit
