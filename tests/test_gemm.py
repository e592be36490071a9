"""Achieved FLOP/s over the matmul shapes (issue 27, item 3): ``placement_edu.gemm`` and its use by
``timing.compute_time`` -- hand calculations, and the matmuls' FLOPs against Megatron's count."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from placement_edu.cli.calibrate import curve_lines
from placement_edu.errors import PlacementError
from placement_edu.gemm import curve_factor, fit_curve, gemm_factor, intensity, layer_gemms
from placement_edu.models import TransformerSpec
from placement_edu.timing import HARDWARE, compute_time, megatron_flops_per_token

pytestmark = pytest.mark.fast

# The weak-scaling table's 177B GPT (Megatron-LM README): L = 96, h = 12288, a = 96, s = 4096.
GPT_177B = TransformerSpec(layers=96, hidden=12288, heads=96, seq=4096, vocab=131072)


def test_intensity_by_hand() -> None:
    # square n × n: n³ / 3n² = n/3
    assert intensity(3072, 3072, 3072) == 1024
    # QKV of the 1.7B row (b·s = 4096 tokens, h = 2048, 3h = 6144): 4096·2048·6144 /
    # (4096·2048 + 2048·6144 + 4096·6144) = 51,539,607,552 / 46,137,344 = 1117.09...
    assert intensity(4096, 2048, 6144) == pytest.approx(51_539_607_552 / 46_137_344, rel=1e-15)


def test_curve_is_linear_in_log_intensity_and_flat_beyond_its_ends() -> None:
    curve = ((100.0, 0.5), (400.0, 1.0))
    assert curve_factor((), 123.0) == 1.0  # no curve: the hardware's flops
    assert curve_factor(curve, 200.0) == pytest.approx(0.75)  # log midpoint of 100 and 400
    assert curve_factor(curve, 10.0) == 0.5
    assert curve_factor(curve, 1e6) == 1.0


def test_layer_gemms_are_megatrons_matmul_flops_per_tensor_slice() -> None:
    # Σ 2·m·k·n over the forward's matmuls = b·s tokens × a third of Megatron's count (forward of
    # its 3 GEMMs per weight), and each of t devices runs 1/t of them.
    for t in (1, 8):
        forward = sum(2 * m * k * n * count for m, k, n, count in layer_gemms(GPT_177B, t))
        assert forward * t == GPT_177B.seq * megatron_flops_per_token(GPT_177B) // 3


def test_gemm_factor() -> None:
    assert gemm_factor((), GPT_177B, 8) == 1.0
    assert gemm_factor(((10.0, 0.8),), GPT_177B, 8) == pytest.approx(0.8)  # flat: everywhere
    assert gemm_factor(((10.0, 0.8),), 1_000_000, 8) == 1.0  # an abstract model: no shapes
    # a rising curve: the wider slice (t = 1) runs its matmuls closer to the top than t = 8
    rising = ((100.0, 0.5), (10_000.0, 1.0))
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


def test_fit_curve_and_its_lines() -> None:
    measured = {3: 1e9, 6: 4e9}
    assert fit_curve(measured) == ((1.0, 0.25), (2.0, 1.0))
    lines = curve_lines(measured, "float64 here")
    assert "  n = 3: intensity 1, 1e9 FLOP/s, factor 0.250" in lines
    assert lines[-1] == "gemm_curve=((1, 0.250), (2, 1.000),)"
    assert math.isclose(curve_factor(fit_curve(measured), 1.5), 0.25 + 0.75 * math.log2(1.5))
