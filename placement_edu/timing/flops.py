"""Compute: FLOPs per token and their seconds (SPEC §9).

- ``flops_per_token``  6Ψ per token (2 forward + 4 backward) + attention's 12·L·h·s, plus what
                       recomputation replays (``FLOP_CONVENTION`` names the count)
- ``megatron_flops_per_token`` and its parts: Megatron-LM's count, for published figures
- ``compute_time``     those FLOPs at the device's achieved FLOP/s, per pass (at the model's
                       matmul shapes when the hardware has a ``gemm_curve``), plus eager
                       attention's memory-bound bytes (``eager_attention_bytes_per_token``)
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from placement_edu.errors import expect, positive_int
from placement_edu.experts import has_experts
from placement_edu.gemm import gemm_factor
from placement_edu.float8 import Float8
from placement_edu.models import Model, ModelOrPsi, TransformerSpec, as_model, every_kth
from placement_edu.roofline import (
    EAGER_ATTENTION_BYTES,
    SOFTMAX_BYTES,
    Kernels,
    roofline_seconds,
)
from placement_edu.timing.hardware import Hardware

# --- compute: 6Ψ per token, and attention (SPEC §9) --------------------------------------------
#: The FLOP count the compute time uses, named (as published figures must say which): PaLM's
#: model FLOPs, 6N + 12·L·h·s per token (Chowdhery et al. 2022, Appendix B: N every parameter,
#: 12·L·H·Q·T the attention scores' matmuls, forward and backward, H·Q = h, T = s), plus what
#: recomputation replays (hardware FLOPs). Megatron-LM's ``num_floating_point_operations`` counts
#: the same attention term and only the matmuls' weights (no biases, norms or position embeddings):
#: ``megatron_flops_per_token``. An abstract model (no sequence) has no attention term: 6Ψ.
FLOP_CONVENTION = "PaLM's 6Ψ + 12·L·h·s per token (model FLOPs), plus recomputation (hardware)"


def attention_flops_per_token(model: ModelOrPsi) -> dict[str, int]:
    """FLOPs of attention's two s² matmuls for one token, per pass, that 6Ψ leaves out (they have
    no parameters): per layer, QKᵀ (2·s·h: the token's query against s keys of h values) and
    attention over V (2·s·h). Forward 4·L·h·s, backward twice that: 12·L·h·s in all (PaLM's
    12·L·H·Q·T; Narayanan et al. 2021 eq. 3's s/(6h) term), as both count -- halved for a model
    whose ``attention_count`` is "causal" (Megatron-LM's causal count,
    ``TransformerSpec.ATTENTION_COUNTS``). 0 for a model without a sequence."""
    model = as_model(model)
    if not isinstance(model, TransformerSpec) and not has_experts(model):
        return {"forward": 0, "backward": 0, "step": 0}
    count = TransformerSpec.ATTENTION_COUNTS[getattr(model, "attention_count", "full")]
    forward = int(4 * model.layers * model.hidden * model.seq * count)
    return {"forward": forward, "backward": 2 * forward, "step": 0}


def flops_per_token(psi_or_model: ModelOrPsi, recompute: str = "none") -> dict[str, int]:
    """SPEC §9: hardware FLOPs of one token through a dense model, per pass (``FLOP_CONVENTION``).

    Forward 2Ψ (a multiply and an add per parameter), backward 4Ψ (the gradients of the
    activations and of the weights, 2Ψ each): 6Ψ in all; a transformer adds attention's
    12·L·h·s (``attention_flops_per_token``). Recomputation replays forward work inside backward:
    "full" the whole forward (2Ψ + 4·L·h·s; 8Ψ in all for an abstract model); "selective" only
    QKᵀ and attention over V, 4·b·s²·h per layer and micro-batch = 4·L·h·s per token
    (Korthikanti et al. 2022, §4.2 and eq. 8; softmax and dropout are elementwise, not counted).
    Model FLOPs (what MFU counts): ``model_flops_per_token``."""
    known_recompute(recompute)
    model = as_model(psi_or_model)
    # a mixture of experts runs each token through its k experts only: Ψ_active (experts.py); a
    # Llama's untied input embedding is a lookup, no FLOPs (``TransformerSpec.lookup_params``)
    psi = model.active_psi if has_experts(model) else model.psi
    psi -= model.lookup_params
    attention = attention_flops_per_token(psi_or_model)
    forward = 2 * psi + attention["forward"]
    replayed = replayed_share(model, recompute, forward, attention["forward"])
    return {"forward": forward, "backward": 4 * psi + attention["backward"] + replayed, "step": 0}


def known_recompute(recompute: str) -> None:
    """Refuses, in one line, a recomputation the time model does not charge."""
    known = (*TransformerSpec.RECOMPUTE, *TransformerSpec.PROFILE_ONLY)
    expect(
        recompute in known or every_kth(recompute),
        f"recompute must be one of {', '.join(known)} or layer:K, got {recompute!r}",
    )


def replayed_share(model: Model, recompute: str, forward: int, attention: int) -> int:
    """Forward FLOPs recomputation replays in backward, per token: none; core attention's under
    "selective"; the whole ``forward`` under "full"; under torchtitan's layer:K the checkpointed
    layers' share of it, L // K of the L layers (rounded down to a whole FLOP); under
    torchtitan's op policy each block's recomputed matmuls
    (``TransformerSpec.torchtitan_op_recomputed``), L of them."""
    every = every_kth(recompute)
    if every:
        return forward * (model.layers // every) // model.layers
    if recompute == "torchtitan-op":
        expect(
            isinstance(model, TransformerSpec),
            f"torchtitan-op's recomputed matmuls are a transformer block's; got {model!r}",
        )
        assert isinstance(model, TransformerSpec)
        return model.layers * sum(model.torchtitan_op_recomputed().values())
    return {"none": 0, "selective": attention, "full": forward}[recompute]


def palm_flops_per_token(psi_or_model: ModelOrPsi) -> int:
    """PaLM's convention (Chowdhery et al. 2022, Appendix B): model FLOPs of one token, forward +
    backward, nothing replayed -- 6N + 12·L·H·Q·T with N = Ψ every parameter, H·Q = h, T = s:
    6Ψ + 12·L·h·s. What MFU divides by the peak; hardware FLOPs (HFU) add what recomputation
    replays: ``flops_per_token``."""
    return sum(flops_per_token(psi_or_model).values())


def model_flops_per_token(psi_or_model: ModelOrPsi) -> int:
    """Model FLOPs of one token in the package's convention, ``FLOP_CONVENTION``: PaLM's
    (``palm_flops_per_token``)."""
    return palm_flops_per_token(psi_or_model)


def megatron_layer_matmul_weights(model: TransformerSpec) -> int:
    """Weights of one layer's matmuls, as Megatron counts them: Q and the output projection h²
    each, K and V h·K·h/a each (grouped-query attention), the MLP 2hf (3hf with SwiGLU: Megatron's
    ``gated_linear_multiplier`` 3/2 on a Llama block). No biases or norms."""
    h = model.hidden
    mlp = 3 if model.llama else 2
    return 2 * h * h + 2 * h * model.kv_width + mlp * h * model.ffn


def megatron_attention_forward_per_token(model: TransformerSpec, causal: bool = False) -> int:
    """Core attention's forward FLOPs for one token as Megatron counts them: QKᵀ and attention over
    V, 2·s·h each per layer, 4·L·h·s (``attention_flops_per_token``'s forward) -- halved with
    ``causal`` (only half of the causal mask is non-zero), as Megatron-LM's main branch counts
    since it added that factor (seen at commit 001b00c of megatron/training/training.py); the
    papers (Narayanan et al. 2021 eq. 3, Korthikanti et al. 2022) and PaLM do not halve."""
    forward = attention_flops_per_token(replace(model, attention_count="full"))["forward"]
    return forward // 2 if causal else forward


def megatron_flops_per_token(model: TransformerSpec, causal: bool = False) -> int:
    """Megatron-LM's ``num_floating_point_operations`` (megatron/training/training.py,
    ``transformer_flops`` for a dense GPT without SwiGLU or MoE), per token: model FLOPs, 3 GEMMs
    per weight (forward, backward's data and weight gradients) × 2 FLOPs × the matmuls' weights --
    L layers of ``megatron_layer_matmul_weights`` and the logit layer V·h -- plus 3 × core
    attention's forward (``megatron_attention_forward_per_token``). For K = a and f = 4h:
    72·L·h²·(1 + s/(6h) + V/(12hL)) (Narayanan et al. 2021, eq. 3 without its recomputation;
    Korthikanti et al. 2022, eq. 7). It leaves out biases, norms and position embeddings, which
    PaLM's 6Ψ counts."""
    weights = model.layers * megatron_layer_matmul_weights(model) + model.vocab * model.hidden
    return 6 * weights + 3 * megatron_attention_forward_per_token(model, causal)


def megatron_hardware_flops_per_token(
    model: TransformerSpec, recompute: str = "none", causal: bool = False
) -> int:
    """``megatron_flops_per_token`` plus the forward work recomputation replays (hardware FLOPs):
    "full" every layer's forward -- 2·L·(layer weights) + core attention, not the logit layer --
    "selective" core attention's forward (Korthikanti et al. 2022, §4.2). With "full" and K = a,
    f = 4h: 96·L·h²·(1 + s/(6h) + V/(16hL)) per token, Narayanan et al. 2021 eq. (3)."""
    known_recompute(recompute)
    attention = megatron_attention_forward_per_token(model, causal)
    layers = 2 * model.layers * megatron_layer_matmul_weights(model) + attention
    replayed = replayed_share(model, recompute, layers, attention)
    return megatron_flops_per_token(model, causal) + replayed


def logit_flops_per_token(model: ModelOrPsi) -> dict[str, int]:
    """FLOPs of one token through a transformer's logit layer (the output projection onto the
    vocabulary, V·h weights), per pass: forward 2·V·h, backward 4·V·h; 0 for a model without a
    vocabulary. Already in 6Ψ (Ψ counts the tied V·h embedding); what a pipeline's last stage does
    besides its layers (``compute_time``). Never recomputed: recomputation replays layers."""
    model = as_model(model)
    if not isinstance(model, TransformerSpec):
        return {"forward": 0, "backward": 0, "step": 0}
    forward = 2 * model.vocab * model.hidden
    return {"forward": forward, "backward": 2 * forward, "step": 0}


def compute_time(
    psi_or_model: ModelOrPsi,
    tokens: float | Fraction,
    hw: Hardware,
    recompute: str = "none",
    tensor: int = 1,
    stages: int = 1,
    float8: Float8 | None = None,
) -> dict[str, float]:
    """Seconds of compute per pass ("forward", "backward", "step") for ``tokens`` tokens through a
    model (Ψ, or a transformer: attention counted) on one device of ``hw`` at its achieved FLOP/s
    (``flops_per_token``: hardware FLOPs, recomputation included). The optimizer step's own
    compute is not modelled (0 s).

    Per device of a mesh: the step's FLOPs spread evenly, so a device does 6Ψ × (tokens per
    device) whatever the mesh -- a tensor or pipeline group of k devices shares k times the tokens
    and 1/k of the parameters (and of the heads or layers) each. One exception: a pipeline of
    ``stages`` p > 1 runs at the pace of its slowest stage, the last, which computes the logit
    layer (``logit_flops_per_token``) for the whole pipeline besides its L/p layers: p times its
    even share, (p - 1) × the logits' FLOPs more per token of the device (Megatron-LM puts the
    embedding on the first stage and the output layer and loss on the last). A split that counts
    the logit layer as work (``Strategy.balanced_stages``) evens this out: give ``stages`` = 1.
    The first stage's embedding lookup has no FLOPs.

    With a ``gemm_curve``, a transformer's FLOPs run at ``flops`` × ``gemm.gemm_factor``: the
    curve over the matmuls a device runs at tensor degree ``tensor`` (1 without a curve).

    The roofline (issue 42): on hardware priced on it (``Hardware.roofline``), a transformer is
    priced op by op (``roofline.roofline_seconds``: each op's max(FLOPs / rate, bytes / the HBM
    bandwidth): the norms, activations, residual adds, casts and the loss at the bandwidth), its
    elementwise chains fused where the hardware says torch.compile runs (``Hardware.fused``), and
    ``float8``'s GEMMs (torchao's recipe, ``float8.Float8``) at ``fp8_speedup`` × the rate.
    Otherwise the FLOP-only model above."""
    expect(
        isinstance(tokens, (int, float, Fraction)) and not isinstance(tokens, bool) and tokens >= 0,
        f"tokens is a number of tokens >= 0, got {tokens!r}",
    )
    achieved = hw.flops * gemm_factor(hw.gemm_curve, psi_or_model, tensor)
    logits = logit_flops_per_token(psi_or_model)
    extra = positive_int("stages", stages) - 1
    expect(
        float8 is None or hw.fp8_speedup is not None,
        f"float8 runs its GEMMs on FP8 tensor cores, and hardware {hw.name!r} has none "
        "(fp8_speedup None: an A100); give an H100 or H200 preset, or a bf16 precision",
    )
    if (
        hw.roofline
        and hw.memory_bandwidth is not None
        and isinstance(psi_or_model, TransformerSpec)
    ):
        kernels = Kernels(hw.fused, float8)
        seconds = roofline_seconds(
            psi_or_model, float(tokens), achieved, hw.memory_bandwidth, recompute, kernels,
            hw.fp8_speedup or 1.0,
        )  # fmt: skip
        for phase, f in logits.items():
            seconds[phase] += extra * f * float(tokens) / achieved
        return seconds
    seconds = {
        phase: (f + extra * logits[phase]) * float(tokens) / achieved
        for phase, f in flops_per_token(psi_or_model, recompute).items()
    }
    return seconds


def eager_attention_bytes_per_token(model: object, recompute: str = "none") -> dict[str, int]:
    """Bytes per token, per pass, that eager attention's softmax and dropout move through device
    memory (``EAGER_ATTENTION_BYTES`` per score): a token meets a·s scores in each of L layers, so
    L·a·s × 9 forward and × 11 backward, plus the forward's 9 again under recomputation ("full"
    and "selective" both replay the softmax and dropout, and torchtitan-op, whose save list
    holds neither). Like the FLOPs, the tokens a device
    handles carry its share: b·(a/t)·s² scores per layer on a tensor slice, m·b·s/(t·p) tokens.
    0 for flash attention and for a model that is not a dense transformer."""
    if not isinstance(model, TransformerSpec) or model.attention != "eager":
        return {"forward": 0, "backward": 0, "step": 0}
    scores = model.layers * model.heads * model.seq
    moved = SOFTMAX_BYTES if model.llama else EAGER_ATTENTION_BYTES
    forward = moved["forward"] * scores
    replayed = (
        forward
        if recompute in ("full", "selective", "torchtitan-op")  # (each replays the softmax)
        else replayed_share(model, recompute, forward, 0)
        if every_kth(recompute)
        else 0
    )
    return {
        "forward": forward,
        "backward": moved["backward"] * scores + replayed,
        "step": 0,
    }
