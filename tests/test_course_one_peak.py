"""The course's one peak (issue 39, item 7): notebook 05's ``fit`` on a mesh (``mesh_fit``) and
notebook 11's planner on a real model (``module_plan``) show figures a learner can count by hand
or read from another command.

GPT-2 124M: 124,439,808 parameters in 148 tensors, its head tied to the token embedding of
50,257 × 768 (HF's ``gpt2``; ``GPT2LMHeadModel.num_parameters()``)."""

from __future__ import annotations

import json

import pytest

from placement_edu.cli import main
from placement_edu.presentation import mesh_fit, module_plan
from placement_edu.units import GB

pytestmark = (
    pytest.mark.runtime
)  # (module_plan measures llama-8b's s = 8,192 profiles where none is cached)

GPT2_PARAMETERS, GPT2_TENSORS = 124_439_808, 148
H, F, V, S, L = 768, 3072, 50_257, 1024, 12


@pytest.fixture(scope="module")
def gpt2():
    return mesh_fit("gpt2")


def test_one_device_holds_gpt2s_parameters_gradients_and_adam_in_fp32(gpt2) -> None:
    one = gpt2.steps["one device"]
    assert one.params == one.grads == 4 * GPT2_PARAMETERS  # 497,759,232 B
    # Adam: m and v in fp32, and a 4-byte step per tensor
    assert one.optimizer == 8 * GPT2_PARAMETERS + 4 * GPT2_TENSORS


def test_a_tensor_rank_of_two_holds_half_of_each_pair_and_the_rest_whole(gpt2) -> None:
    """Counted by hand: c_attn and c_fc split by column (weight and bias), the two c_proj by row
    (their biases whole), the norms, embeddings and final norm whole."""
    pairs = (H * 3 * H + 3 * H) // 2 + H * H // 2 + H + (H * F + F) // 2 + F * H // 2 + H
    block = pairs + 4 * H  # ln_1, ln_2: weight and bias
    whole = V * H + S * H + 2 * H  # wte (tied head), wpe, ln_f
    assert gpt2.steps["tensor=2"].params == 4 * (whole + L * block)  # 327,760,896 B


def test_sequence_parallelism_lowers_only_the_activations(gpt2) -> None:
    tp, sp = gpt2.steps["tensor=2"], gpt2.steps["tensor=2+SP"]
    assert (tp.params, tp.grads, tp.optimizer) == (sp.params, sp.grads, sp.optimizer)
    kept = "activations and temporaries"
    saved = tp.peak.terms[kept] - sp.peak.terms[kept]
    assert saved > 0 and tp.peak.total - sp.peak.total == saved
    assert gpt2.steps["one device"].peak.terms[kept] > tp.peak.terms[kept]


def test_two_stages_hold_gpt2_and_a_second_copy_of_the_tied_head(gpt2) -> None:
    """The last stage keeps its own copy of the head, tied to the first stage's embedding."""
    first, last = gpt2.steps["stage 0 of 2"], gpt2.steps["stage 1 of 2"]
    assert first.params + last.params == 4 * (GPT2_PARAMETERS + V * H)


def test_each_column_says_where_its_peak_is(gpt2) -> None:
    """Data and tensor: the logits' gradient; 1F1B over 4 micro-batches: stage 0 holds two in
    flight at its first backward, stage 1 peaks in the backward of the last."""
    names = {label: s.peak.name for label, s in gpt2.steps.items()}
    assert names["tensor=2+SP"] == names["one device"] == "backward, loss (logits' gradient)"
    assert names["stage 0 of 2"] == "backward, stage 0, micro-batch 1"
    assert names["stage 1 of 2"] == "backward, stage 1, micro-batch 3"
    text = str(gpt2)
    assert max(map(len, text.splitlines())) <= 100
    assert f"{gpt2.steps['stage 0 of 2'].peak.total / GB:.4f}" in text


@pytest.fixture(scope="module")
def llama():
    return module_plan("llama-8b", devices=64, memory_gb=80, seq=8192)


def test_the_module_turns_plans_the_formula_fits_into_plans_over_80_gb(llama) -> None:
    budget = 80 * GB
    assert llama.flips, "at s = 8,192 the module's peak moves plans across the budget"
    for c in llama.flips:  # notebook 11: "Eight plans the formula calls fitting are over"
        assert c.formula_peak_bytes <= budget < c.peak_bytes, c.label()
    assert len(llama.flips) == 8
    # the choice stays zero3: fsdp_grad_op, which ties it on step time, is FSDP2 without
    # resharding, every block gathered at the logits' gradient, over the budget
    chosen = [p.ranked[p.chosen].strategy.name for p in (llama.module, llama.formula)]
    assert chosen == ["zero3", "zero3"]
    assert "fsdp_grad_op on data=64, recompute none, m = 16" in [c.label() for c in llama.flips]
    assert max(map(len, str(llama).splitlines())) <= 100
    labels = [c.label() for c in llama.flips]
    assert "hsdp on replica=8,data=8, recompute none, m = 16" in labels


def test_only_fsdp2_plans_change_and_the_formula_beside_them_is_the_formulas(llama) -> None:
    formula = {c.label(): c.peak_bytes for c in llama.formula.ranked + llama.formula.infeasible}
    module = llama.module.ranked + llama.module.infeasible
    # (a context plan is listed where its plan without a context axis does not fit: the module's
    # verdict on that plan can list context degrees the formula's run prunes)
    extra = [c for c in module if c.label() not in formula]
    assert all(c.mesh.degree("context") > 1 and c.formula_peak_bytes is None for c in extra)
    for c in module:
        if c.label() not in formula:
            continue
        if c.formula_peak_bytes is None:
            assert c.peak_bytes == formula[c.label()], c.label()
        else:
            assert c.strategy.name.split("×")[0] in ("zero3", "fsdp", "hsdp", "fsdp_grad_op"), (
                c.label()
            )
            assert c.formula_peak_bytes == formula[c.label()], c.label()
    assert len(llama.priced_by_module) == sum(c.formula_peak_bytes is not None for c in module)


def test_a_flipped_plans_peak_is_what_time_model_prints(llama, capsys) -> None:
    """The same plan priced by ``placement-edu time --model``: the same two peaks."""
    hsdp = next(
        c for c in llama.flips if c.label().startswith("hsdp on replica=8,data=8, recompute none")
    )
    argv = (
        "time --model llama-8b --seq 8192 --attention flash --micro-batch 1 --global-batch 1024 "
        "--mesh replica=8,data=8 --strategy hsdp --recompute none --precision mixed_adam --json"
    )
    assert main(argv.split()) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["peak_bytes"], out["formula_peak_bytes"]) == (
        hsdp.peak_bytes,
        hsdp.formula_peak_bytes,
    )
