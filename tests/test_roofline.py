"""The roofline (placement_edu/roofline.py, issue 42 item 3): each op's FLOPs and bytes from its
shapes, the ridge point, fused against eager elementwise chains, and the seconds they add."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from placement_edu.errors import PlacementError
from placement_edu.float8 import Float8
from placement_edu.roofline import (
    ADAMW_BYTES,
    Kernels,
    block_ops,
    chain,
    matmul,
    memory_bound,
    optimizer_seconds,
    ridge_point,
    rms_norm,
    roofline_seconds,
)
from tests.test_float8 import LLAMA_8B

pytestmark = pytest.mark.fast

H100_PEAK, H100_HBM = 989e12, 3.35e12  # NVIDIA H100 SXM datasheet: bf16 dense, HBM3


def _op(model, name, kernels=Kernels()):
    (op,) = [o for o in block_ops(model, kernels) if o.name == name]
    return op


def test_the_h100_ridge_point() -> None:
    # 989e12 FLOP/s ÷ 3.35e12 B/s: an op needs 295 FLOPs a byte to keep the tensor cores busy
    assert ridge_point(H100_PEAK, H100_HBM) == pytest.approx(295.22, abs=0.01)
    with pytest.raises(PlacementError, match="ridge point"):
        ridge_point(H100_PEAK, 0)


def test_rmsnorm_moves_36_bytes_a_value_eager_and_4_fused() -> None:
    # torchtitan's RMSNorm, eager: x.float() 2+4, pow 4+4, mean 4, x*rsqrt 4+4, type_as 4+2,
    # *weight 2+2 = 36 bytes a value (plus three fp32 scalars a token); fused: read 2, write 2.
    h = 4096
    assert chain(rms_norm(h), 4 * h, fused=False) == 36 * h + 4 + 4 + 4 + 4 + 4 + 4
    assert chain(rms_norm(h), 4 * h, fused=True) == 4 * h
    norm = _op(LLAMA_8B, "RMSNorm (attention)", Kernels(fused=True))
    assert (norm.bytes["forward"], norm.bytes["backward"], norm.count) == (4 * h, 8 * h, 32)


def test_a_chain_fused_reads_its_inputs_and_writes_its_outputs_once() -> None:
    # silu (read f, write f), then * w3·x (read the silu and w3·x, write f): eager 2f + 3f bf16;
    # fused reads w1·x and w3·x and writes the product: 3 values.
    f = 14336
    steps = ((2 * f, 2 * f), (4 * f, 2 * f))
    assert chain(steps, 6 * f, fused=False) == 10 * f
    assert _op(LLAMA_8B, "SwiGLU silu * mul").bytes["forward"] == 10 * f
    assert _op(LLAMA_8B, "SwiGLU silu * mul", Kernels(fused=True)).bytes["forward"] == 6 * f


def test_matmuls_are_compute_bound_and_elementwise_ops_memory_bound() -> None:
    model = LLAMA_8B
    for name in ("wq", "w1", "w2", "output", "attention (SDPA)"):
        assert not memory_bound(_op(model, name), H100_PEAK, H100_HBM), name
    for name in ("RMSNorm (attention)", "SwiGLU silu * mul", "residual add", "loss (fp32 logits)"):
        assert memory_bound(_op(model, name), H100_PEAK, H100_HBM), name
        assert _op(model, name).intensity() == 0  # no FLOPs counted: pure data movement


def test_a_matmuls_intensity_grows_with_the_tokens_of_a_call() -> None:
    # 2·T·k·n FLOPs on 2·(T·k + k·n + T·n) bytes: at b·s = 2,048 and 16,384 tokens of w1
    k, n = 4096, 14336
    for tokens in (2048, 16384):
        op = matmul("w1", k, n, tokens, 1)
        expected = 2 * tokens * k * n / (2 * (tokens * k + k * n + tokens * n))
        assert op.intensity() == pytest.approx(expected, rel=1e-12)
        assert op.bytes["forward"] == 2 * (k + n) + Fraction(2 * k * n, tokens)
    assert matmul("w1", k, n, 2048, 1).intensity() < matmul("w1", k, n, 16384, 1).intensity()
    # a single token (decode) reads the whole weight for 2·k·n FLOPs: ~1 FLOP a byte
    assert memory_bound(matmul("w1", k, n, 1, 1), H100_PEAK, H100_HBM)


def test_fusion_removes_bytes_and_not_flops() -> None:
    eager = block_ops(LLAMA_8B, Kernels(fused=False))
    fused = block_ops(LLAMA_8B, Kernels(fused=True))
    assert [o.flops for o in eager] == [o.flops for o in fused]
    moved = [sum(o.bytes["forward"] * o.count for o in ops) for ops in (eager, fused)]
    assert moved[1] < moved[0]


def test_float8_converts_the_block_gemms_not_the_output_or_attention() -> None:
    ops = block_ops(LLAMA_8B, Kernels(fused=True, float8=Float8()))
    converted = {o.name for o in ops if o.float8}
    assert converted == {"wq", "wk", "wv", "wo", "w1", "w3", "w2"}
    assert sum(o.name.endswith("float8 casts") for o in ops) == 7


def test_seconds_are_each_ops_max_of_compute_and_memory() -> None:
    # with an unbounded bandwidth only FLOPs count: the FLOP-only model's 6Ψ' + 12·L·h·s per token
    # (Ψ' without the input embedding, a lookup) plus selective recomputation's attention replay
    tokens, flops = 16384, 400e12
    s = roofline_seconds(LLAMA_8B, tokens, flops, 1e30, "selective")
    per_token = 6 * (LLAMA_8B.psi - 128256 * 4096) + 12 * 32 * 4096 * 8192 + 4 * 32 * 4096 * 8192
    # the norms' and the loss's FLOPs are not counted (memory ops), 6·65·h fewer
    per_token -= 6 * 65 * 4096
    assert sum(s.values()) == pytest.approx(per_token * tokens / flops, rel=1e-12)
    # and at a finite bandwidth the memory-bound ops add their bytes
    slower = roofline_seconds(LLAMA_8B, tokens, flops, H100_HBM, "selective")
    assert sum(slower.values()) > sum(s.values())


def test_float8_gemms_run_at_the_fp8_rate() -> None:
    tokens, flops = 16384, 400e12
    bf16 = roofline_seconds(LLAMA_8B, tokens, flops, 1e30, "none", Kernels(True))
    f8 = roofline_seconds(LLAMA_8B, tokens, flops, 1e30, "none", Kernels(True, Float8()))
    gemm = 6 * 32 * 218_103_808 * tokens / flops  # the converted GEMMs, all passes
    assert sum(bf16.values()) - sum(f8.values()) == pytest.approx(gemm / 2, rel=1e-9)


def test_the_flash_block_has_no_softmax_op_and_eager_does() -> None:
    names = {o.name for o in block_ops(LLAMA_8B)}
    assert "softmax (eager attention)" not in names
    eager = replace(LLAMA_8B, attention="eager")
    # 4 bytes a score forward (read 2, write 2), a·s scores a token in each layer
    assert _op(eager, "softmax (eager attention)").bytes["forward"] == 4 * 32 * 8192


def test_adamw_foreach_moves_80_bytes_a_parameter() -> None:
    assert ADAMW_BYTES == {"foreach": 80, "fused": 28}
    # Llama 3.1 8B on 8 GPUs under FSDP: 1,003,782,656 parameters a device at 2.4 TB/s
    assert optimizer_seconds(8_030_261_248 // 8, 2.4e12) == pytest.approx(0.03346, abs=1e-5)
    with pytest.raises(PlacementError, match="optimizer is one of foreach, fused"):
        optimizer_seconds(1, 1.0, "sgd")


def test_compute_time_on_the_roofline_is_roofline_seconds() -> None:
    from placement_edu.timing import compute_time, get_hardware

    hw = get_hardware("h100-nvlink-ib")
    assert (hw.memory_bandwidth, hw.roofline, hw.fused) == (3.35e12, False, False)
    on = replace(hw, roofline=True, fused=True)
    got = compute_time(LLAMA_8B, 16384, on, "selective", float8=Float8())
    want = roofline_seconds(
        LLAMA_8B, 16384, hw.flops, 3.35e12, "selective", Kernels(True, Float8()), 1979 / 989
    )
    assert got == pytest.approx(want, rel=1e-12)
    # off the roofline: the FLOP-only model, float8 or not
    assert compute_time(LLAMA_8B, 16384, hw, "selective") == compute_time(
        LLAMA_8B, 16384, hw, "selective", float8=Float8()
    )


def test_float8_needs_fp8_tensor_cores_and_the_roofline_a_bandwidth() -> None:
    from placement_edu.timing import compute_time, get_hardware

    a100 = replace(get_hardware("a100-nvlink-ib"), roofline=True)
    with pytest.raises(PlacementError, match="has none .*give an H100 or H200 preset"):
        compute_time(LLAMA_8B, 16384, a100, "none", float8=Float8())
    with pytest.raises(PlacementError, match="give memory_bandwidth"):
        replace(a100, memory_bandwidth=None)


def test_the_float8_presets() -> None:
    from placement_edu.precision import get_precision

    tensorwise, rowwise = get_precision("fsdp2_float8"), get_precision("fsdp2_float8_rowwise")
    assert tensorwise.float8_recipe == Float8("tensorwise")
    assert (tensorwise.gather, tensorwise.reduce, tensorwise.model_state) == (1, 4, 16)
    assert (rowwise.gather, rowwise.float8_recipe) == (2, Float8("rowwise"))
    assert get_precision("fsdp2_bf16").float8_recipe is None


def test_time_prices_on_the_roofline_by_default(capsys) -> None:
    import json

    from placement_edu.cli import main

    shape = ["time", "--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128",
             "--vocab", "1000", "--global-batch", "512", "--mesh", "data=8", "--json"]  # fmt: skip

    def step(*flags: str) -> float:
        assert main([*shape, *flags]) == 0
        return json.loads(capsys.readouterr().out)["step_s"]

    roofline, fused, flops_only = step(), step("--fused"), step("--no-roofline")
    # a small model is mostly memory-bound ops: the roofline's step is longer, fusion shortens it
    assert flops_only < fused < roofline
    assert main(["time", *shape[1:-1]]) == 0
    assert "on the roofline (HBM 3.35e12 B/s, eager elementwise ops)" in capsys.readouterr().out
    assert main([*shape, "--fused", "--no-roofline"]) == 2
    assert "--fused prices torch.compile's fused" in capsys.readouterr().err


def test_time_takes_a_float8_precision(capsys) -> None:
    import json

    from placement_edu.cli import main

    shape = ["time", "--layers", "4", "--hidden", "4096", "--heads", "32", "--seq", "4096",
             "--vocab", "32000", "--block", "llama", "--attention", "flash", "--global-batch",
             "8", "--mesh", "data=8", "--strategy", "zero3", "--fused", "--json"]  # fmt: skip

    def step(*flags: str) -> float:
        assert main([*shape, *flags]) == 0
        return json.loads(capsys.readouterr().out)["step_s"]

    assert step("--precision", "fsdp2_float8") < step("--precision", "fsdp2_bf16")
    assert main([*shape, "--precision", "fsdp2_float8", "--hardware", "a100-nvlink-ib"]) == 2
    assert "has none" in capsys.readouterr().err


def test_the_optimizer_step_on_the_roofline() -> None:
    # Llama 3.1 8B under FSDP2 on 8 GPUs (fsdp2_bf16: fp32 m and v, 8 B a parameter): each rank
    # steps 8,030,261,248 / 8 = 1,003,782,656 parameters, AdamW foreach's 80 B each at 2.4 TB/s
    from placement_edu.mesh import Mesh
    from placement_edu.pricing import price_configuration
    from placement_edu.timing import get_hardware

    hw = replace(get_hardware("h100-grand-teton"), roofline=True)
    priced = price_configuration(
        LLAMA_8B, Mesh.of(data=8), "zero3", 16, hw, "fsdp2_bf16", "selective", overlap="bucketed"
    )
    t = priced.choice.time
    assert t is not None
    step = dict((p, c) for p, c, _ in t.by_pass)["step"]
    assert step == pytest.approx(1_003_782_656 * 80 / 2.4e12, rel=1e-12)
    fused = replace(hw, optimizer="fused")
    again = price_configuration(
        LLAMA_8B, Mesh.of(data=8), "zero3", 16, fused, "fsdp2_bf16", "selective", overlap="bucketed"
    )
    assert again.choice.time is not None
    step = dict((p, c) for p, c, _ in again.choice.time.by_pass)["step"]
    assert step == pytest.approx(1_003_782_656 * 28 / 2.4e12, rel=1e-12)
    with pytest.raises(PlacementError, match="optimizer is foreach or fused"):
        replace(hw, optimizer="adam")


def test_time_takes_fits_words_and_says_what_float8s_mfu_is_against(capsys) -> None:
    """`time --model llama-8b --strategy fsdp2` (fit's word for zero3, one name at the door)
    prices the module's peak, not the formula's; under a float8 preset the MFU line says it is
    against the bf16 peak alone (torchtitan states none under float8: two tensor-core peaks)."""
    from placement_edu.cli import main

    argv = ["time", "--model", "llama-8b", "--mesh", "data=8", "--global-batch", "16", "--seq",
            "8192", "--recompute", "selective", "--attention", "sdpa", "--hardware",
            "h100-grand-teton", "--fused"]  # fmt: skip
    outputs = {}
    for strategy, precision in (("fsdp2", "fsdp2_float8"), ("zero3", "fsdp2_bf16")):
        assert main([*argv, "--strategy", strategy, "--precision", precision]) == 0
        outputs[strategy] = capsys.readouterr().out
    assert "from the module's profile" in outputs["fsdp2"]
    assert "is not FSDP2" not in outputs["fsdp2"]
    assert "torchtitan reports no MFU: this is against bf16's alone" in outputs["fsdp2"]
    assert "torchtitan reports no MFU" not in outputs["zero3"]
