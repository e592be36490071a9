"""Issue 42, item 1: precision as a placement -- a state's storage dtype and the dtype a collective
moves it in are two facts. PyTorch's FSDP2 ``MixedPrecisionPolicy(param_dtype=torch.bfloat16,
reduce_dtype=torch.float32)`` keeps fp32 shards, all-gathers bf16 (2 B per element) and
reduce-scatters fp32 gradients (4 B per element); DeepSpeed's ``"communication_data_type": "fp32"``
reduces bf16 gradients in fp32. Priced in the stored dtype, an fp32 reduction of bf16 gradients
would be half its bytes."""

from __future__ import annotations

import pytest

from placement_edu import ModelSpec, derive_memory, derive_schedule, get_precision, get_strategy
from placement_edu.errors import PlacementError
from placement_edu.mesh import as_mesh
from placement_edu.placement import State
from placement_edu.precision import Precision
from placement_edu.schedule import ring_bytes

pytestmark = pytest.mark.fast

PSI = 1_000_000
N = 8


def collectives(strategy: str, precision: str) -> dict[str, tuple[int, int]]:
    """op -> (payload bytes summed over the step, bytes per element) for one device."""
    schedule = derive_schedule(
        get_strategy(strategy), ModelSpec(PSI), as_mesh(f"data={N}"), get_precision(precision)
    )
    found: dict[str, tuple[int, int]] = {}
    for op in schedule.ops:
        if op.phase == "startup" or op.op not in ("all_gather", "reduce_scatter", "all_reduce"):
            continue
        total, _ = found.get(op.op, (0, op.element_bytes))
        found[op.op] = (total + int(op.elements * op.element_bytes), op.element_bytes)
    return found


def test_fsdp2s_policy_gathers_bf16_and_reduces_fp32():
    # zero3 on 8: two all-gathers of the whole Ψ (forward, backward), one reduce-scatter of Ψ.
    ops = collectives("zero3", "fsdp2_bf16")
    assert ops["all_gather"] == (2 * PSI * 2, 2)  # bf16 on the wire, though the shards are fp32
    assert ops["reduce_scatter"] == (PSI * 4, 4)  # reduce_dtype=fp32: 4 B per element
    # A device sends (N-1)/N of the reduce-scatter's payload: 3,500,000 B, not 1,750,000.
    assert ring_bytes("reduce_scatter", N, PSI * 4) == 3_500_000


def test_zeros_2_2_12_moves_what_it_stores():
    ops = collectives("zero3", "mixed_adam")
    assert ops["all_gather"] == (2 * PSI * 2, 2)
    assert ops["reduce_scatter"] == (PSI * 2, 2)


def test_deepspeeds_fp32_communication_doubles_the_gradient_reduction_only():
    stored = get_precision("deepspeed_bf16_fp32_comm")
    assert (stored.params, stored.grads, stored.optimizer) == (2, 2, 12)
    assert collectives("dp", "deepspeed_bf16_fp32_comm")["all_reduce"] == (PSI * 4, 4)
    assert collectives("dp", "mixed_adam")["all_reduce"] == (PSI * 2, 2)


def test_the_gather_window_holds_the_gathered_dtype_and_the_bucket_the_reduce_dtype():
    """FSDP2 gathers each unit into bf16 buffers and casts its gradient to fp32 to reduce it: with
    fp32 shards (4 B stored) the window is still 2 B per element, the bucket 4 B."""
    mesh, model = as_mesh(f"data={N}"), ModelSpec(PSI)
    fsdp2 = derive_memory(get_strategy("zero3"), model, mesh, get_precision("fsdp2_bf16"))
    zero = derive_memory(get_strategy("zero3"), model, mesh, get_precision("mixed_adam"))
    assert fsdp2.model_state == zero.model_state == PSI * 16 // N  # 16 B per parameter, both
    assert fsdp2.transient["forward"]["gather_window"] == PSI * 2  # one unit, gathered in bf16
    assert zero.transient["forward"]["gather_window"] == PSI * 2
    assert fsdp2.transient["backward"]["reduce_bucket"] == PSI * 4  # reduced in fp32
    assert zero.transient["backward"]["reduce_bucket"] == PSI * 2


def test_a_host_copy_moves_the_stored_dtype():
    precision = Precision("fp32_shards_bf16_wire", 4, 4, 8, 2, gather=2)
    schedule = derive_schedule(
        get_strategy("zero3_offload"), ModelSpec(PSI), as_mesh(f"data={N}"), precision
    )
    h2d = [op for op in schedule.ops if op.op == "h2d" and op.state is State.PARAMS]
    assert h2d and all(op.element_bytes == 4 for op in h2d)
    gathers = [op for op in schedule.ops if op.op == "all_gather" and op.state is State.PARAMS]
    assert gathers and all(op.element_bytes == 2 for op in gathers)


@pytest.mark.parametrize("field", ["gather", "reduce"])
def test_a_wire_dtype_is_a_positive_whole_number_of_bytes(field):
    with pytest.raises(PlacementError, match=field):
        Precision("bad", 2, 2, 12, 2, **{field: 0})


def test_torch_refs_prediction_of_fsdp2_mixed_precision_moves_the_wire_dtypes():
    """What `torch-ref fsdp2 --precision fsdp2_bf16` is held to (measured on gloo in
    tests/test_torch_reference.py): each reduce-scatter twice its unit's all-gather, as fp32 is
    twice bf16, and the float64 run's bytes over 4 (gathers) and 2 (reduce-scatters)."""
    from placement_edu.implementations import TorchRefConfig, predict

    runs = {p: predict(TorchRefConfig("fsdp2", 3, precision=p))[0] for p in
            ("fp64_adam", "fsdp2_bf16", "fsdp2_bf16_reduce_bf16")}  # fmt: skip
    step = {p: r["steps"][1] for p, r in runs.items()}
    for (op, fp64, _), (_, fp32_reduce, _), (_, bf16_reduce, _) in zip(*step.values()):
        if op == "all_gather":
            assert fp32_reduce == bf16_reduce == fp64 // 4  # 8 B -> 2 B per element
        else:
            assert fp32_reduce == 2 * bf16_reduce == fp64 // 2  # 8 B -> 4 B (fp32), 2 B (bf16)
    assert (runs["fsdp2_bf16"]["params"] * 2, runs["fsdp2_bf16"]["optimizer"]) == (
        runs["fp64_adam"]["params"], runs["fp64_adam"]["params"])  # fmt: skip


@pytest.mark.parametrize(
    "impl, precision, says",
    [
        ("ddp", "fsdp2_bf16", "fsdp2_bf16 is FSDP2's MixedPrecisionPolicy: it runs with an fsdp2"),
        ("fsdp2", "bf16", "unknown torch-ref precision 'bf16'; known: fp64_adam, fsdp2_bf16"),
    ],
)
def test_torch_ref_refuses_a_precision_it_cannot_run(impl, precision, says):
    from placement_edu.implementations import TorchRefConfig

    with pytest.raises(PlacementError, match=says):
        TorchRefConfig(impl, 2, precision=precision).validate()
