"""Tensor parallel (``tp``, Megatron-style), and its compositions with the data axis (``dp×tp``,
``zero3×tp``): the transformer block's weight matrices are split over the tensor axis (S).

A column-parallel weight (q, k, v, MLP up) keeps a 1/t block of output rows, so its output is
split by heads (or by the MLP's hidden units); the row-parallel weight that follows (o, MLP down)
keeps the matching 1/t block of input columns, so its output is a *partial sum*. Two collectives
per block (Megatron's f and g, SPEC §4), both on activations, none on parameters:
  g (``leave``): forward all-reduce of the row-parallel partial output;
  f (``enter``): backward all-reduce of the column-parallel input gradient (each rank's input
     gradient covers only its heads).
The input projection is replicated across tensor ranks; its gradient is identical on each of
them because f's all-reduce already made the gradient flowing into it whole (SPEC §6 rule 3).

The data axis composes unchanged: ``dp×tp`` is the dp engine on each tensor rank's slice, and
``zero3×tp`` the ZeRO-3 engine on it (gathers over data yield the tensor-parallel slice, rule 4).
"""

from __future__ import annotations

import torch
from torch.autograd.function import FunctionCtx

from placement_edu.runtime.engines import flat
from placement_edu.runtime.measurement.comm import Comm
from placement_edu.runtime.engines.engine import Engine
from placement_edu.runtime.engines.dp import DataParallel
from placement_edu.runtime.engines.toy import Params, TinyTransformer, loss_fn, transformer_forward
from placement_edu.runtime.engines.zero3 import Zero3

DIM = {"col": 0, "row": 1}


class _Enter(torch.autograd.Function):
    """Megatron's f: identity forward; all-reduce the input gradient over the tensor axis."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        # A ctx carries what backward needs (torch's FunctionCtx stub declares no attributes).
        ctx.comm = comm  # type: ignore[attr-defined]
        return x.view_as(x)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        # Each rank's column-parallel weights saw only their heads: the input gradient is a
        # partial sum over tensor ranks. All-reduce it so every rank has the whole gradient.
        ctx.comm.all_reduce(grad, "activations", "tensor")  # type: ignore[attr-defined]
        return grad, None


class _Leave(torch.autograd.Function):
    """Megatron's g: all-reduce the row-parallel partial output; identity backward."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        x = x.contiguous()
        # The row-parallel weight multiplied only this rank's slice of the hidden units: the
        # output is a partial sum over tensor ranks. All-reduce it to get the block's output.
        comm.all_reduce(x, "activations", "tensor")
        return x

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class TensorParallelModel(Engine):
    """The tensor-parallel slice of the transformer: mixed into a data-axis engine (first in the
    bases, so its methods come before that engine's)."""

    def model_shapes(self) -> flat.Shapes:
        t = self.ctx.mesh.degree("tensor")
        out = []
        for name, p in self.ctx.module.named_parameters():
            shape = list(p.shape)
            if name in TinyTransformer.TP_PLAN:
                shape[DIM[TinyTransformer.TP_PLAN[name]]] //= t
            out.append((name, tuple(shape)))
        return out

    def local_reference(self, ref: Params) -> Params:
        """This tensor rank's block of each tensor (also used to slice the initial parameters)."""
        t, ti = self.ctx.mesh.degree("tensor"), self.coords["tensor"]
        out = {}
        for name, _ in self.shapes:
            tensor = ref[name]
            if name in TinyTransformer.TP_PLAN:
                tensor = tensor.chunk(t, dim=DIM[TinyTransformer.TP_PLAN[name]])[ti]
            out[name] = tensor.contiguous()
        return out

    def initial_params(self) -> Params:
        return self.local_reference(super().initial_params())

    def forward_loss(self, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert isinstance(self.ctx.module, TinyTransformer)
        comm, heads = self.comm, self.ctx.module.heads // self.ctx.mesh.degree("tensor")
        out = transformer_forward(
            params,
            x,
            heads,
            enter=lambda a: _Enter.apply(a, comm),
            leave=lambda a: _Leave.apply(a, comm),
        )
        return loss_fn(out, y)


class TensorParallel(TensorParallelModel, DataParallel):
    """``tp`` (no data axis) and ``dp×tp`` (parameters replicated on data, gradients
    all-reduced)."""


class TensorParallelZero3(TensorParallelModel, Zero3):
    """``zero3×tp``: each tensor rank's slice is ZeRO-3-sharded over the data axis."""
