"""Achieved FLOP/s as a function of the matmul sizes (issue 27, item 3).

One achieved FLOP/s for every model (``timing.Hardware.flops``) says a 1.7B model's matmuls run as
fast as a 462B model's; they do not: a bigger GEMM runs closer to peak (Megatron-LM's README:
"larger GEMMs have higher arithmetic intensity and are consequently more efficient to execute").
A hardware's ``gemm_curve`` says how much: a handful of points (FLOPs of one matmul call, factor),
piecewise-linear in log FLOPs, factor 1.0 = the hardware's ``flops``. No curve (every preset):
factor 1.0 everywhere, the figures of one number. Read top to bottom:

- ``curve_factor``    the curve at one matmul's FLOPs (flat beyond its end points)
- ``layer_gemms``     the matmul calls of one micro-batch through a transformer at a tensor slice
- ``gemm_factor``     their FLOP-weighted factor, what ``timing.compute_time`` multiplies
                      ``flops`` by
- ``curve_of``        a curve from measured matmuls: FLOP/s ÷ the fastest's, by the call's FLOPs
- ``XLA_H100_BF16``   measured H100 matmuls (OpenXLA's default table), and ``H100_CURVE`` from them

Why a call's FLOPs, not its arithmetic intensity: on a GPU a small call cannot fill the device
(too few tiles for its streaming multiprocessors, a launch's fixed cost), and the measured table
orders by FLOPs: 4096 × 512 × 512 at 239e12 FLOP/s, × 1024 × 1024 at 488e12, × 4096 × 4096 at
783e12, while 4096 × 4096 × 512 (8.6 GFLOP) and 4096 × 512 × 4096 share an intensity (410) but not
a speed (543e12, 650e12). A batched call (attention's heads) counts its whole batch.

Units: FLOPs, FLOP/s; a factor is dimensionless.
"""

from __future__ import annotations

import math
from typing import Mapping

from placement_edu.errors import expect
from placement_edu.models import TransformerSpec

#: A curve: (FLOPs of one matmul call, factor × the hardware's ``flops``) points, FLOPs strictly
#: increasing. Empty: factor 1.0 at every size.
GemmCurve = tuple[tuple[float, float], ...]


def check_curve(curve: GemmCurve, what: str = "gemm_curve") -> None:
    """Refuse a curve whose sizes do not strictly increase or whose numbers are not > 0."""
    for point in curve:
        expect(
            len(point) == 2
            and all(isinstance(x, (int, float)) and 0 < x < math.inf for x in point),
            f"{what}: each point is (FLOPs of one matmul > 0, factor > 0), got {point!r}",
        )
    expect(
        all(a[0] < b[0] for a, b in zip(curve, curve[1:])),
        f"{what}: the sizes (FLOPs) must strictly increase, got {[p[0] for p in curve]}",
    )


def curve_factor(curve: GemmCurve, flops: float) -> float:
    """The curve at a matmul call of ``flops`` FLOPs: linear in log FLOPs between its points, flat
    beyond its first and last; 1.0 with no points."""
    if not curve:
        return 1.0
    if flops <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if flops <= x1:
            return y0 + (y1 - y0) * math.log(flops / x0) / math.log(x1 / x0)
    return curve[-1][1]


def layer_gemms(model: TransformerSpec, tensor: int = 1) -> list[tuple[int, int]]:
    """The matmul calls of one micro-batch's forward on one device of a tensor group of ``tensor``
    (Megatron's split: columns of QKV and the MLP's first matmul, rows of the output projection
    and the second), as (FLOPs of one call, calls per model). b·s tokens go through each weight
    matmul (sequence parallelism gathers them first): in every layer QKV (h → 3h/t), the output
    projection (h/t → h), the MLP (h → f/t, f/t → h; a Llama block's SwiGLU two h → f/t, gate
    and up); attention's scores QKᵀ and its sum over V, each one batched call over the device's
    b·a/t heads of s × h/a by h/a × s (flash attention fuses them: the curve prices them as that
    batched GEMM); once, the logits (h → V/t). Backward's two matmuls per forward one have the
    same sizes."""
    h, t, s, b = model.hidden, tensor, model.seq, model.micro_batch
    bs, dh, heads = b * s, h // model.heads, model.heads // tensor
    L = model.layers
    if model.llama:  # Q and the kv heads' K and V; SwiGLU's gate and up, then down
        qkv, up = (h + 2 * model.kv_width) // t, 2
    else:
        qkv, up = 3 * h // t, 1
    return [
        (2 * bs * h * qkv, L),
        (2 * bs * (h // t) * h, L),
        (2 * bs * h * (model.ffn // t), up * L),
        (2 * bs * (model.ffn // t) * h, L),
        (2 * s * dh * s * b * heads, L),
        (2 * s * s * dh * b * heads, L),
        (2 * bs * h * (model.vocab // t), 1),
    ]


def gemm_factor(curve: GemmCurve, model: object, tensor: int = 1) -> float:
    """What the hardware's ``flops`` is multiplied by for ``model`` at tensor degree ``tensor``:
    the curve at each of ``layer_gemms``' calls, weighted by their FLOPs as time adds up (a
    harmonic mean: Σ FLOPs / Σ FLOPs/factor). Applied to every FLOP of the model (its few that are
    not matmuls -- biases, norms -- included). 1.0 with no curve, or for a model that is not a
    transformer (no sizes to read)."""
    if not curve or not isinstance(model, TransformerSpec):
        return 1.0
    calls = layer_gemms(model, tensor)
    total = sum(f * n for f, n in calls)
    return total / sum(f * n / curve_factor(curve, f) for f, n in calls)


def curve_of(measured: Mapping[int, float]) -> GemmCurve:
    """A curve from measured matmul calls, ``{FLOPs of the call: achieved FLOP/s}``: the point
    (FLOPs, FLOP/s ÷ the fastest's) for each, so the curve is 1.0 where the matmuls ran fastest.
    A hardware whose ``flops`` is the achieved FLOP/s of large GEMMs carries it as measured."""
    expect(len(measured) > 0, "a GEMM curve needs at least one measured matmul")
    best = max(measured.values())
    return tuple((float(f), rate / best) for f, rate in sorted(measured.items()))


#: Measured: OpenXLA's table of matmul throughput on an H100 (``kDefaultMatmulPTable``, entry
#: "sm_90", bf16 × bf16 -> bf16, batch 1), xla/service/gpu/model/matmul_interpolator_data.h (as
#: vendored in tensorflow/tensorflow, third_party/xla). The rows with m = 4096 -- the b·s tokens of
#: a Megatron micro-batch at s = 4096 -- and n, k >= 512 (every weight matmul of the published runs
#: is wider): (m, n, k, FLOP/s).
XLA_H100_BF16: tuple[tuple[int, int, int, int], ...] = (
    (4096, 512, 512, 238_821_580_071_174),
    (4096, 1024, 512, 343_707_370_038_412),
    (4096, 512, 1024, 370_767_204_419_889),
    (4096, 1024, 1024, 488_064_465_454_545),
    (4096, 2048, 512, 447_019_910_074_937),
    (4096, 512, 2048, 521_740_439_261_418),
    (4096, 4096, 512, 543_116_754_678_806),
    (4096, 512, 4096, 649_964_784_503_632),
    (4096, 1024, 4096, 738_474_431_911_967),
    (4096, 4096, 2048, 738_736_406_437_117),
    (4096, 2048, 4096, 758_434_522_012_648),
    (4096, 4096, 4096, 783_328_793_548_203),
)


def mean_by_size(rows: tuple[tuple[int, int, int, int], ...]) -> dict[int, float]:
    """{FLOPs of one call (2·m·n·k): the mean FLOP/s of the rows of that size}."""
    by_size: dict[int, list[int]] = {}
    for m, n, k, rate in rows:
        by_size.setdefault(2 * m * n * k, []).append(rate)
    return {size: sum(rates) / len(rates) for size, rates in by_size.items()}


#: The H100's curve from ``XLA_H100_BF16``: factor 1.0 at 4096³ (783e12 FLOP/s, 79 % of the
#: 989e12 peak), 0.30 at 4096 × 512 × 512; flat beyond 4096³ (the table's largest). No preset
#: carries it: ``benchmarks/published/compare.py --gemm-curve h100`` tries it.
H100_CURVE: GemmCurve = curve_of(mean_by_size(XLA_H100_BF16))
GEMM_CURVES: dict[str, GemmCurve] = {"h100": H100_CURVE}
