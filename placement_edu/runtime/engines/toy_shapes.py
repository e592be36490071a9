"""The toy models' shapes without torch: every parameter's name and shape, and what autograd keeps
for backward -- what the core's predictions need (``RunConfig.concrete_model``). The torch modules
that train (``toy.py``) are built from the same sizes and read their counts from here; a test checks
that both list the same parameters.

Why apart: a notebook's kernel makes and checks configurations and reads results, and a learner
leaves every notebook's kernel open -- a kernel that imported torch holds ~125 MiB more for its
life. The kernel needs the shapes; only the ranks need the modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple


class Parameter(NamedTuple):
    """A parameter as the core reads it from a module: its shape."""

    shape: tuple[int, ...]


#: Megatron's split of each weight of the transformer block: column-parallel splits output rows
#: (dim 0), row-parallel splits input columns (dim 1); the input projection stays whole on every
#: tensor rank.
TP_PLAN = {
    "attn.q.weight": "col",
    "attn.k.weight": "col",
    "attn.v.weight": "col",
    "attn.o.weight": "row",
    "mlp.up.weight": "col",
    "mlp.down.weight": "row",
}


@dataclass(frozen=True)
class MLPShape:
    """``layers`` x (Linear(width, width) + tanh)."""

    width: int = 12
    layers: int = 4

    @property
    def heads(self) -> None:
        """No attention: nothing for a tensor axis to split by heads (``models.Heads``)."""
        return None

    @property
    def kv_heads(self) -> None:
        return None

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """In the order torch's ``TinyMLP.named_parameters`` lists them."""
        for i in range(self.layers):
            yield f"layers.{i}.weight", Parameter((self.width, self.width))
            yield f"layers.{i}.bias", Parameter((self.width,))

    def activation_elements(self, rows: int) -> int:
        """Elements autograd keeps for backward per micro-batch of ``rows`` samples, counting only
        tensors computed in forward (not parameters, not the input or target): each layer keeps
        its tanh output (the next layer's linear saves the same tensor, so it is counted once)."""
        return self.layers * rows * self.width


@dataclass(frozen=True)
class BlockShape:
    """Input projection + one transformer block: attention (q, k, v, o) and an MLP (up, down),
    no biases or norms."""

    hidden: int = 8
    heads: int = 4
    ffn: int = 16
    seq: int = 4

    @property
    def kv_heads(self) -> int:
        """Multi-head attention: a key-value head per head (``models.Heads``)."""
        return self.heads

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """In the order torch's ``TinyTransformer.named_parameters`` lists them."""
        h, f = self.hidden, self.ffn
        yield "embed.weight", Parameter((h, h))
        for k in "qkvo":
            yield f"attn.{k}.weight", Parameter((h, h))
        yield "mlp.up.weight", Parameter((f, h))
        yield "mlp.down.weight", Parameter((h, f))

    def activation_elements(self, rows: int, tensor: int = 1) -> tuple[int, int]:
        """(replicated, tensor-split) elements autograd keeps per micro-batch of ``rows`` sequences
        on one tensor rank (computed tensors only; see ``MLPShape.activation_elements``).

        Replicated: the block input e (saved by q, k, v), the MLP input y (saved by up) and the
        block output (saved by the loss).
        Split over tensor ranks (h/t or f/t wide): q and k (copied to batched layout for q·kᵀ),
        the softmax output, v (batched copy), the attention context (copied back for o), and the
        MLP's tanh output (saved by tanh and by down)."""
        b, s, h, f, a = rows, self.seq, self.hidden, self.ffn, self.heads
        replicated = 3 * b * s * h
        split = 4 * b * s * h // tensor + b * (a // tensor) * s * s + b * s * f // tensor
        return replicated, split


#: The shapes a run trains: the MLP, or the transformer block when a tensor axis splits weights.
ToyShape = MLPShape | BlockShape
