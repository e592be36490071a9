"""Achieved FLOP/s over the matmul shapes (issue 27, item 3): ``placement_edu.gemm`` and its use by
``timing.compute_time`` -- hand calculations, and the matmuls' FLOPs against Megatron's count."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from placement_edu.cli.calibrate import curve_lines
from placement_edu.errors import PlacementError
from placement_edu.gemm import (
    H100_CURVE,
    XLA_H100_BF16,
    curve_factor,
    curve_of,
    gemm_factor,
    layer_gemms,
    mean_by_size,
)
from placement_edu.models import TransformerSpec
from placement_edu.timing import HARDWARE, compute_time, megatron_flops_per_token

pytestmark = pytest.mark.fast

# The weak-scaling table's 177B GPT (Megatron-LM README): L = 96, h = 12288, a = 96, s = 4096.
GPT_177B = TransformerSpec(layers=96, hidden=12288, heads=96, seq=4096, vocab=131072)


def test_curve_is_linear_in_log_flops_and_flat_beyond_its_ends() -> None:
    curve = ((1e9, 0.5), (4e9, 1.0))
    assert curve_factor((), 123.0) == 1.0  # no curve: the hardware's flops
    assert curve_factor(curve, 2e9) == pytest.approx(0.75)  # log midpoint of 1e9 and 4e9
    assert curve_factor(curve, 1e6) == 0.5
    assert curve_factor(curve, 1e15) == 1.0


def test_the_h100_curve_from_openxlas_table() -> None:
    # OpenXLA, matmul_interpolator_data.h, "sm_90", bf16, batch 1: 4096 × 4096 × 4096 at
    # 783,328,793,548,203 FLOP/s (the fastest: factor 1); 4096 × 512 × 512 at 238,821,580,071,174
    # (238.8 / 783.3 = 0.305); 4096 × 4096 × 512 and 4096 × 512 × 4096, both 2^34 FLOPs, at
    # 543.1e12 and 650.0e12: their mean, 596.5e12, is 0.762 of the fastest.
    assert (4096, 4096, 4096, 783_328_793_548_203) in XLA_H100_BF16
    assert H100_CURVE[-1] == (2 * 4096**3, 1.0)
    assert H100_CURVE[0] == (2 * 4096 * 512 * 512, 238_821_580_071_174 / 783_328_793_548_203)
    mean = (543_116_754_678_806 + 649_964_784_503_632) / 2
    assert mean_by_size(XLA_H100_BF16)[2**34] == mean
    assert dict(H100_CURVE)[2**34] == pytest.approx(0.7615, abs=1e-4)
    assert all(a[1] < b[1] for a, b in zip(H100_CURVE, H100_CURVE[1:]))  # bigger runs faster


def test_layer_gemms_are_megatrons_matmul_flops_per_tensor_slice() -> None:
    # the forward's matmul FLOPs = b·s tokens × a third of Megatron's count (the forward of its
    # 3 GEMMs per weight), and each of t devices runs 1/t of them
    for t in (1, 8):
        forward = sum(flops * calls for flops, calls in layer_gemms(GPT_177B, t))
        assert forward * t == GPT_177B.seq * megatron_flops_per_token(GPT_177B) // 3


def test_gemm_factor() -> None:
    assert gemm_factor((), GPT_177B, 8) == 1.0
    assert gemm_factor(((10.0, 0.8),), GPT_177B, 8) == pytest.approx(0.8)  # flat: everywhere
    assert gemm_factor(((10.0, 0.8),), 1_000_000, 8) == 1.0  # an abstract model: no shapes
    # a rising curve: the wider slice (t = 1) runs its matmuls closer to the top than t = 8
    rising = ((1e9, 0.5), (1e13, 1.0))
    assert 0.5 < gemm_factor(rising, GPT_177B, 8) < gemm_factor(rising, GPT_177B, 1) < 1.0


def test_compute_time_at_the_curve() -> None:
    h100 = HARDWARE["h100-nvlink-ib"]
    assert h100.gemm_curve == ()  # the presets carry none: today's figures
    halved = replace(h100, gemm_curve=((10.0, 0.5),))
    plain = compute_time(GPT_177B, 4096, h100, "selective", tensor=8)
    slow = compute_time(GPT_177B, 4096, halved, "selective", tensor=8)
    for phase in ("forward", "backward"):
        assert slow[phase] == pytest.approx(2 * plain[phase], rel=1e-12)
    with pytest.raises(PlacementError, match="strictly increase"):
        replace(h100, gemm_curve=((10.0, 0.5), (10.0, 0.6)))


def test_curve_of_and_calibrates_lines() -> None:
    assert curve_of({16: 1e9, 128: 4e9}) == ((16.0, 0.25), (128.0, 1.0))
    lines = curve_lines({2: 1e9, 4: 4e9}, "float64 here")  # n = 2, 4: 2n³ = 16, 128 FLOPs
    assert "  n = 2: 16 FLOPs, 1e9 FLOP/s, factor 0.250" in lines
    assert lines[-1] == "gemm_curve=((16, 0.250), (128, 1.000),)"
    assert math.isclose(curve_factor(curve_of({16: 1e9, 128: 4e9}), 32), 0.25 + 0.75 / 3)
