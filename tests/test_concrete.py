"""Concrete models: sizes read from a real nn.Module, and the padding each sharding rule causes."""

from __future__ import annotations

import torch

from placement_edu import Mesh, State, analyze, derive_memory, get_precision
from placement_edu.models import ConcreteModel

import pytest

pytestmark = pytest.mark.fast


def small_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3)
    ).double()


def test_concrete_sizes_equal_the_sum_of_the_module_tensors() -> None:
    module = small_mlp()
    model = ConcreteModel.from_module(module)
    assert model.psi == sum(p.numel() for p in module.parameters()) == 35 + 7 + 21 + 3
    dp = analyze("dp", model, 1, "fp64_adam").memory
    assert dp.device[State.PARAMS] == sum(p.numel() * p.element_size() for p in module.parameters())


def test_zero_rule_pads_the_flat_buffer_to_a_multiple_of_n() -> None:
    model = ConcreteModel.from_module(small_mlp(), rule="zero")  # 66 elements
    for n, padded in ((4, 68), (8, 72), (3, 66)):
        memory = derive_memory(
            analyze("zero3", model, n).strategy, model, Mesh.of(data=n), get_precision("fp64_adam")
        )
        assert memory.padding == padded - 66
        assert memory.device[State.PARAMS] == padded // n * 8  # every rank holds an equal slice
        z3 = analyze("zero3", model, n, "fp64_adam")
        assert (
            z3.schedule.collectives[0].payload_bytes == padded * 8
        )  # collectives move padded chunks


def test_fsdp2_rule_splits_each_tensor_by_rows() -> None:
    model = ConcreteModel.from_module(small_mlp(), rule="fsdp2")
    # n = 4: weight 7x5 -> chunks of 2 rows: ranks hold 2,2,2,1 rows; bias 7 -> 2,2,2,1;
    # weight 3x7 -> chunks of 1 row: 1,1,1,0; bias 3 -> 1,1,1,0.
    held = [
        derive_memory(
            analyze("zero3", model, 4).strategy,
            model,
            Mesh.of(data=4),
            get_precision("fp64_adam"),
            rank=r,
        ).device[State.PARAMS]
        // 8
        for r in range(4)
    ]
    assert held == [10 + 2 + 7 + 1, 10 + 2 + 7 + 1, 10 + 2 + 7 + 1, 5 + 1]
    assert sum(held) == model.psi  # nothing lost, nothing doubled in storage
    assert model.padding(4) == (8 * 5 + 8 + 4 * 7 + 4) - 66  # traffic moves padded chunks


def test_gather_units_are_the_real_layers_each_padded_gathered_and_reduced_on_its_own() -> None:
    # FSDP style, one unit per wrapped layer: unit 0 = 0.weight + 0.bias (35 + 7 = 42 elements),
    # unit 1 = 2.weight + 2.bias (21 + 3 = 24). ZeRO's rule pads each unit's flat buffer to a
    # multiple of N = 4: 44 and 24 elements (float64: 352 and 192 B).
    model = ConcreteModel.from_module(small_mlp(), rule="zero", units="layer")
    assert model.gather_units == 2 and model.psi == 66
    z3 = analyze("zero3", model, 4, "fp64_adam")
    ops = [(o.op, o.phase, o.payload_bytes) for o in z3.schedule.collectives]
    assert ops == [
        ("all_gather", "forward", 352),
        ("all_gather", "forward", 192),
        ("all_gather", "backward", 352),
        ("all_gather", "backward", 192),
        # backward reaches the last unit first: its gradient is reduced first
        ("reduce_scatter", "backward", 192),
        ("reduce_scatter", "backward", 352),
    ]
    assert all(isinstance(o.payload_bytes, int) for o in z3.schedule.collectives)  # whole bytes
    memory = z3.memory
    # the unit computing and the next, prefetched: 352 + 192 B (here both units, the padded Ψ)
    assert memory.transient["forward"]["gather_window"] == 352 + 192
    assert memory.transient["backward"]["reduce_bucket"] == 352
    whole = analyze("zero3", ConcreteModel.from_module(small_mlp(), rule="zero"), 4, "fp64_adam")
    assert whole.memory.transient["forward"]["gather_window"] == 68 * 8  # one unit: the whole model
    # SHARD_GRAD_OP keeps every unit through backward: the whole padded model, 44 + 24 elements.
    assert (
        analyze("fsdp_grad_op", model, 4, "fp64_adam").memory.transient["backward"]["gather_window"]
        == 68 * 8
    )


def test_per_unit_padding_is_stored_and_moved() -> None:
    # N = 10: the whole model pads 66 to 70 (7 per rank); per unit 42 -> 50 and 24 -> 30, so each
    # rank holds 5 + 3 = 8 elements and every step moves the 14 elements of padding.
    by_layer = ConcreteModel.from_module(small_mlp(), rule="zero", units="layer")
    whole = ConcreteModel.from_module(small_mlp(), rule="zero")
    assert by_layer.padding(10) == 80 - 66 and whole.padding(10) == 70 - 66
    assert analyze("zero3", by_layer, 10, "fp64_adam").memory.device[State.PARAMS] == 8 * 8
    assert analyze("zero3", whole, 10, "fp64_adam").memory.device[State.PARAMS] == 7 * 8


def test_unknown_gather_units_are_refused_by_name() -> None:
    import pytest

    from placement_edu import PlacementError

    with pytest.raises(PlacementError, match="unknown gather units 'block'; known: model, layer"):
        ConcreteModel.from_module(small_mlp(), units="block")
