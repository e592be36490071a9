"""Float8 training as torchao runs it (placement_edu/float8.py, issue 42 item 2): which Linears
convert, what their casts move, what travels in an FSDP2 float8 all-gather, what is saved."""

from __future__ import annotations

from fractions import Fraction

import pytest

from placement_edu.errors import PlacementError
from placement_edu.float8 import (
    Float8,
    all_gather_bytes,
    amax_all_reduce_bytes,
    amax_and_cast,
    cast_bytes,
    converted_params,
    linears,
    mfu_under_float8,
    saved_linear_inputs,
)
from placement_edu.memory import derive_memory
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.schedule import derive_schedule
from placement_edu.strategies import get_strategy
from placement_edu.timing.hardware import FP8_PEAK_FLOPS, PEAK_FLOPS

pytestmark = pytest.mark.fast

#: Llama 3.1 8B as torchtitan's benchmark trains it (torchtitan/models/llama/__init__.py '8B').
LLAMA_8B = TransformerSpec(
    layers=32, hidden=4096, heads=32, seq=8192, vocab=128256, micro_batch=2, ffn=14336,
    kv_heads=8, attention="flash", block="llama",
)  # fmt: skip


def test_every_block_linear_converts_and_the_output_layer_does_not() -> None:
    # torchtitan/float8.py at 9dec370: module_filter_fn=lambda mod, fqn: fqn != "output"; a Llama
    # block's seven Linears (wq, wk, wv, wo, w1, w2, w3) convert.
    assert [name for name, _, _ in linears(LLAMA_8B)] == ["wq", "wk", "wv", "wo", "w1", "w3", "w2"]
    # 32 × (2·4096² + 2·4096·1024 + 3·4096·14336) = 32 × 218,103,808
    assert converted_params(LLAMA_8B) == 6_979_321_856
    # what stays bf16: both embeddings (2·V·h) and the 65 RMSNorm weights (2 per layer + final)
    assert LLAMA_8B.psi - converted_params(LLAMA_8B) == 2 * 128256 * 4096 + 65 * 4096


def test_a_float8_all_gather_moves_one_byte_per_converted_weight() -> None:
    # enable_fsdp_float8_all_gather: the converted weights at 1 B, the rest at bf16's 2 B.
    bf16 = all_gather_bytes(LLAMA_8B, None)
    f8 = all_gather_bytes(LLAMA_8B, Float8())
    assert bf16 == 2 * 8_030_261_248 == 16_060_522_496  # Meta's 8,030,261,248 parameters
    assert f8 == 6_979_321_856 + 2 * 1_050_939_392 == 9_081_200_640
    assert all_gather_bytes(LLAMA_8B, Float8(all_gather=False)) == bf16


def _forward_gathers(strategy: str, mesh: str, precision: str) -> int | Fraction:
    """Bytes of rank 0's forward parameter all-gathers, from the core's schedule."""
    schedule = derive_schedule(
        get_strategy(strategy), LLAMA_8B, Mesh.parse(mesh), get_precision(precision)
    )
    return sum(
        o.payload_bytes
        for o in schedule.ops
        if o.op == "all_gather" and o.state is State.PARAMS and o.phase == "forward"
    )


def test_the_schedule_gathers_converted_weights_at_1_byte_and_the_rest_at_2() -> None:
    # FSDP2 on data=8: one forward all-gather a block, 9,081,200,640 B in all (torchao's float8
    # all-gather), not 8,030,261,248 (every parameter at 1 B); bf16 gathers 2 B a parameter.
    assert _forward_gathers("zero3", "data=8", "fsdp2_float8") == 9_081_200_640
    assert _forward_gathers("zero3", "data=8", "fsdp2_bf16") == 16_060_522_496
    # rowwise gathers in bf16 (torchao's float8 all-gather is tensorwise only)
    assert _forward_gathers("zero3", "data=8", "fsdp2_float8_rowwise") == 16_060_522_496
    # with tensor=2 beside it: a tensor rank gathers half of each converted weight (Megatron's
    # split), half of the embeddings, and the 65 RMSNorm weights whole (R = 266,240), at 2 B
    tp = _forward_gathers("zero3×tp", "data=4,tensor=2", "fsdp2_float8")
    norms = 65 * 4096
    assert tp == 6_979_321_856 // 2 + 2 * ((1_050_939_392 - norms) // 2 + norms) == 4_540_866_560


def test_the_gather_window_holds_the_gathered_weights_in_their_float8_and_bf16_bytes() -> None:
    # The window (two units, resharded after forward) holds the gathered units as they arrive:
    # under float8 9,081,200,640 / 16,060,522,496 of bf16's bytes, the whole gather's ratio.
    window = {
        name: derive_memory(
            get_strategy("zero3"), LLAMA_8B, Mesh.parse("data=8"), get_precision(name)
        ).transient["forward"]["gather_window"]
        for name in ("fsdp2_float8", "fsdp2_bf16")
    }
    assert window["fsdp2_float8"] / window["fsdp2_bf16"] == Fraction(9_081_200_640, 16_060_522_496)
    # precompute_float8_dynamic_scale_for_fsdp: one fp32 amax a converted weight, one all-reduce
    assert amax_all_reduce_bytes(LLAMA_8B) == 4 * 32 * 7 == 896


def test_tensorwise_saves_float8_and_rowwise_saves_bf16() -> None:
    # torchao eab345c: manual_float8_matmul_with_args_in_float8 saves input_fp8 (1 B);
    # manual_float8_matmul_with_args_in_hp saves input_hp (bf16, 2 B).
    assert Float8("tensorwise").saved_bytes == 1
    assert Float8("rowwise").saved_bytes == 2
    with pytest.raises(PlacementError, match="float8 scaling is one of tensorwise, rowwise"):
        Float8("blockwise")


def test_a_cast_moves_17_bytes_a_value_eager_and_5_fused() -> None:
    # abs (2 + 2), max (2), x * scale (2 + 2), clamp (2 + 2), .to(float8) (2 + 1) = 17;
    # fused: the amax reads 2, one kernel reads 2 and writes 1 = 5.
    assert amax_and_cast(4096, fused=False) == 17 * 4096
    assert amax_and_cast(4096, fused=True) == 5 * 4096


def test_cast_bytes_of_one_linear() -> None:
    k, n, tokens = 4096, 14336, 16384
    casts = cast_bytes(Float8(), k, n, tokens, fused=True)
    assert casts["forward"] == 5 * k + Fraction(3 * k * n, tokens)
    assert casts["backward"] == 5 * n + (k + n) + Fraction(2 * k * n, tokens)
    eager = cast_bytes(Float8(), k, n, tokens, fused=False)
    assert eager["backward"] == 17 * n + 2 * (k + n) + Fraction(2 * k * n, tokens)
    # rowwise casts the saved bf16 input again and the output gradient along both axes
    rowwise = cast_bytes(Float8("rowwise"), k, n, tokens, fused=True)
    assert rowwise["backward"] == 5 * k + Fraction(3 * k * n, tokens) + 2 * 5 * n


def test_the_fp8_peak_is_twice_bf16s_on_an_h100() -> None:
    # NVIDIA H100 SXM datasheet: FP8 1,979 TFLOPS dense (3,958 with sparsity), BF16 989.
    assert FP8_PEAK_FLOPS["H100"] == 2 * PEAK_FLOPS["H100"] + 1e12
    # MFU as torchtitan states it: model FLOPs ÷ the bf16 peak -- 5,762 tokens/s/GPU of
    # 6·(Ψ - V·h) + 12·L·h·s FLOPs a token is 33.7 % (its footnote: "33% to 39% MFU")
    flops = 6 * (LLAMA_8B.psi - 128256 * 4096) + 12 * 32 * 4096 * 8192
    assert mfu_under_float8(5762 * flops, 1.0, PEAK_FLOPS["H100"]) == pytest.approx(
        0.3374, abs=1e-4
    )


def test_the_saved_linear_inputs_float8_keeps() -> None:
    # torchao eab345c: tensorwise saves each Linear's own input_fp8 (1 B); bf16 and rowwise keep
    # the shared bf16 input once: a Llama block's four distinct inputs, 2·(3h + f)
    h, f = 4096, 14336
    assert saved_linear_inputs(LLAMA_8B, None) == 2 * (3 * h + f) == 53_248
    assert saved_linear_inputs(LLAMA_8B, Float8("rowwise")) == 53_248
    assert saved_linear_inputs(LLAMA_8B, Float8("tensorwise")) == 6 * h + f == 38_912
