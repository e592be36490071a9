"""Issue 27, item 6, and grouped-query attention: the formula path's activations -- the attention
implementation apart from recomputation, the logits and the loss, the recomputed layer's working
set -- and GQA's narrower key and value projections, pinned to hand calculations, to HF's
Llama-3-8B tensors and to the activation profile measured from HF's GPT-2 (shipped with the
package: no torch is imported here)."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import pytest

from placement_edu import Mesh, PlacementError, TransformerSpec, get_precision, get_strategy
from placement_edu.architectures import get_architecture
from placement_edu.cli import main
from placement_edu.memory import LOGITS_AND_LOSS, RECOMPUTE_WORKING_SET, derive_memory
from placement_edu.models import heads_divide, tensor_divides_heads
from placement_edu.logits import LOGITS, logits_and_loss
from placement_edu.presentation.fit_answers import formula_spec, profile_for
from placement_edu.timing import attention_flops_per_token, megatron_layer_matmul_weights

pytestmark = pytest.mark.fast

# Llama-3-8B's shape (Meta's config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads, ffn 14336,
# vocab 128,256), at 8K tokens, as the package's GPT-style spec reads it.
LLAMA_8B = dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, vocab=128256)
# A small shape for hand calculations: s·b·h = 128 · 2 · 256 = 65,536; a = 4, K = 2.
S, B, H, A, K = 128, 2, 256, 4, 2
SBH = S * B * H
SMALL = dict(layers=2, hidden=H, heads=A, seq=S, vocab=1000, micro_batch=B)


def test_gqa_narrows_the_key_and_value_projections_in_the_parameter_count() -> None:
    spec = TransformerSpec(**LLAMA_8B)
    # K·h/a = 8 · 128 = 1,024 wide keys and values. Per layer, by hand:
    #   attention 2h² + 2h (Q, out) + 2h·1024 + 2·1024 (K, V) = 33,554,432 + 8,192 + 8,388,608
    #             + 2,048 = 41,953,280
    #   MLP 2hf + f + h = 117,440,512 + 14,336 + 4,096 = 117,458,944; layernorms 4h = 16,384
    #   = 159,428,608; × 32 = 5,101,715,456; + V·h 525,336,576 + s·h 33,554,432 + 2h 8,192
    assert spec.kv_width == 1024
    assert spec.psi == 5_660_614_656
    # multi-head attention (K = a, the default) is the old count: 12h² + 13h per layer at f = 4h
    mha = TransformerSpec(layers=2, hidden=H, heads=A, seq=S, vocab=1000)
    assert mha.kv_heads == A and mha == replace(mha, kv_heads=A)
    assert mha.psi == 2 * (12 * H * H + 13 * H) + 1000 * H + S * H + 2 * H


def test_llama_3_8b_has_8_030_261_248_parameters_with_these_attention_widths() -> None:
    """The package's spec is GPT-style (2 MLP matrices with biases, layernorms, learned positions,
    tied head); Llama has SwiGLU (3 matrices, no biases), RMSNorm and an untied head. The attention
    weights are the same: the GQA widths here are HF's Llama-3-8B tensors'."""
    llama = get_architecture("llama-8b")
    per_layer = {name: shape for name, shape, unit in llama.tensors() if unit == 0}
    q_k_v_o = sum(shape[0] * shape[1] for name, shape in per_layer.items() if "self_attn" in name)
    spec = TransformerSpec(**LLAMA_8B)
    h, f = spec.hidden, spec.ffn
    assert q_k_v_o == megatron_layer_matmul_weights(spec) - 2 * h * f == 41_943_040
    # transformers' LlamaConfig for Meta-Llama-3-8B: 8,030,261,248 parameters (untied embeddings):
    # L·(attention + SwiGLU 3hf + two RMSNorms 2h) + embeddings and head 2·V·h + final norm h
    assert 32 * (q_k_v_o + 3 * h * f + 2 * h) + 2 * 128256 * h + h == 8_030_261_248
    assert sum(s[0] * (s[1] if len(s) > 1 else 1) for _, s, _ in llama.tensors()) == 8_030_261_248


def test_gqa_does_not_change_attentions_s_squared_flops() -> None:
    # every query head still scores against s keys: QKᵀ and attention over V stay 2·s·h each
    assert attention_flops_per_token(TransformerSpec(**LLAMA_8B)) == attention_flops_per_token(
        TransformerSpec(**{**LLAMA_8B, "kv_heads": 32})
    )


def test_kv_heads_must_divide_heads_and_the_tensor_degree_must_divide_kv_heads() -> None:
    with pytest.raises(PlacementError, match=r"kv_heads \(3\) must divide heads \(4\)"):
        TransformerSpec(**SMALL, kv_heads=3)
    spec = TransformerSpec(**SMALL, kv_heads=K)
    with pytest.raises(PlacementError, match="does not divide the 2 key-value heads"):
        tensor_divides_heads(spec, 4)  # Megatron: num_query_groups % t == 0
    assert heads_divide(spec, 2) and not heads_divide(spec, 4)  # what the planner searches


@pytest.mark.parametrize(
    "attention, recompute, kv_heads, inside, scores",
    [
        # Korthikanti et al. 2022, Table 2: sbh(10 + 24/t + 5as/(ht)); 5as²b = 5·4·128²·2
        ("eager", "none", A, 24 * SBH, 5 * A * S * S * B),
        ("eager", "selective", A, 24 * SBH, 0),
        # eager expands K and V to every head before QKᵀ: GQA keeps the same 24sbh
        ("eager", "none", K, 24 * SBH, 5 * A * S * S * B),
        # flash: no s² tensor, the logsumexp 4 B per head and token: 4·a·s·b = 4,096 B
        ("flash", "none", A, 24 * SBH, 4 * A * S * B),
        # flash with GQA keeps K and V at K·h/a: sbh(20 + 4K/a) = 22·sbh
        ("flash", "none", K, 22 * SBH, 4 * A * S * B),
        ("flash", "selective", K, 22 * SBH, 0),
    ],
)
def test_attention_is_apart_from_recomputation(attention, recompute, kv_heads, inside, scores):
    spec = TransformerSpec(**SMALL, kv_heads=kv_heads, attention=attention, recompute=recompute)
    terms = spec.activation_terms_per_layer()
    assert terms == {
        "outside_tp": 10 * SBH,
        "inside_tp": inside,
        "attention_scores": scores,
        "layer_input": 0,
    }
    # over t = 2 tensor ranks every term but outside_tp (no sequence parallelism) halves
    halved = spec.activation_terms_per_layer(2)
    assert halved["inside_tp"] == Fraction(inside, 2)
    assert halved["attention_scores"] == Fraction(scores, 2)


def test_full_recomputation_keeps_layer_inputs_plus_one_recomputed_layer() -> None:
    eager = TransformerSpec(**SMALL, recompute="full")
    flash = replace(eager, attention="flash")
    assert eager.activation_bytes_per_layer() == flash.activation_bytes_per_layer() == 2 * SBH
    # the layer being recomputed keeps what a layer without recomputation keeps
    assert eager.recompute_working_set() == 34 * SBH + 5 * A * S * S * B  # 2,883,584 B
    assert flash.recompute_working_set() == 34 * SBH + 4 * A * S * B  # 2,232,320 B
    assert replace(eager, recompute="none").recompute_working_set() == 0
    memory = derive_memory(get_strategy("dp"), eager, Mesh.of(data=1), get_precision("mixed_adam"))
    # Backward's two moments never overlap (the logits' gradient is gone before a layer is
    # recomputed): the phase holds the larger. Here the logits' 12·b·s·V = 12 · 256 · 1000 =
    # 3,072,000 B outweigh the working set's 2,883,584 B; with V = 100 (307,200 B) they do not.
    assert memory.transient["backward"] == {
        "activations": 2 * 2 * SBH,
        LOGITS_AND_LOSS: 12 * S * B * 1000,
    }
    small_vocab = replace(eager, vocab=100)
    memory = derive_memory(
        get_strategy("dp"), small_vocab, Mesh.of(data=1), get_precision("mixed_adam")
    )
    assert memory.transient["backward"] == {
        "activations": 2 * 2 * SBH,
        RECOMPUTE_WORKING_SET: 34 * SBH + 5 * A * S * S * B,
    }


def test_the_logits_live_on_the_last_stage_split_over_the_tensor_ranks() -> None:
    spec = TransformerSpec(**SMALL)
    mixed = get_precision("mixed_adam")  # 2-byte activations: forward 10·b·s·V, backward 12
    one = derive_memory(get_strategy("dp"), spec, Mesh.of(data=1), mixed)
    assert one.transient["forward"][LOGITS_AND_LOSS] == 10 * S * B * 1000
    assert one.transient["backward"][LOGITS_AND_LOSS] == 12 * S * B * 1000
    tp = derive_memory(get_strategy("tp"), spec, Mesh.of(tensor=2), mixed)
    assert tp.transient["backward"][LOGITS_AND_LOSS] == 6 * S * B * 1000
    pp = get_strategy("pp")
    mesh = Mesh.of(pipeline=2)
    first = derive_memory(pp, spec, mesh, mixed, rank=0)
    last = derive_memory(pp, spec, mesh, mixed, rank=mesh.world_size - 1)
    assert LOGITS_AND_LOSS not in first.transient["backward"]
    assert last.transient["backward"][LOGITS_AND_LOSS] == 12 * S * B * 1000


@pytest.mark.parametrize("compute, width", [("bf16", 2), ("fp32", 4)])
def test_the_logits_and_loss_are_the_measured_paths_tensors(compute: str, width: int) -> None:
    """HF's GPT-2 124M, b = 1, s = 1024, V = 50,257, profiled under PyTorch's MemTracker: the
    head's moment adds exactly the logits; the loss's moments add the formula's terms plus the
    loss's own bookkeeping -- 8,208 B in forward (the shifted labels, int64 b·s·8 = 8,192 B, and
    16 B of scalars) and 8 B in backward (scalars)."""
    profile = profile_for("gpt2", 1, 1024, compute)
    live = {m.name: m.live for m in profile.moments}
    before = live["forward, final norm"]
    formula = logits_and_loss(1024, 50257, width)
    n = 1024 * 50257  # 51,463,168 logits
    assert live["forward, head"] - before == formula["forward"][LOGITS] == width * n
    forward = sum(formula["forward"].values())
    assert forward == {2: 10, 4: 8}[width] * n
    assert live["forward, loss"] - before == forward + 8_192 + 16
    backward = sum(formula["backward"].values())
    assert backward == 12 * n == 617_558_016
    assert live["backward, loss (logits' gradient)"] - before == backward + 8


def test_korthikantis_layer_against_hf_gpt2s_measured_block() -> None:
    """The formula's layer (16-bit, eager, no recomputation) against what HF's GPT-2 block keeps
    in bf16, measured: equal term by term where both count the same tensor, and the residual
    33,038,338 B per layer named (printed by ``placement-edu fit --model gpt2 --precision
    fsdp2_bf16 --devices 8`` as the profile's block)."""
    spec = formula_spec("gpt2")
    formula = spec.activation_bytes_per_layer()
    measured = profile_for("gpt2", 1, 1024, "bf16").block
    sbh, s, a = 1024 * 768, 1024, 12
    assert formula == 34 * sbh + 5 * a * s * s == 89_653_248
    assert measured == 122_691_586
    residual = (
        a * s * s  # CPU dropout keeps a 2-byte noise tensor for the attention probabilities, not
        # Korthikanti's 1-byte mask: + as²b
        + 2 * sbh  # likewise the two residual dropouts: + sbh each
        + 24 * sbh  # gelu_new (tanh GeLU written out) keeps 3 more [s, b, 4h] tensors
        + 2 * 2 * 2 * s  # the two layernorms' mean and rstd, 2 B per token each
        + 2  # the causal mask's fill value, a bf16 scalar torch.where saves
    )
    assert measured - formula == residual == 33_038_338


def test_table_and_plan_take_the_attention_and_the_kv_heads(capsys) -> None:
    shape = ["--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128", "--vocab", "1000"]
    argv = ["table", *shape, "--kv-heads", "2", "--attention", "flash", "--devices", "1"]
    assert main([*argv, "--strategies", "dp", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    spec = TransformerSpec(layers=2, hidden=256, heads=4, kv_heads=2, seq=128, vocab=1000)
    # per layer 10h² (Q and out 2h², the MLP 8h²) + 2h·128 (K and V, K·h/a = 128 wide) + biases
    # and norms 11h + 2·128; then V·h + s·h + the final norm 2h
    assert (
        row["psi"]
        == spec.psi
        == 2 * (10 * 256 * 256 + 2 * 256 * 128 + 11 * 256 + 2 * 128) + (1000 + 128 + 2) * 256
    )
    assert main([*argv[:-4], "--devices", "1", "--strategies", "dp", "--json"]) == 0  # eager
    eager = json.loads(capsys.readouterr().out)[0]
    # per layer (b = 1), flash keeps the logsumexp 4·a·s = 2,048 B in place of eager's 5·a·s² =
    # 327,680 B, and K and V K·h/a wide instead of expanded to every head: 2·s·h = 65,536 B less
    per_layer = (5 * 4 * 128 * 128 - 4 * 4 * 128) + 2 * 128 * 256
    assert eager["memory"]["peak"] - row["memory"]["peak"] == 2 * per_layer == 782_336
    assert main(["plan", "--params", "7e9", "--attention", "flash", "--devices", "8"]) == 0
    assert "flash attention" in capsys.readouterr().out
    assert main(["plan", "--params", "7e9", "--kv-heads", "8", "--devices", "8"]) == 2
    assert "not both (got --params with --kv-heads)" in capsys.readouterr().err
    assert main(["table", *shape, "--kv-heads", "3", "--devices", "1"]) == 2
    assert "kv_heads (3) must divide heads (4)" in capsys.readouterr().err
