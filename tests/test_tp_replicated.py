"""Megatron's replicated tensors in the core's tensor-parallel memory (issue 40 item 6).

Megatron-LM splits the word embedding by vocabulary (``VocabParallelEmbedding``), every
column-parallel weight and bias and every row-parallel weight over the tensor ranks, and keeps the
rest whole on every rank: the layer norms, the row-parallel biases (``RowParallelLinear`` allocates
its bias at the full output size) and the learned position table (``LanguageModelEmbedding``'s
"Position embedding (serial)", a plain ``torch.nn.Embedding``) -- megatron/core/tensor_parallel/
layers.py and megatron/core/models/common/embeddings/language_model_embedding.py. So a tensor rank
holds (Ψ − R)/t + R of each model state: 16(Ψ − R)/t + 16R bytes under mixed-precision Adam.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from placement_edu import ModelSpec, State, TransformerSpec, analyze, get_precision, get_strategy
from placement_edu.architectures import PRESETS
from placement_edu.errors import PlacementError
from placement_edu.placement import MODEL_STATES

pytestmark = pytest.mark.fast

GPT2 = PRESETS["gpt2"].formula(1024)  # HF GPT-2 124M at its 1,024 positions
MIXED_ADAM = get_precision("mixed_adam")

#: Megatron's layout of GPT-2's tensors, by the name's ending (HF's names): "vocab" split by
#: vocabulary, "col" column-parallel (weight and bias split), "row" row-parallel (weight split),
#: "whole" on every tensor rank.
MEGATRON_LAYOUT = {
    "wte.weight": "vocab",  # VocabParallelEmbedding
    "wpe.weight": "whole",  # Position embedding (serial): torch.nn.Embedding(s, h)
    "ln_1.weight": "whole",
    "ln_1.bias": "whole",
    "attn.c_attn.weight": "col",  # QKV: ColumnParallelLinear
    "attn.c_attn.bias": "col",
    "attn.c_proj.weight": "row",  # attention output: RowParallelLinear ...
    "attn.c_proj.bias": "whole",  # ... whose bias is the full output size
    "ln_2.weight": "whole",
    "ln_2.bias": "whole",
    "mlp.c_fc.weight": "col",  # MLP first linear: ColumnParallelLinear
    "mlp.c_fc.bias": "col",
    "mlp.c_proj.weight": "row",  # MLP second linear: RowParallelLinear
    "mlp.c_proj.bias": "whole",
    "ln_f.weight": "whole",
    "ln_f.bias": "whole",
}


def _layout(name: str) -> str:
    (kind,) = [k for end, k in MEGATRON_LAYOUT.items() if name.endswith(end)]
    return kind


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_gpt2_replicated_count_is_megatron_s_layout_term_by_term():
    tensors = PRESETS["gpt2"].tensors()
    assert GPT2.psi == sum(_numel(s) for _, s, _ in tensors) == 124_439_808  # HF GPT-2 124M
    whole = sum(_numel(s) for n, s, _ in tensors if _layout(n) == "whole")
    h, L, s = 768, 12, 1024
    # per layer: ln_1, ln_2 (2h each) + the two row-parallel biases (h each); ln_f 2h; wpe s·h
    assert whole == 6 * h * L + 2 * h + s * h == 55_296 + 1_536 + 786_432 == 843_264
    assert GPT2.replicated_elements == whole
    assert GPT2.position_params == s * h
    # the part sequence parallelism all-reduces leaves the position table out
    assert GPT2.tensor_replicated_elements(range(L), True) == whole - s * h


@pytest.mark.parametrize(
    "t, model_state",
    # 16(Ψ − R)/t + 16R: 16 × (123,596,544/2 + 843,264) and 16 × (123,596,544/4 + 843,264)
    [(2, 1_002_264_576), (4, 507_878_400)],
)
def test_tp_holds_16_psi_minus_r_over_t_plus_16_r(t: int, model_state: int):
    tensors = PRESETS["gpt2"].tensors()
    # each tensor counted on one rank: whole, or 1/t of it
    held = sum(
        Fraction(_numel(s)) if _layout(n) == "whole" else Fraction(_numel(s), t)
        for n, s, _ in tensors
    )
    memory = analyze("tp", GPT2, mesh=f"tensor={t}").memory
    for state in MODEL_STATES:
        assert memory.device[state] == held * MIXED_ADAM.bytes_per(state)
    per_param = sum(MIXED_ADAM.bytes_per(state) for state in MODEL_STATES)
    assert per_param == 16  # 2 + 2 + 12: ZeRO (Rajbhandari et al. 2020) §3.1, K = 12
    psi, r = GPT2.psi, GPT2.replicated_elements
    assert memory.model_state == Fraction(16 * (psi - r), t) + 16 * r == model_state
    # more than the Ψ-level 16Ψ/t by 16R(1 − 1/t)
    assert model_state - Fraction(16 * psi, t) == 16 * r * (1 - Fraction(1, t))


def test_a_llama_block_has_no_position_table_to_keep():
    # Llama-3-8B (RoPE): two RMSNorm weights per layer and the final one, R = 2h·L + h
    llama = TransformerSpec(
        layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, vocab=128256,
        block="llama",
    )  # fmt: skip
    assert llama.position_params == 0
    assert llama.replicated_elements == 2 * 4096 * 32 + 4096 == 266_240
    memory = analyze("tp", llama, mesh="tensor=8").memory
    assert memory.model_state == Fraction(16 * (llama.psi - 266_240), 8) + 16 * 266_240


def test_sequence_parallelism_splits_activations_not_r():
    sp = get_strategy("tp").with_(sequence_parallel=True)
    plain = analyze("tp", GPT2, mesh="tensor=4")
    split = analyze(sp, replace(GPT2, sequence_parallel=True), mesh="tensor=4")
    assert split.memory.device == plain.memory.device
    # under SP the norms and row-parallel biases see s/t tokens each: their gradients are
    # all-reduced on tensor (Megatron's _allreduce_layernorm_grads); the position table is read
    # before the sequence is scattered, so its gradient is whole already and is not in it
    (norms,) = [o for o in split.schedule.collectives if o.state is State.GRADS]
    assert norms.axis == "tensor" and norms.elements == 6 * 768 * 12 + 2 * 768


def test_the_data_axis_reduces_what_a_tensor_rank_holds():
    # dp×tp: the data-axis all-reduce moves a tensor rank's gradient, (Ψ − R)/t + R elements
    report = analyze("dp×tp", GPT2, mesh="data=2,tensor=2")
    (reduce,) = [o for o in report.schedule.collectives if o.axis == "data"]
    r = GPT2.replicated_elements
    assert reduce.elements == Fraction(GPT2.psi - r, 2) + r == 62_641_536


def test_a_model_of_psi_alone_splits_all_of_it():
    report = analyze("tp", ModelSpec(10**9, layers=8, boundary_elements=4096), mesh="tensor=4")
    assert report.memory.model_state == Fraction(16 * 10**9, 4)


def test_a_replicated_count_above_psi_is_refused_in_one_line():
    with pytest.raises(PlacementError) as err:
        ModelSpec(1000, replicated_elements=1001)
    assert str(err.value) == (
        "replicated_elements (1,001) must be at most psi (1,000): they are the parameters tensor "
        "parallelism leaves whole"
    )
