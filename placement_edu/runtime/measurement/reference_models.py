"""HF GPT-2 and Llama in plain torch, written as HF writes them, so their memory is HF's memory.

Read top to bottom like nanoGPT's ``model.py``; parallelism is applied from outside (torchtitan's
rule). The shapes come from ``placement_edu.architectures`` (plain data); parameter names, shapes
and order are the ones listed there. Each forward names what autograd keeps for backward where it
matters to the memory story ("saves: ..."), for one micro-batch of b sequences of s tokens.

The loss is HF's ``ForCausalLMLoss``: logits cast to fp32 (a copy under bf16), labels shifted by
one, cross-entropy = log_softmax (saves its fp32 output, [b·s, V]) + nll_loss. At the start of
backward its gradient, also fp32 [b·s, V], is made: that is the logits' gradient of SPEC §3.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import partial
from types import MappingProxyType

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    SelectiveCheckpointContext,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from placement_edu.architectures import Architecture
from placement_edu.models import every_kth
from placement_edu.peak import ATTENTION, read_recompute


# --- GPT-2 (HF modeling_gpt2) --------------------------------------------------------------------
class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer with its weight stored [in, out]. ``addmm`` saves its input
    (and the weight, a parameter, not an activation)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return out.view(*x.shape[:-1], -1)


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """HF's ``NewGELUActivation``: tanh GeLU written out as Python ops. Each op saves what its own
    backward needs -- x, x³'s input, the tanh output, ... -- 3 more [b, s, 4h] tensors than one
    fused GeLU would keep (SPEC §3)."""
    return (
        0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    )


class GPT2Attention(nn.Module):
    def __init__(self, arch: Architecture, attention: str) -> None:
        super().__init__()
        h = arch.hidden
        self.heads, self.attention, self.p = arch.heads, attention, arch.dropout
        self.c_attn, self.c_proj = Conv1D(h, 3 * h), Conv1D(h, h)
        self.attn_dropout, self.resid_dropout = nn.Dropout(arch.dropout), nn.Dropout(arch.dropout)

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        # (chunk(3) and the -1s: a tensor rank holds 3h/t of c_attn's columns and h/t of every
        # width after it; on one device these are split(h) and h)
        d = h // self.heads
        q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in self.c_attn(x).chunk(3, dim=2))
        y = core_attention(self, q, k, v, causal).transpose(1, 2).reshape(b, s, -1)
        return self.resid_dropout(self.c_proj(y))

    def core(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: torch.Tensor
    ) -> torch.Tensor:
        """softmax(q·kᵀ/√d)·v, causal, with dropout on the probabilities."""
        if self.attention == "sdpa":  # saves q, k, v, output and logsumexp, no s² terms
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True
            )
        # saves the [b, a, s, s] scores, probabilities, mask
        w = torch.matmul(q, k.transpose(-1, -2)) / torch.full(
            [], v.size(-1) ** 0.5, dtype=q.dtype, device=q.device
        )
        w = torch.where(
            causal, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        )
        w = self.attn_dropout(F.softmax(w, dim=-1).type(v.dtype))
        return torch.matmul(w, v)


class GPT2MLP(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(arch.hidden, arch.ffn), Conv1D(arch.ffn, arch.hidden)
        self.dropout = nn.Dropout(arch.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(gelu_new(self.c_fc(x))))


class GPT2Block(nn.Module):
    """Pre-norm: x + attn(ln_1(x)), then + mlp(ln_2(x)). LayerNorm saves its input, mean and
    rstd."""

    def __init__(self, arch: Architecture, attention: str) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(arch.hidden, eps=1e-5)
        self.attn = GPT2Attention(arch, attention)
        self.ln_2 = nn.LayerNorm(arch.hidden, eps=1e-5)
        self.mlp = GPT2MLP(arch)

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), causal)
        return x + self.mlp(self.ln_2(x))


class GPT2Body(nn.Module):
    """HF's ``GPT2Model`` (``transformer``): wte + wpe, dropout, the blocks, ln_f."""

    def __init__(self, arch: Architecture, attention: str) -> None:
        super().__init__()
        self.wte = nn.Embedding(arch.vocab, arch.hidden)
        self.wpe = nn.Embedding(arch.positions, arch.hidden)
        self.drop = nn.Dropout(arch.dropout)
        self.h = nn.ModuleList(GPT2Block(arch, attention) for _ in range(arch.layers))
        self.ln_f = nn.LayerNorm(arch.hidden, eps=1e-5)


# --- Llama (HF modeling_llama) -------------------------------------------------------------------
class RMSNorm(nn.Module):
    """HF's ``LlamaRMSNorm``: computed in fp32, so under bf16 it saves fp32 copies of its input."""

    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(hidden)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """GQA as HF runs it: each of the kv heads copied to its n_rep query heads (a real copy)."""
    b, kv, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


class LlamaAttention(nn.Module):
    def __init__(self, arch: Architecture, attention: str) -> None:
        super().__init__()
        h, d = arch.hidden, arch.head_dim
        self.heads, self.kv_heads, self.head_dim, self.attention = (
            arch.heads,
            arch.kv_heads,
            d,
            attention,
        )
        self.q_proj = nn.Linear(h, arch.heads * d, bias=False)
        self.k_proj = nn.Linear(h, arch.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, arch.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(arch.heads * d, h, bias=False)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], causal: torch.Tensor
    ) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        cos, sin = (t.unsqueeze(1) for t in rope)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = core_attention(self, q, k, v, causal)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, -1))

    def core(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: torch.Tensor
    ) -> torch.Tensor:
        """softmax(q·kᵀ/√d + causal)·v, k and v first copied to every query head (GQA)."""
        n_rep = self.heads // self.kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # k, v expanded to every head
        if self.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        w = torch.matmul(q, k.transpose(2, 3)) * self.head_dim**-0.5 + causal
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(w, v)


class LlamaMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)); keeps gate, up, silu(gate) and their product:
    4 [b, s, f]."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(arch.hidden, arch.ffn, bias=False)
        self.up_proj = nn.Linear(arch.hidden, arch.ffn, bias=False)
        self.down_proj = nn.Linear(arch.ffn, arch.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, arch: Architecture, attention: str) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(arch, attention)
        self.mlp = LlamaMLP(arch)
        self.input_layernorm = RMSNorm(arch.hidden)
        self.post_attention_layernorm = RMSNorm(arch.hidden)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], causal: torch.Tensor
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, causal)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    """HF's ``LlamaModel`` (``model``): embed_tokens, the blocks, the final norm; RoPE's inverse
    frequencies are a (non-persistent) fp32 buffer, cos and sin are made once per forward."""

    inv_freq: torch.Tensor  # (the buffer registered below)

    def __init__(self, arch: Architecture, attention: str, theta: float = 500000.0) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(arch.vocab, arch.hidden)
        self.layers = nn.ModuleList(LlamaBlock(arch, attention) for _ in range(arch.layers))
        self.norm = RMSNorm(arch.hidden)
        d = arch.head_dim
        self.register_buffer(
            "inv_freq",
            1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d),
            persistent=False,
        )

    def rope(self, s: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(s, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


# --- recomputation: full, and a selective policy --------------------------------------------------
aten = torch.ops.aten
#: The ops whose outputs the selective policy saves: the matmuls and fused attention.
SAVED_OPS = frozenset(
    {
        aten.mm.default,
        aten.addmm.default,
        aten.bmm.default,
        aten.baddbmm.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_cudnn_attention.default,
    }
)


def selective_policy(
    ctx: SelectiveCheckpointContext, func: object, *args: object, **kwargs: object
) -> CheckpointPolicy:
    """Selective recomputation as torchtitan's "selective op" activation checkpointing does it
    (``torch.utils.checkpoint.create_selective_checkpoint_contexts`` with a policy, per block).

    **Saved** (the block's checkpoint keeps them from forward to backward, beside the block's
    inputs): the output of every matmul -- ``mm`` (nn.Linear), ``addmm`` (HF's Conv1D), ``bmm``
    (eager attention's q·kᵀ scores and probabilities·v) -- and of the fused attention kernels
    (``_scaled_dot_product_*``: the output and its logsumexp). **Recomputed** in backward from
    those and the block's input: everything else -- norms, GeLU/SiLU and their products, RoPE,
    softmax, the causal mask's ``where``, dropout (its RNG state is replayed), casts, views.

    Why: a matmul costs O(s·h²) (attention O(s²·h)) FLOPs for an output of O(s·h); an elementwise
    op, a softmax or a dropout costs O(1) FLOPs per element it writes. Saving the expensive outputs
    and replaying the cheap ops keeps most of full recomputation's saving (GPT-2's tanh GeLU alone
    keeps four [b, s, 4h] tensors, each dropout its mask) at the price of replaying only the cheap
    ops, not a whole second forward. Eager attention's [b, a, s, s] scores are a bmm's output, so
    they are still kept; with SDPA nothing of size s² is. (torchtitan also recomputes every second
    ``mm`` to save more; this policy keeps them all, the simple version.)"""
    saved = func in SAVED_OPS
    return CheckpointPolicy.MUST_SAVE if saved else CheckpointPolicy.PREFER_RECOMPUTE


#: torchtitan's op-level selective AC, as its published Llama 3.1 runs used it
#: (``selective_ac_option = "op"``; ``_save_list`` in torchtitan/parallelisms/parallelize_llama.py
#: at commit 9dec370, the commit its benchmarks/llama3_h100_202412_torchtitan.md names).
TORCHTITAN_SAVE_LIST = frozenset(
    {
        aten.mm.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention.default,
        # flash attention's CPU kernel: what a step on the CPU (or under FakeTensorMode there)
        # dispatches where a GPU runs flash; the same outputs (the output and its logsumexp)
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        aten.abs.default,  # (for float8's amax: max(abs(x)))
        aten.max.default,
    }
)


class TorchtitanOp:
    """torchtitan's op policy for one forward of one block (a fresh one each, as torchtitan makes a
    fresh ``meta`` per checkpoint): the outputs of ``TORCHTITAN_SAVE_LIST`` are saved, except every
    second ``mm`` of the block, which is recomputed. In a Llama block the ``mm``s run q, k, v, o,
    gate, up, down: q, v, gate and down are saved; k, o and up are recomputed in backward."""

    def __init__(self) -> None:
        self.mm = 0

    def saves(self, func: object) -> bool:
        if func == aten.mm.default:
            self.mm += 1
            return self.mm % 2 == 1
        return func in TORCHTITAN_SAVE_LIST


#: The selective policies, by name: for one forward of one block, whether an op's output is saved.
SELECTIVE: Mapping[str, Callable[[], Callable[[object], bool]]] = MappingProxyType(
    {
        "selective": lambda: SAVED_OPS.__contains__,
        "torchtitan-op": lambda: TorchtitanOp().saves,
    }
)


def selective_contexts(recompute: str) -> tuple[AbstractContextManager, AbstractContextManager]:
    """The checkpoint's ``context_fn`` for the selective policy ``recompute``: one block's forward
    and its replay in backward, each with its own state (torchtitan counts the ``mm``s of each
    apart)."""
    make = SELECTIVE[recompute]
    forward, replay = make(), make()

    def policy(
        ctx: SelectiveCheckpointContext, func: object, *a: object, **k: object
    ) -> CheckpointPolicy:
        saves = (replay if ctx.is_recompute else forward)(func)
        return CheckpointPolicy.MUST_SAVE if saves else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def recomputed(block: nn.Module, recompute: str, *args: object) -> torch.Tensor:
    """``block(*args)`` under the recomputation ``recompute``: "none" keeps what autograd saves,
    "full" checkpoints the block (keeps only its inputs, replays its forward in backward),
    "selective" and "torchtitan-op" checkpoint it with their policy (``SELECTIVE``)."""
    if recompute in ("none", "megatron-selective"):  # (the latter inside the attention)
        return block(*args)
    if recompute == "full":
        return checkpoint(block, *args, use_reentrant=False)
    context = partial(selective_contexts, recompute)
    return checkpoint(block, *args, use_reentrant=False, context_fn=context)


class CheckpointedCore(nn.Module):
    """Megatron's selective recomputation (Korthikanti et al. 2022, §4.2; Megatron-LM's
    ``--recompute-granularity selective``): the core attention -- q·kᵀ, softmax, dropout, ·v --
    under ``torch.utils.checkpoint``. It keeps only its inputs q, k and v, and replays the rest in
    backward: the [b, a, s, s] scores, probabilities and dropout mask are never kept. Set as
    ``attention.checkpointed`` by ``CausalLM`` under ``recompute="megatron-selective"``; everything
    else in the block is kept as without recomputation."""

    def __init__(self, core: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.core = core  # (the attention's bound method: not a module, not registered)

    def forward(self, *qkv_causal: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.core, *qkv_causal, use_reentrant=False)


def core_attention(
    attention: GPT2Attention | LlamaAttention,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: torch.Tensor,
) -> torch.Tensor:
    """The attention's core, checkpointed where ``CausalLM`` set ``attention.checkpointed``."""
    checkpointed = getattr(attention, "checkpointed", None)
    if checkpointed is not None:
        return checkpointed(q, k, v, causal)
    return attention.core(q, k, v, causal)


# --- the causal LM: body, head, HF's loss --------------------------------------------------------
class CausalLM(nn.Module):
    """``GPT2LMHeadModel`` or ``LlamaForCausalLM``: ``model(ids, labels)`` returns HF's loss.

    ``recompute="full"`` wraps every block in ``torch.utils.checkpoint`` (non-reentrant): a block
    then keeps only its input, and replays its forward in backward; ``"selective"`` and
    ``"torchtitan-op"`` keep also what their policy saves (``SELECTIVE``); ``"megatron-selective"``
    checkpoints only each attention's core (``CheckpointedCore``); ``"layer:K"`` checkpoints
    every K-th block as "full" (torchtitan's layer selective AC)."""

    def __init__(
        self, arch: Architecture, attention: str = "eager", recompute: str = "none"
    ) -> None:
        super().__init__()
        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
        recompute = read_recompute(recompute)
        self.arch, self.recompute = arch, recompute
        if arch.kind == "gpt2":
            self.transformer = GPT2Body(arch, attention)
        else:
            self.model = LlamaBody(arch, attention)
        self.lm_head = nn.Linear(arch.hidden, arch.vocab, bias=False)
        self.loss = CausalLMLoss(arch.vocab)
        if arch.tied:
            self.lm_head.weight = self.embedding.weight
        if recompute == "megatron-selective":
            for block in self.blocks:
                attn: GPT2Attention | LlamaAttention = getattr(
                    block, "attn" if arch.kind == "gpt2" else "self_attn"
                )
                attn.checkpointed = CheckpointedCore(attn.core)

    @property
    def body(self) -> nn.Module:
        return self.transformer if self.arch.kind == "gpt2" else self.model

    @property
    def embedding(self) -> nn.Embedding:
        return self.transformer.wte if self.arch.kind == "gpt2" else self.model.embed_tokens

    @property
    def blocks(self) -> nn.ModuleList:
        return self.transformer.h if self.arch.kind == "gpt2" else self.model.layers

    @property
    def final_norm(self) -> nn.Module:
        return self.transformer.ln_f if self.arch.kind == "gpt2" else self.model.norm

    def hidden_states(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings, every block, the final norm: [b, s, h]."""
        s = ids.shape[1]
        if self.arch.kind == "gpt2":
            gpt2 = self.transformer
            positions = torch.arange(s, device=ids.device)[None]
            x = gpt2.drop(gpt2.wte(ids) + gpt2.wpe(positions))
            causal = torch.ones(s, s, dtype=torch.bool, device=ids.device).tril()[None, None]
            extra: tuple = (causal,)
        else:
            llama = self.model
            x = llama.embed_tokens(ids)
            causal = torch.full(
                (s, s), torch.finfo(x.dtype).min, dtype=x.dtype, device=ids.device
            ).triu(1)[None, None]
            extra = (llama.rope(s, x.dtype), causal)
        every = every_kth(self.recompute)  # torchtitan's layer:K counts the blocks from 1
        for i, block in enumerate(self.blocks):
            policy = ("full" if (i + 1) % every == 0 else "none") if every else self.recompute
            x = recomputed(block, policy, x, *extra)
        return self.final_norm(x)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.hidden_states(ids))  # [b, s, V] in the compute dtype
        return self.loss(logits, labels)


class CausalLMLoss(nn.Module):
    """HF's ``ForCausalLMLoss`` (a module here only so trackers can name it; no parameters):
    upcast to fp32, shift labels left by one, mean cross-entropy. Saves the fp32 log-softmax
    [b·s, V]; its gradient in backward is another fp32 [b·s, V]."""

    def __init__(self, vocab: int, ignore_index: int = -100) -> None:
        super().__init__()
        self.vocab, self.ignore_index = vocab, ignore_index

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        labels = F.pad(labels, (0, 1), value=self.ignore_index)[..., 1:].contiguous()
        return F.cross_entropy(
            logits.view(-1, self.vocab), labels.view(-1), ignore_index=self.ignore_index
        )


def build(arch: Architecture, attention: str = "eager", recompute: str = "none") -> CausalLM:
    """The reference model of ``arch``, fp32 (call under ``FakeTensorMode`` to allocate nothing;
    bf16 compute comes from FSDP2's ``MixedPrecisionPolicy``, applied from outside). For a shape
    read from an HF ``config.json``, ``hf_models.build_model`` builds HF's own module instead."""
    return CausalLM(arch, attention, recompute)


def batch(arch: Architecture, micro_batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and labels, [b, s] int64 (labels = ids, shifted inside the loss as HF does)."""
    ids = torch.randint(0, arch.vocab, (micro_batch, seq))
    return ids, ids.clone()
