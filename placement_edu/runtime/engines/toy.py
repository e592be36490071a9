"""The tiny, deterministic models and synthetic data the runtime trains (no downloads).

Two models, both written as plain functions of a ``{name: tensor}`` dictionary so that an engine
can hand them whatever it holds -- a replicated flat buffer, a freshly gathered one, a tensor-
parallel slice, a pipeline stage's layers:

- ``TinyMLP``: ``layers`` blocks of ``tanh(x W^T + b)``, width ``width``. Used for the data-axis
  strategies and for pipeline stages (each layer is one pipeline unit).
- ``TinyTransformer``: an input projection, then one transformer block (attention + MLP) written
  Megatron-style -- column-parallel then row-parallel pairs -- for tensor parallelism.

Loss: mean squared error against a synthetic target, averaged over the batch.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from placement_edu.runtime.engines.toy_shapes import TP_PLAN, BlockShape, MLPShape

Params = dict[str, torch.Tensor]
Identity: Callable[[torch.Tensor], torch.Tensor] = lambda x: x  # noqa: E731


class TinyMLP(nn.Module):
    """``layers`` x (Linear(width, width) + tanh). Parameter names:
    ``layers.{i}.weight``/``bias``."""

    def __init__(self, width: int = 12, layers: int = 4) -> None:
        super().__init__()
        self.width = width
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def shape(self) -> MLPShape:
        """Its sizes without torch (what the core's predictions read)."""
        return MLPShape(self.width, len(self.layers))

    def activation_elements(self, rows: int) -> int:
        """``MLPShape.activation_elements``: elements autograd keeps per micro-batch."""
        return self.shape().activation_elements(rows)


class TinyTransformer(nn.Module):
    """Input projection + one block: attention (q, k, v column-parallel, o row-parallel) and an MLP
    (up column-parallel, down row-parallel), residual connections, no biases or norms."""

    def __init__(self, hidden: int = 8, heads: int = 4, ffn: int = 16, seq: int = 4) -> None:
        super().__init__()
        self.hidden, self.heads, self.ffn, self.seq = hidden, heads, ffn, seq
        self.embed = nn.Linear(hidden, hidden, bias=False)  # replicated across tensor ranks
        self.attn = nn.ModuleDict({k: nn.Linear(hidden, hidden, bias=False) for k in "qkvo"})
        self.mlp = nn.ModuleDict(
            {"up": nn.Linear(hidden, ffn, bias=False), "down": nn.Linear(ffn, hidden, bias=False)}
        )

    #: Megatron's split of each weight (``toy_shapes.TP_PLAN``).
    TP_PLAN = TP_PLAN

    def shape(self) -> BlockShape:
        """Its sizes without torch (what the core's predictions read)."""
        return BlockShape(self.hidden, self.heads, self.ffn, self.seq)

    def activation_elements(self, rows: int, tensor: int = 1) -> tuple[int, int]:
        """``BlockShape.activation_elements``: (replicated, tensor-split) elements kept."""
        return self.shape().activation_elements(rows, tensor)


#: The models a run trains: the MLP, or the transformer block when a tensor axis splits weights.
ToyModel = TinyMLP | TinyTransformer


def init_params(module: nn.Module, seed: int, dtype: torch.dtype) -> Params:
    """The module's parameters after torch's default init under ``seed``, as detached tensors."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(module)(**_ctor_args(module))
    return {name: p.detach().to(dtype).clone() for name, p in fresh.named_parameters()}


def _ctor_args(module: nn.Module) -> dict[str, int]:
    if isinstance(module, TinyMLP):
        return {"width": module.width, "layers": len(module.layers)}
    assert isinstance(module, TinyTransformer)
    return {"hidden": module.hidden, "heads": module.heads, "ffn": module.ffn, "seq": module.seq}


def mlp_forward(p: Params, x: torch.Tensor, layers: Iterable[int]) -> torch.Tensor:
    """Run the MLP layers ``layers`` (a pipeline stage runs only its own)."""
    for i in layers:
        x = torch.tanh(F.linear(x, p[f"layers.{i}.weight"], p[f"layers.{i}.bias"]))
    return x


def transformer_forward(
    p: Params, x: torch.Tensor, heads: int, enter: Callable = Identity, leave: Callable = Identity
) -> torch.Tensor:
    """The block on ``heads`` local heads. ``enter``/``leave`` are Megatron's f and g: identity in
    one process; under tensor parallelism ``leave`` all-reduces the row-parallel partial output
    (forward) and ``enter`` all-reduces the input gradient (backward)."""
    e = F.linear(x, p["embed.weight"])
    y = e + leave(_attention(p, enter(e), heads))
    u = torch.tanh(F.linear(enter(y), p["mlp.up.weight"]))
    return y + leave(F.linear(u, p["mlp.down.weight"]))


def _attention(p: Params, x: torch.Tensor, heads: int) -> torch.Tensor:
    b, s, _ = x.shape

    def split_heads(t: torch.Tensor) -> torch.Tensor:  # (b, s, heads*dh) -> (b, heads, s, dh)
        return t.view(b, s, heads, -1).transpose(1, 2)

    q, k, v = (split_heads(F.linear(x, p[f"attn.{n}.weight"])) for n in "qkv")
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    ctx = torch.softmax(scores, dim=-1) @ v
    return F.linear(ctx.transpose(1, 2).reshape(b, s, -1), p["attn.o.weight"])


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error, averaged over every element of the (micro-)batch."""
    return F.mse_loss(out, target)


def make_batch(
    step: int, model: ToyModel, global_batch: int, seed: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of ``step``: the same on every rank and in the single-process reference."""
    g = torch.Generator().manual_seed(10_000 * seed + step)
    shape = (
        (global_batch, model.width)
        if isinstance(model, TinyMLP)
        else (global_batch, model.seq, model.hidden)
    )
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    y = torch.randn(shape, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)
