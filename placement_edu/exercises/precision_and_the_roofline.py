"""Exercises of the notebook "Precision and the roofline" (issue 42, item 4): bytes on the wire
under FSDP2's mixed precision, bf16's spacing, fp16's loss scale, float8's tensorwise scale and the
H100's ridge point. Each reference is computed from the package's presets or from the number
formats' definitions (IEEE 754's binary16; bfloat16's 7 stored mantissa bits; OCP FP8's e4m3,
largest finite value 448), never typed in."""

from __future__ import annotations

import math
from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.roofline import ridge_point
from placement_edu.timing import HBM_BANDWIDTH, PEAK_FLOPS

#: bfloat16 stores 7 mantissa bits: the spacing of its numbers in [1, 2) is 2^-7.
BF16_MANTISSA_BITS = 7
#: float16 (IEEE 754 binary16): 10 mantissa bits, exponent bias 15, smallest normal 2^-14.
FP16_SMALLEST_NORMAL = Fraction(1, 2**14)
#: OCP FP8 e4m3 (torch.float8_e4m3fn): the largest finite value, 448 = 1.75 · 2^8.
E4M3_MAX = 448

#: The gradient of Exercise 3 and the amax of Exercise 4, as the questions give them.
TINY_GRADIENT = Fraction(1, 10**8)
AMAX = Fraction(7, 2)


def _wire_bytes_per_parameter() -> int:
    """FSDP (zero3) with fsdp2_bf16: a forward all-gather, a backward all-gather, one
    reduce-scatter, each in its wire dtype."""
    p = get_precision("fsdp2_bf16")
    return 2 * p.wire_bytes(State.PARAMS) + p.wire_bytes(State.GRADS)


def _loss_scale() -> int:
    """The smallest power of two that lifts ``TINY_GRADIENT`` to fp16's smallest normal."""
    return 2 ** math.ceil(math.log2(FP16_SMALLEST_NORMAL / TINY_GRADIENT))


EXERCISES = (
    Exercise(
        "precision-fsdp2-wire-bytes",
        "FSDP2 with `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` (the "
        "`fsdp2_bf16` preset): how many bytes per parameter do one step's collectives move as "
        "payload -- the forward all-gather, the backward all-gather and the reduce-scatter "
        "together? Give the exact number.",
        _wire_bytes_per_parameter,
        "bytes",
        "2 + 2 + 4 = 8 B: both gathers move bf16 (param_dtype), the reduce-scatter fp32 "
        "(reduce_dtype); the stored fp32 shards never travel as such.",
        mistakes=(
            (12, "that prices every collective in the stored fp32: the gathers move bf16."),
            (6, "that reduces in bf16: reduce_dtype=fp32 moves the gradients at 4 B."),
            (4, "that is one gather and the reduce-scatter: FSDP gathers again in backward."),
        ),
        hint="a gather in param_dtype, forward and backward; a reduce-scatter in reduce_dtype.",
        exact=True,
    ),
    Exercise(
        "precision-bf16-spacing",
        "bfloat16 keeps 7 mantissa bits. What is the gap between 1.0 and the next bfloat16 "
        "number above it (so an update smaller than half of it leaves a weight of 1.0 "
        "unchanged)?",
        lambda: Fraction(1, 2**BF16_MANTISSA_BITS),
        "",
        "2^-7 = 0.0078125: a weight of 1.0 takes updates only in steps of 0.0078; lr · gradient "
        "of 1e-3 rounds away. An fp32 master copy (23 mantissa bits: 2^-23) keeps it.",
        mistakes=(
            (Fraction(1, 2**8), "that is half the gap: the largest update that still rounds away."),
            (Fraction(1, 2**23), "that is float32's gap (23 mantissa bits)."),
            (Fraction(1, 2**10), "that is float16's gap (10 mantissa bits)."),
        ),
        hint="7 bits after the leading 1: the last one is worth 2^-7.",
    ),
    Exercise(
        "precision-fp16-loss-scale",
        "A gradient of 1e-8 underflows in float16, whose smallest normal number is 2^-14 "
        "(about 6.1e-5). What is the smallest power-of-two loss scale that lifts it to at "
        "least 2^-14? Give the exact number.",
        _loss_scale,
        "×",
        "2^-14 / 1e-8 = 6,103.5, so 2^13 = 8,192: the scaled gradient, 8.19e-5, is a normal "
        "float16; unscaled in fp32 (÷ 8,192) it is 1e-8 again, to fp16's 11 significant bits.",
        mistakes=(
            (4096, "2^12 lifts 1e-8 to 4.1e-5, still below 2^-14 (a subnormal: few bits left)."),
            (65536, "that is the usual starting scale of dynamic loss scaling, not the smallest."),
        ),
        hint="2^-14 / 1e-8, rounded up to a power of two.",
        exact=True,
    ),
    Exercise(
        "precision-float8-scale",
        "torchao's tensorwise float8: a weight whose largest |value| (amax) is 3.5 is multiplied "
        "by scale = 448 / amax before the cast to e4m3 (largest finite value 448). What is the "
        "scale? Give the exact number.",
        lambda: Fraction(E4M3_MAX) / AMAX,
        "×",
        "448 / 3.5 = 128: the largest value lands on e4m3's largest, 448, and every other value "
        "uses as much of the format's range as the tensor allows; the matmul's output is divided "
        "by the two scales (input's and weight's) again.",
        mistakes=(
            (Fraction(2, 7 * 448), "that is 1/scale: what the output is multiplied by."),
            (Fraction(57344) / AMAX, "that uses e5m2's largest value, 57,344 (the gradients')."),
        ),
        hint="scale = finfo(float8_e4m3fn).max / amax.",
        exact=True,
    ),
    Exercise(
        "precision-h100-ridge-point",
        "An H100 SXM: 989e12 bf16 FLOP/s dense, 3.35e12 bytes/s of HBM bandwidth. Above how many "
        "FLOPs per byte is an op compute-bound (the ridge point)? 3 significant figures.",
        lambda: Fraction(ridge_point(PEAK_FLOPS["H100"], HBM_BANDWIDTH["H100"])),
        "FLOPs per byte",
        "989e12 / 3.35e12 = 295: a GEMM of 2,048 tokens does ~1,000 FLOPs a byte, a norm or an "
        "add a few -- below 1 -- so it runs at the bandwidth, whatever the tensor cores could do.",
        mistakes=(
            (Fraction(3350, 989), "that is bandwidth ÷ FLOP/s: the ridge is FLOP/s ÷ bandwidth."),
        ),
        hint="peak FLOP/s ÷ bytes per second.",
        figures=3,
    ),
)
