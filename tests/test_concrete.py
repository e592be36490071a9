"""Concrete models: sizes read from a real nn.Module, and the padding each sharding rule causes."""

from __future__ import annotations

import torch

from placement_edu import ConcreteModel, Mesh, State, analyze, derive_memory, get_precision


def small_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3)).double()


def test_concrete_sizes_equal_the_sum_of_the_module_tensors() -> None:
    module = small_mlp()
    model = ConcreteModel.from_module(module)
    assert model.psi == sum(p.numel() for p in module.parameters()) == 35 + 7 + 21 + 3
    dp = analyze("dp", model, 1, "fp64_adam").memory
    assert dp.device[State.PARAMS] == sum(p.numel() * p.element_size() for p in module.parameters())


def test_zero_rule_pads_the_flat_buffer_to_a_multiple_of_n() -> None:
    model = ConcreteModel.from_module(small_mlp(), rule="zero")  # 66 elements
    for n, padded in ((4, 68), (8, 72), (3, 66)):
        memory = derive_memory(analyze("zero3", model, n).strategy, model, Mesh.of(data=n), get_precision("fp64_adam"))
        assert memory.padding == padded - 66
        assert memory.device[State.PARAMS] == padded // n * 8  # every rank holds an equal slice
        z3 = analyze("zero3", model, n, "fp64_adam")
        assert z3.schedule.collectives[0].payload_bytes == padded * 8  # collectives move padded chunks


def test_fsdp2_rule_splits_each_tensor_by_rows() -> None:
    model = ConcreteModel.from_module(small_mlp(), rule="fsdp2")
    # n = 4: weight 7x5 -> chunks of 2 rows: ranks hold 2,2,2,1 rows; bias 7 -> 2,2,2,1;
    # weight 3x7 -> chunks of 1 row: 1,1,1,0; bias 3 -> 1,1,1,0.
    held = [derive_memory(analyze("zero3", model, 4).strategy, model, Mesh.of(data=4),
                          get_precision("fp64_adam"), rank=r).device[State.PARAMS] // 8 for r in range(4)]
    assert held == [10 + 2 + 7 + 1, 10 + 2 + 7 + 1, 10 + 2 + 7 + 1, 5 + 1]
    assert sum(held) == model.psi  # nothing lost, nothing doubled in storage
    assert model.padding(4) == (8 * 5 + 8 + 4 * 7 + 4) - 66  # traffic moves padded chunks
