"""torchtitan's op policy: the FLOPs it replays, counted by the core and measured by PyTorch
(issue 39, item 3).

One block of each reference module ``fit`` measures (``reference_models``: GPT-2's, whose Conv1D
runs ``addmm``, and Llama's, whose Linears run ``mm``) runs forward and backward under
``FakeTensorMode`` with ``torch.utils.flop_counter.FlopCounterMode``, once checkpointed with the
policy ``fit`` uses (``TorchtitanOp``, torchtitan's ``_save_list`` at 9dec370) and once without
checkpointing. The difference is what the policy replays: it must equal
``TransformerSpec.torchtitan_op_recomputed`` × the block's b·s tokens, matmul by matmul.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.models import TransformerSpec
from placement_edu.roofline import block_ops, replayed
from placement_edu.timing import flops_per_token

pytestmark = pytest.mark.runtime

torch = pytest.importorskip("torch")

B, S = 2, 64
#: Small shapes of each block: GQA on the Llama (2 key-value heads of 4), f neither 4h nor h;
#: GPT-2's dropout, 0.1 (the one after the MLP keeps its last matmul replayed).
GPT = Architecture("gpt2", 1, 64, 4, 192, 100, positions=S, dropout=0.1)
LLAMA = Architecture("llama", 1, 64, 4, 192, 100, kv_heads=2, tied=False)
#: On a CPU (and under FakeTensorMode there) SDPA with dropout dispatches its math kernel: q·kᵀ
#: and ·v as two bmm, which the policy recomputes, where a GPU's flash kernel takes the dropout
#: and its output is saved. That bmm is measured apart, as the attention's 4·h·s a token.
CPU_MATH_SDPA = {("gpt2", "sdpa")}


@cache
def measured(arch: Architecture, attention: str, recompute: str) -> dict[str, int]:
    """FLOPs by aten op of one block's forward and backward (b = 2, s = 64, fp32, fake)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    from placement_edu.runtime.measurement.reference_models import CausalLM, recomputed

    with FakeTensorMode():
        model = CausalLM(arch, attention)
        x = torch.randn(B, S, arch.hidden, requires_grad=True)
        if arch.kind == "gpt2":
            extra: tuple = (torch.ones(S, S, dtype=torch.bool).tril()[None, None],)
        else:
            causal = torch.full((S, S), torch.finfo(x.dtype).min).triu(1)[None, None]
            extra = (model.model.rope(S, x.dtype), causal)
        with FlopCounterMode(display=False) as counter:
            recomputed(model.blocks[0], recompute, x, *extra).sum().backward()
    return {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}


def replayed_by_op(arch: Architecture, attention: str) -> dict[str, int]:
    """torchtitan-op's FLOPs minus no checkpointing's, by aten op."""
    with_policy, without = (measured(arch, attention, r) for r in ("torchtitan-op", "none"))
    return {op: n - without.get(op, 0) for op, n in with_policy.items() if n != without.get(op, 0)}


@pytest.mark.parametrize(
    "arch, attention",
    [(GPT, "sdpa"), (GPT, "eager"), (LLAMA, "sdpa"), (LLAMA, "eager")],
    ids=["gpt-sdpa", "gpt-eager", "llama-sdpa", "llama-eager"],
)
def test_replayed_flops_are_the_cores(arch: Architecture, attention: str) -> None:
    spec = arch.formula(S, B, "flash" if attention == "sdpa" else attention, "torchtitan-op")
    core = {name: n * B * S for name, n in spec.torchtitan_op_recomputed().items()}
    attention_flops = core.pop("attention", 0)
    # GPT's Conv1D runs addmm: the policy saves none of them; Llama's Linears run mm
    matmul_op = "aten.addmm" if arch.kind == "gpt2" else "aten.mm"
    expected = {matmul_op: sum(core.values())}
    if attention_flops:  # eager attention's q·kᵀ and ·v: two bmm, not in the save list
        expected["aten.bmm"] = attention_flops
    if (arch.kind, attention) in CPU_MATH_SDPA:
        assert not attention_flops  # (the core: flash attention's output is saved)
        expected["aten.bmm"] = 4 * arch.hidden * S * B * S
    assert replayed_by_op(arch, attention) == expected


def test_llama_replays_k_o_and_up_only() -> None:
    """The numbers themselves, by hand (b·s = 128 tokens, h = 64, K·h/a = 32, f = 192): k 2·128·
    64·32 = 524,288, o 2·128·64·64 = 1,048,576, up 2·128·64·192 = 3,145,728 -- not the 9,437,184
    of the block's seven matmuls, which full recomputation replays."""
    assert replayed_by_op(LLAMA, "sdpa") == {"aten.mm": 524_288 + 1_048_576 + 3_145_728}
    full = measured(LLAMA, "sdpa", "full")["aten.mm"] - measured(LLAMA, "sdpa", "none")["aten.mm"]
    assert full == 9_437_184


def test_time_model_charges_them() -> None:
    """The FLOP-only model and the roofline charge the same replayed FLOPs: L blocks of them."""
    for arch, attention in (
        (get_architecture("llama-8b"), "flash"),
        (GPT.with_(layers=2), "eager"),
    ):
        spec = arch.formula(8192, 2, attention)
        block = sum(spec.torchtitan_op_recomputed().values())
        charged = (
            flops_per_token(spec, "torchtitan-op")["backward"] - flops_per_token(spec)["backward"]
        )
        assert charged == spec.layers * block
        roofline = sum(
            replayed(op, spec, "torchtitan-op") * op.flops.get("forward", 0) * op.count
            for op in block_ops(spec)
        )
        assert roofline == charged


def test_docstring_figures_are_llama_8bs() -> None:
    """The worked Llama-3-8B figures in ``torchtitan_op_recomputed``'s docstring."""
    spec = get_architecture("llama-8b").formula(8192, 1, "flash")
    doc = " ".join((TransformerSpec.torchtitan_op_recomputed.__doc__ or "").split())
    replayed_flops = sum(spec.torchtitan_op_recomputed().values())
    h, f, kv = spec.hidden, spec.ffn, spec.kv_width
    matmuls = 2 * (2 * h * h + 2 * h * kv + 3 * h * f)
    share = f"{replayed_flops / matmuls:.1%}"
    assert f"= {replayed_flops:,} FLOPs a token a block, {share} of its {matmuls:,}" in doc
    assert re.search(r"2·4096·\(1024 \+ 4096 \+ 14336\)", doc)
