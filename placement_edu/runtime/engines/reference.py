"""The single-process reference: the same model, data and seed on one device, the whole global
batch at once, the same element-wise Adam. Its parameters after every step are what each rank of a
distributed run is compared with (SPEC §5, §7).

The reference is streamed: a ``Reference`` holds the parameters and Adam's m and v, and advances
one step beside the engine (``step``), so a run of any length holds one step's worth of state --
never a history of every step.

Two references run beside each run. The second one, ``Reference(..., reversed_rows=True)``, is
the rounding floor (``rounding_floor``): see there.
"""

from __future__ import annotations

from typing import cast

import torch

from placement_edu.runtime.engines import flat, toy
from placement_edu.runtime.engines.adam import Adam
from placement_edu.runtime.engines.toy import Params, ToyModel


class Reference:
    """One process, one step at a time: ``step(k)`` applies step ``k`` (steps count from 0, in
    order), ``params`` are the parameters after the last step applied.

    ``reversed_rows``: the global batch's rows in reverse order. The loss is the mean over the rows
    and each row's forward is computed on its own, so this run is mathematically the very same
    run; only the order in which the batch's terms are summed changes (the loss's mean, and in
    backward every weight gradient x^T dy and bias gradient, which are sums over the rows). The
    two runs therefore differ by rounding alone: see ``rounding_floor``."""

    def __init__(
        self,
        module: ToyModel,
        global_batch: int,
        seed: int,
        dtype: torch.dtype,
        adam: Adam,
        reversed_rows: bool = False,
    ) -> None:
        self.module, self.global_batch, self.seed, self.dtype = module, global_batch, seed, dtype
        self.adam, self.reversed_rows = adam, reversed_rows
        self.shapes = [(n, tuple(p.shape)) for n, p in module.named_parameters()]
        self.flat = flat.flatten(toy.init_params(module, seed, dtype), self.shapes).requires_grad_()
        self.m, self.v = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.steps = 0  # steps applied

    def step(self, step: int) -> None:
        """Apply optimizer step ``step`` (the next one: steps are applied in order)."""
        if step != self.steps:
            raise ValueError(f"the reference is at step {self.steps}, not {step}")
        x, y = toy.make_batch(step, self.module, self.global_batch, self.seed, self.dtype)
        if self.reversed_rows:
            x, y = x.flip(0), y.flip(0)
        p = flat.views(self.flat, self.shapes)
        module = self.module
        out = (
            toy.mlp_forward(p, x, range(len(module.layers)))
            if isinstance(module, toy.TinyMLP)
            else toy.transformer_forward(p, x, module.heads)
        )
        self.flat.grad = None
        toy.loss_fn(out, y).backward()
        # backward() has just filled the gradient (a checker reads it as the None set above).
        grad = cast(torch.Tensor, self.flat.grad)
        with torch.no_grad():
            self.flat -= self.adam.delta(grad, self.m, self.v, step + 1)
        self.flat.grad = None
        self.steps += 1

    @property
    def params(self) -> Params:
        """The parameters after the last step, by name: views of this reference's own buffer (no
        copy; they change with the next ``step``)."""
        return flat.views(self.flat.detach(), self.shapes)

    def distance(self, other: "Reference") -> float:
        """Max |θ_self − θ_other| over every parameter element."""
        return float((self.flat.detach() - other.flat.detach()).abs().max())


def rounding_floor(first: Reference, second: Reference) -> float:
    """The rounding floor of a run after the step both references have just applied: how far
    apart two single-process runs are that differ only in the order of their sums (``second`` sums
    the batch's rows in reverse order). Every distributed strategy also sums the same terms in
    another order -- per-rank partial gradients summed by a collective, micro-batches accumulated,
    a matrix product split across tensor ranks -- so its honest deviation from ``first`` is
    rounding of the same kind, and it grows with the steps as this floor does (the training
    dynamics amplify a difference in the last bit alike, whatever caused it)."""
    return first.distance(second)
