"""Float8 training as torchao runs it and torchtitan launches it (issue 42, item 2).

torchao's ``convert_to_float8_training`` (torchao/float8, commit eab345c, the one torchtitan's
December 2024 benchmark names) swaps ``nn.Linear`` modules for ``Float8Linear``: each forward casts
the input and the weight to float8 e4m3 with a scale, multiplies them with ``torch._scaled_mm``
(FP8 tensor cores, bf16 out), and each backward casts the output's gradient to e5m2. What stays in
bf16 is everything that is not one of those Linears:

- torchtitan converts every ``nn.Linear`` except the output layer (torchtitan/float8.py at 9dec370:
  ``module_filter_fn=lambda mod, fqn: fqn != "output"``): in a Llama block wq, wk, wv, wo, w1, w2,
  w3 (``converted_params``);
- attention's softmax and SDPA, the norms, RoPE and the embeddings stay bf16 (not Linears).

Scaling (``SCALINGS``): *tensorwise* -- one scale a tensor, dynamic: amax = max(|x|) over the whole
tensor, scale = finfo(e4m3).max / amax, x·scale clamped and cast (``tensor_to_amax``,
``hp_tensor_and_scale_to_float8``); the autograd function
``manual_float8_matmul_with_args_in_float8`` saves the float8 input and weight (1 B a value, plus a
4-byte scale each). *rowwise* -- one scale a row (the ``all_axiswise`` recipe, CUTLASS's rowwise
kernel): ``manual_float8_matmul_with_args_in_hp`` saves the bf16 input and weight (2 B) and casts
them again in backward along the other axis.

FSDP2 with ``enable_fsdp_float8_all_gather``: each rank casts its fp32 shard of a converted weight
to float8 before the all-gather, so those weights travel at 1 B an element (the rest at bf16's 2);
``precompute_float8_dynamic_scale_for_fsdp`` finds every converted weight's amax with one fp32
all-reduce (MAX) of one value a weight, after the optimizer step.

MFU: torchtitan and Megatron-LM state it as model FLOPs ÷ (the bf16 dense peak) -- and torchtitan's
benchmark declines to under float8: "both BFLOAT16 Tensor Core and FP8 Tensor Core are involved in
model training, but they have different peak FLOPS and the definition of MFU under such scenario is
not well-defined" (``mfu_under_float8``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from placement_edu.errors import expect
from placement_edu.models import Number, TransformerSpec
from placement_edu.models.ideal import tensor_split

#: The scaling recipes, as torchao names them, and what the GEMM's autograd function saves for
#: backward: bytes a value of the Linear's input (and weight).
SCALINGS: dict[str, int] = {"tensorwise": 1, "rowwise": 2}

#: torchao's sources, and torchtitan's filter.
SOURCES = (
    "torchao/float8/float8_linear.py at eab345c: Float8Linear.forward, "
    "manual_float8_matmul_with_args_in_float8 (tensorwise, saves input_fp8, weight_fp8_t), "
    "manual_float8_matmul_with_args_in_hp (axiswise, saves input_hp, weight_hp_t)",
    "torchao/float8/fsdp_utils.py at eab345c: WeightWithDynamicFloat8CastTensor "
    "(fsdp_pre_all_gather casts the shard), precompute_float8_dynamic_scale_for_fsdp "
    "(torch._foreach_norm(weights, ord=inf), one all-reduce)",
    "torchtitan/float8.py at 9dec370: module_filter_fn=lambda mod, fqn: fqn != 'output'",
)


@dataclass(frozen=True)
class Float8:
    """A float8 recipe: ``scaling`` ("tensorwise" or "rowwise") and whether FSDP2 gathers the
    converted weights in float8 (``all_gather``, torchao's ``enable_fsdp_float8_all_gather``)."""

    scaling: str = "tensorwise"
    all_gather: bool = True

    def __post_init__(self) -> None:
        expect(
            self.scaling in SCALINGS,
            f"float8 scaling is one of {', '.join(SCALINGS)} (torchao's recipes), got "
            f"{self.scaling!r}",
        )

    @property
    def saved_bytes(self) -> int:
        """Bytes a value of a converted Linear's input its autograd function saves for backward."""
        return SCALINGS[self.scaling]


def linears(model: TransformerSpec) -> tuple[tuple[str, int, int], ...]:
    """The Linears of one block, (name, in features k, out features n), as torchtitan names a
    Llama's and Megatron-LM a GPT's; every one converts (the output layer is not in a block)."""
    h, f, kv = model.hidden, model.ffn, model.kv_width
    if model.llama:
        return (("wq", h, h), ("wk", h, kv), ("wv", h, kv), ("wo", h, h), ("w1", h, f),
                ("w3", h, f), ("w2", f, h))  # fmt: skip
    return (("qkv", h, h + 2 * kv), ("proj", h, h), ("fc1", h, f), ("fc2", f, h))


def converted_params(model: TransformerSpec) -> int:
    """Parameters float8 converts: every block Linear's weight (torchtitan's filter leaves the
    output layer, the embeddings and the norms in bf16; a GPT block's biases stay too)."""
    return model.layers * sum(k * n for _, k, n in linears(model))


def all_gather_bytes(model: TransformerSpec, recipe: Float8 | None) -> int:
    """Bytes of one whole all-gather of ``model``'s parameters under FSDP2 (what each rank ends up
    holding, before the ring's (N-1)/N): bf16 (2 B) every parameter, or, with a float8 all-gather,
    1 B for each converted weight and 2 B for the rest."""
    if recipe is None or not recipe.all_gather:
        return 2 * model.psi
    return int(gathered_bytes(model, 1, 2) * model.psi)  # (whole: the mean over every parameter)


def gathered_bytes(model: object, converted: int, other: int, tensor: int = 1) -> Number:
    """Bytes a parameter element of a float8 all-gather moves (and holds, gathered), on a rank
    whose parameters the tensor axis splits ``tensor`` ways: each converted weight at
    ``converted`` bytes (1, float8), the rest at ``other`` (2, bf16: the embeddings, the norms,
    the output layer). The mean over the rank's share, exact in total (the Ψ-level units hold
    each kind in proportion): the converted weights are Megatron-split by t, the rest are
    ``tensor_split``'s (Ψ − R)/t + R. A model whose block Linears are not named (an abstract Ψ, a
    mixture of experts) moves ``converted`` bytes throughout."""
    if not isinstance(model, TransformerSpec) or converted == other:
        return converted
    share = Fraction(converted_params(model), tensor) / tensor_split(
        model.psi, model.replicated_elements, {"tensor": tensor}
    )
    return converted * share + other * (1 - share)


def amax_all_reduce_bytes(model: TransformerSpec) -> int:
    """The one all-reduce ``precompute_float8_dynamic_scale_for_fsdp`` issues: one fp32 amax a
    converted weight (``torch.stack`` of ``_foreach_norm``'s results)."""
    return 4 * model.layers * len(linears(model))


def saved_linear_inputs(model: TransformerSpec, recipe: Float8 | None) -> int:
    """Bytes per token and layer that the block's Linears keep of their inputs for backward.

    bf16 (no float8, or rowwise, whose ``manual_float8_matmul_with_args_in_hp`` saves
    ``input_hp``): one bf16 tensor per distinct input, shared by the Linears that read it (autograd
    saves a tensor once) -- a Llama block's norm output (wq, wk, wv), attention's output (wo), the
    second norm's output (w1, w3) and SwiGLU's product (w2): 2·(3h + f). Tensorwise
    (``manual_float8_matmul_with_args_in_float8`` saves ``input_fp8``): each Linear its own float8
    copy, 1 B a value, shared by none -- 6h + f for a Llama block, less than bf16's though wq, wk
    and wv each keep one (the 4-byte scales aside)."""
    per_linear = [k for _, k, _ in linears(model)]
    if recipe is not None and recipe.scaling == "tensorwise":
        return sum(per_linear)
    distinct = dict(_inputs(model))  # one entry per tensor, however many Linears read it
    return 2 * sum(distinct.values())


def _inputs(model: TransformerSpec) -> tuple[tuple[str, int], ...]:
    """Each Linear's input tensor, named, with its width (Linears that share one name it alike)."""
    names: tuple[str, ...] = ("norm", "attention", "norm2", "gelu")
    if model.llama:
        names = ("norm", "norm", "norm", "attention", "norm2", "norm2", "swiglu")
    return tuple(zip(names, [k for _, k, _ in linears(model)]))


def amax_and_cast(width: int, fused: bool) -> int:
    """Bytes per token of casting a bf16 row of ``width`` values to float8 with a dynamic scale.
    Eager: ``abs`` (read 2, write 2), ``max`` (read 2), then ``x * scale``, ``clamp`` (read 2,
    write 2 each) and ``.to(float8)`` (read 2, write 1): 17 a value. Fused (torch.compile): the
    amax reads the row once (2) and one kernel scales, clamps and casts it (read 2, write 1): 5."""
    return (5 if fused else 17) * width


def cast_bytes(recipe: Float8, k: int, n: int, tokens: int, fused: bool) -> dict[str, Fraction]:
    """Bytes per token, per pass, that float8 adds around one converted Linear (k in, n out) on
    ``tokens`` (b·s) tokens a call, besides its GEMM's own reads and writes.

    Tensorwise: forward, the input's amax and cast (``amax_and_cast(k)``) and the weight's cast
    once a call (read 2 B, write 1 B a value: on the shard, before the gather, under a float8
    all-gather: counted whole, an upper bound); backward, the output gradient's amax and cast to
    e5m2 (``amax_and_cast(n)``), and the transposed copies ``torch._scaled_mm`` needs of the
    float8 output gradient and input for the weight's gradient and of the weight for the input's
    (read 1, write 1 a value; fused, the casts write the second layout: write 1). Rowwise saves
    the bf16 input and weight and casts each again in backward along the other axis: the input
    (``amax_and_cast(k)``), the weight (3 a value, a call), the output gradient twice."""
    weight = Fraction(3 * k * n, tokens)
    transposes = (1 if fused else 2) * (k + n) + Fraction(2 * k * n, tokens)
    forward = amax_and_cast(k, fused) + weight
    if recipe.scaling == "tensorwise":
        backward = amax_and_cast(n, fused) + transposes
    else:
        backward = amax_and_cast(k, fused) + weight + 2 * amax_and_cast(n, fused)
    return {"forward": forward, "backward": backward}


def mfu_under_float8(model_flops: float, seconds: float, bf16_peak: float) -> float:
    """MFU as torchtitan and Megatron-LM state it: model FLOPs ÷ seconds ÷ the bf16 dense peak.
    Under float8 this can pass what the chip's two peaks allow a mixed step, which is why
    torchtitan declines to print it (module docstring); the package prints it labelled."""
    return model_flops / seconds / bf16_peak
