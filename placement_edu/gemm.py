"""Achieved FLOP/s as a function of the matmul shapes (issue 27, item 3).

One achieved FLOP/s for every model (``timing.Hardware.flops``) says a 1.7B model's matmuls run as
fast as a 462B model's; they do not: a bigger GEMM does more FLOPs per byte it moves and runs
closer to peak (Megatron-LM's README: "larger GEMMs have higher arithmetic intensity and are
consequently more efficient to execute"). A hardware's ``gemm_curve`` says how much: a handful of
points (arithmetic intensity, factor), piecewise-linear in log intensity, factor 1.0 = the
hardware's ``flops``. No curve (the presets): factor 1.0 everywhere, the figures of one number.
Read top to bottom:

- ``intensity``       a GEMM's arithmetic intensity, FLOPs per byte of 2-byte operands
- ``curve_factor``    the curve at one intensity (flat beyond its end points)
- ``layer_gemms``     the matmuls one micro-batch runs through a transformer at a tensor slice
- ``gemm_factor``     the FLOP-weighted factor of those matmuls: what ``timing.compute_time``
                      multiplies ``flops`` by
- ``fit_curve``       a curve from measured matmul FLOP/s (``placement-edu calibrate``)

Units: FLOPs, bytes, FLOP/s; a factor is dimensionless.
"""

from __future__ import annotations

import math
from typing import Mapping

from placement_edu.errors import expect
from placement_edu.models import TransformerSpec

#: A curve: (arithmetic intensity in FLOPs per byte, factor × the hardware's ``flops``) points,
#: intensities strictly increasing. Empty: factor 1.0 at every intensity.
GemmCurve = tuple[tuple[float, float], ...]


def check_curve(curve: GemmCurve, what: str = "gemm_curve") -> None:
    """Refuse a curve whose intensities do not strictly increase or whose numbers are not > 0."""
    for point in curve:
        expect(
            len(point) == 2
            and all(isinstance(x, (int, float)) and 0 < x < math.inf for x in point),
            f"{what}: each point is (intensity FLOP/byte > 0, factor > 0), got {point!r}",
        )
    expect(
        all(a[0] < b[0] for a, b in zip(curve, curve[1:])),
        f"{what}: the intensities must strictly increase, got {[p[0] for p in curve]}",
    )


def intensity(m: int, k: int, n: int) -> float:
    """Arithmetic intensity of an (m × k) @ (k × n) matmul: its 2·m·k·n FLOPs over the bytes of
    its two operands and its result at 2 bytes each (bf16), each moved once: m·k·n / (m·k + k·n +
    m·n). A square n × n GEMM: n/3. Backward's two GEMMs have the same three sizes, so the same
    intensity."""
    return m * k * n / (m * k + k * n + m * n)


def curve_factor(curve: GemmCurve, at: float) -> float:
    """The curve at intensity ``at``: linear in log intensity between its points, flat beyond its
    first and last; 1.0 with no points."""
    if not curve:
        return 1.0
    if at <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if at <= x1:
            return y0 + (y1 - y0) * math.log(at / x0) / math.log(x1 / x0)
    return curve[-1][1]


def layer_gemms(model: TransformerSpec, tensor: int = 1) -> list[tuple[int, int, int, int]]:
    """The matmuls of one micro-batch's forward on one device of a tensor group of ``tensor``
    (Megatron's split: columns of QKV and the MLP's first matmul, rows of the output projection and
    the second), as (m, k, n, how many per model): m = b·s tokens (all of them: sequence
    parallelism gathers them before each matmul), in every layer QKV (h → 3h/t), the output
    projection (h/t → h), the MLP (h → f/t, f/t → h), and per head on the device -- a/t heads --
    the scores QKᵀ (s × h/a by h/a × s) and attention over V (s × s by s × h/a), b of each; once,
    the logits (h → V/t)."""
    h, t, L, s = model.hidden, tensor, model.layers, model.seq
    bs, dh, heads = model.micro_batch * s, h // model.heads, model.heads // tensor
    return [
        (bs, h, 3 * h // t, L),
        (bs, h // t, h, L),
        (bs, h, model.ffn // t, L),
        (bs, model.ffn // t, h, L),
        (s, dh, s, L * heads * model.micro_batch),
        (s, s, dh, L * heads * model.micro_batch),
        (bs, h, model.vocab // t, 1),
    ]


def gemm_factor(curve: GemmCurve, model: object, tensor: int = 1) -> float:
    """What the hardware's ``flops`` is multiplied by for ``model`` at tensor degree ``tensor``:
    the curve at each of ``layer_gemms``' intensities, weighted by the GEMM's FLOPs as time adds
    up (a harmonic mean: Σ FLOPs / Σ FLOPs/factor). Applied to every FLOP of the model (its few
    that are not matmuls -- biases, norms -- included). 1.0 with no curve, or for a model that is
    not a transformer (no shapes to read)."""
    if not curve or not isinstance(model, TransformerSpec):
        return 1.0
    gemms = [
        (m * k * n * count, intensity(m, k, n)) for m, k, n, count in layer_gemms(model, tensor)
    ]
    return sum(f for f, _ in gemms) / sum(f / curve_factor(curve, at) for f, at in gemms)


def fit_curve(measured: Mapping[int, float]) -> GemmCurve:
    """A curve from square matmuls timed at sizes n (``{n: FLOP/s}``): the point (n/3, FLOP/s ÷
    the fastest's) for each, so the curve is 1.0 where the matmuls ran fastest. A hardware whose
    ``flops`` is the achieved FLOP/s of large GEMMs carries it as measured."""
    expect(len(measured) > 0, "fit_curve needs at least one measured size")
    best = max(measured.values())
    return tuple((n / 3, f / best) for n, f in sorted(measured.items()))
