"""A Llama block in the formula path (``TransformerSpec(block="llama")``): RoPE, untied
embeddings, no biases, RMSNorm, SwiGLU -- so "Llama-3-8B" is Meta's 8.03e9 parameters, its FLOPs
are torchtitan's count, and its activations Megatron's model of a Llama (issue 40, item 3)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from placement_edu.architectures import get_architecture
from placement_edu.gemm import layer_gemms
from placement_edu.models import TransformerSpec
from placement_edu.timing import flops_per_token, megatron_layer_matmul_weights

pytestmark = pytest.mark.fast

LLAMA_3_8B = TransformerSpec(
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn=14336,
    vocab=128256,
    seq=8192,
    attention="flash",
    block="llama",
)


def test_llama_3_8b_has_metas_parameter_count_and_the_reference_modules() -> None:
    # Meta's model card: 8.03B; the reference module's own tensors (architectures.py, HF's names
    # and shapes: q/k/v/o, gate/up/down, two RMSNorms a block, untied embed_tokens and lm_head)
    assert LLAMA_3_8B.psi == 8_030_261_248
    arch = get_architecture("llama-8b")
    assert LLAMA_3_8B.psi == sum(math.prod(shape) for _, shape, _ in arch.tensors())


def test_its_flops_are_torchtitans_count() -> None:
    # torchtitan's get_num_flop_per_token: 6·N + 12·L·h·s, N the parameters without the input
    # embedding (a lookup); the output layer's V·h counted
    L, h, s, V = 32, 4096, 8192, 128256
    n = LLAMA_3_8B.psi - V * h
    assert sum(flops_per_token(LLAMA_3_8B).values()) == 6 * n + 12 * L * h * s
    # Megatron's count: the matmuls' weights, SwiGLU's 3hf (gated_linear_multiplier 3/2)
    assert megatron_layer_matmul_weights(LLAMA_3_8B) == 2 * h * h + 2 * h * 1024 + 3 * h * 14336


def test_its_activations_are_megatrons_fused_swiglu_and_no_dropout() -> None:
    # per layer, b = 1, 16-bit: norms' and block inputs 8·sbh; Q and the output projection's
    # input 2sbh each, K and V at the 8 kv heads' width (flash) 2·2·sbh/4; the MLP's [s, 2f] and
    # [s, f] 6·sbf; flash's fp32 logsumexp 4·a·s
    s, h, f, a = 8192, 4096, 14336, 32
    sbh = s * h
    terms = LLAMA_3_8B.activation_terms_per_layer()
    assert terms == {
        "outside_tp": 8 * sbh,
        "inside_tp": 4 * sbh + sbh + 6 * s * f,
        "attention_scores": 4 * a * s,
        "layer_input": 0,
    }
    # eager: the softmax's 16-bit output alone (no dropout), K and V expanded to every head
    eager = TransformerSpec(**{**_fields(LLAMA_3_8B), "attention": "eager"})
    assert eager.activation_terms_per_layer()["attention_scores"] == 2 * a * s * s
    assert eager.activation_terms_per_layer()["inside_tp"] == 8 * sbh + 6 * s * f
    # tensor parallelism over t = 8 splits what lies between the column/row pairs
    assert LLAMA_3_8B.activation_terms_per_layer(8)["inside_tp"] == Fraction(5 * sbh + 6 * s * f, 8)
    # every tensor rank keeps the two RMSNorm weights of a layer, the final norm on the last stage
    assert LLAMA_3_8B.tensor_replicated_elements(range(32), True) == 2 * h * 32 + h


def test_a_llama_blocks_gemms_add_up_to_its_matmul_flops() -> None:
    # layer_gemms lists every matmul of a forward: q, k, v, o, gate, up, down, the two attention
    # matmuls, the logits; their FLOPs are 2·(matmul weights)·tokens + attention's 4·L·h·s·tokens
    b, s = 1, 8192
    total = sum(flops * calls for flops, calls in layer_gemms(LLAMA_3_8B))
    weights = 32 * megatron_layer_matmul_weights(LLAMA_3_8B) + 128256 * 4096
    assert total == 2 * weights * b * s + 4 * 32 * 4096 * s * b * s


def test_a_gpt_block_is_unchanged_and_block_is_validated() -> None:
    gpt = TransformerSpec(layers=12, hidden=768, heads=12, seq=1024, vocab=50257)
    assert gpt.block == "gpt" and gpt.psi == 124_439_808  # HF GPT-2 124M, tied embeddings
    with pytest.raises(Exception, match="block must be one of gpt, llama"):
        TransformerSpec(layers=1, hidden=8, heads=2, seq=4, vocab=16, block="mamba")


def _fields(spec: TransformerSpec) -> dict:
    from dataclasses import fields

    return {f.name: getattr(spec, f.name) for f in fields(spec) if f.init}


def test_layer_k_in_the_formula_checkpoints_l_over_k_layers() -> None:
    # torchtitan's layer:K in the formula: L // K layers as under full, the rest as under none;
    # the time model replays those layers' share of the forward
    from dataclasses import replace

    from placement_edu.timing import flops_per_token

    none, full, two = (replace(LLAMA_3_8B, recompute=r) for r in ("none", "full", "layer:2"))
    assert (
        two.checkpointed_layers == 16
        and replace(LLAMA_3_8B, recompute="layer:5").checkpointed_layers == 6
    )
    per_layer = (none.activation_bytes_per_layer() + full.activation_bytes_per_layer()) / 2
    assert two.activation_bytes_per_layer() == per_layer
    assert two.recompute_working_set() == full.recompute_working_set()
    replayed = flops_per_token(full)["backward"] - flops_per_token(none)["backward"]
    assert flops_per_token(two)["backward"] - flops_per_token(none)["backward"] == replayed // 2
    assert flops_per_token(replace(LLAMA_3_8B, recompute="layer:1")) == flops_per_token(full)
    assert replace(LLAMA_3_8B, recompute="layer:33").checkpointed_layers == 0


def test_llama_3_2_1b_ties_its_embeddings_and_time_prices_its_module(capsys) -> None:
    """Llama-3.2-1B shares its output layer with the token embedding (HF config
    ``tie_word_embeddings: true``): V·h once, 1,235,814,400 parameters -- the module's own count
    (``architectures``' tensors) -- where an untied Llama block would count 1,498,482,688. So
    ``time --model llama-1b`` prices the module's peak instead of refusing; the tied embedding
    is the logit layer's matmul, so no lookup is left out of the FLOPs (as GPT's)."""
    from dataclasses import replace

    from placement_edu.cli import main
    from placement_edu.cli.one_peak import parameters

    arch = get_architecture("llama-1b")
    tied = arch.formula(2048)
    untied = replace(tied, tied_embeddings=False)
    assert tied.tied and tied.psi == parameters(arch) == 1_235_814_400
    assert untied.psi - tied.psi == 128_256 * 2_048 == 262_668_288  # V·h, the output layer
    assert (tied.lookup_params, untied.lookup_params) == (0, 262_668_288)
    # the 8B is untied, as before (Meta's 8,030,261,248)
    assert get_architecture("llama-8b").formula(8192).psi == LLAMA_3_8B.psi == 8_030_261_248
    argv = ["time", "--model", "llama-1b", "--strategy", "zero3", "--mesh", "data=8",
            "--global-batch", "8", "--seq", "2048", "--attention", "sdpa"]  # fmt: skip
    assert main(argv) == 0
    assert "from the module's profile" in capsys.readouterr().out
