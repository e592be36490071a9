"""Issue 27, item 2: FLOPs as the sources count them -- PaLM's 6N + 12·L·h·s and Megatron-LM's
``num_floating_point_operations``, model FLOPs against hardware FLOPs (with recomputation), pinned
to the formulas the papers print and to Megatron's code, with literals worked by hand."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from placement_edu import TransformerSpec
from placement_edu.cli import main
from placement_edu.timing import (
    flops_per_token,
    megatron_flops_per_token,
    megatron_hardware_flops_per_token,
    model_flops_per_token,
    palm_flops_per_token,
)

pytestmark = pytest.mark.fast

# GPT-3 175B as Narayanan et al. 2021 train it (Table 1): l = 96, h = 12288, a = 96, V = 51,200,
# s = 2048, B = 1536.
GPT3 = TransformerSpec(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200)
L, H, S, V, BATCH = 96, 12288, 2048, 51200, 1536
LLAMA_8B = TransformerSpec(
    layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, vocab=128256
)


def test_megatron_with_full_recomputation_is_narayanan_equation_3_for_gpt3() -> None:
    # Narayanan et al. 2021, eq. (3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs per iteration
    # (full recomputation: 4 GEMM passes per weight, the logit layer's 3). By hand:
    # 96·1536·2048·96·12288² = 4,377,498,837,804,122,112 (× (1 + 1/36 + 25/9216)
    # = 1.0304904513...) = 4,510,970,753,323,106,304 ≈ 4.51e18 per iteration.
    eq3 = 96 * BATCH * S * L * H * H * (1 + Fraction(S, 6 * H) + Fraction(V, 16 * L * H))
    assert eq3 == 4_510_970_753_323_106_304
    assert megatron_hardware_flops_per_token(GPT3, "full") * BATCH * S == eq3


def test_megatron_model_flops_are_72_l_h_squared_for_gpt3() -> None:
    # without recomputation: 72·l·h²·(1 + s/(6h) + V/(12·l·h)) per token (Korthikanti et al.
    # 2022, eq. 7) = 1,076,442,955,776 FLOPs per token for GPT-3 175B
    per_token = 72 * L * H * H * (1 + Fraction(S, 6 * H) + Fraction(V, 12 * L * H))
    assert megatron_flops_per_token(GPT3) == per_token == 1_076_442_955_776
    # Megatron-LM's main branch halves core attention for the causal mask: − 6·l·h·s
    assert megatron_flops_per_token(GPT3, causal=True) == per_token - 6 * L * H * S
    # selective recomputation replays core attention's forward, 4·l·h·s per token
    assert megatron_hardware_flops_per_token(GPT3, "selective") == per_token + 4 * L * H * S


def test_megatron_counts_gqa_as_its_code_writes_it() -> None:
    """``num_floating_point_operations`` as Megatron-LM wrote it before splitting it into helpers
    (expansion_factor 12 = 3 GEMM passes × 2 stacked GEMMs × 2 FLOPs): 12·b·s·l·h²·((1 + g/a +
    s/h)·(kv_channels·a/h) + (f/h)·(3/2 with SwiGLU) + V/(2·l·h)). Llama-3-8B's shape without
    SwiGLU (the package's MLP has two matrices): g = 8 query groups, a = 32."""
    l, h, a, g, f, s, vocab = 32, 4096, 32, 8, 14336, 8192, 128256
    code = (
        12
        * l
        * h
        * h
        * ((1 + Fraction(g, a) + Fraction(s, h)) * 1 + Fraction(f, h) + Fraction(vocab, 2 * l * h))
    )
    assert megatron_flops_per_token(LLAMA_8B) == code == 46_638_563_328


def test_palm_counts_every_parameter_and_12_l_h_s() -> None:
    # Chowdhery et al. 2022, Appendix B: 6N + 12·L·H·Q·T, N = Ψ (every parameter, embeddings too)
    assert GPT3.psi == 174_615_846_912
    assert palm_flops_per_token(GPT3) == 6 * GPT3.psi + 12 * L * H * S == 1_076_686_110_720
    assert model_flops_per_token(GPT3) == palm_flops_per_token(GPT3)  # the package's convention
    # hardware FLOPs add the replayed forward: 2Ψ + 4·L·h·s under full recomputation
    full = sum(flops_per_token(GPT3, "full").values())
    assert full - palm_flops_per_token(GPT3) == 2 * GPT3.psi + 4 * L * H * S
    # the two conventions differ by what 6Ψ counts and Megatron does not: biases and norms 13h per
    # layer (159,744 · 96 = 15,335,424), positions s·h (25,165,824), the final norm 2h (24,576):
    # 6 · 40,525,824 FLOPs per token, 0.02 % here
    assert palm_flops_per_token(GPT3) - megatron_flops_per_token(GPT3) == 6 * 40_525_824


def test_time_names_both_conventions(capsys) -> None:
    argv = [
        "time",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--seq",
        "128",
        "--vocab",
        "1000",
        "--global-batch",
        "512",
        "--mesh",
        "data=8",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "FLOPs: PaLM's 6Ψ + 12·L·h·s" in text and "in Megatron-LM's count" in text
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    spec = TransformerSpec(layers=2, hidden=256, heads=4, kv_heads=2, seq=128, vocab=1000)
    ratio = megatron_flops_per_token(spec) / palm_flops_per_token(spec)
    assert out["mfu_megatron"] == pytest.approx(out["mfu"] * ratio, rel=1e-12)
