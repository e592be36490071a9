"""Data parallel (``dp``): P, G, O replicated on the data axis (SPEC §3: 16Ψ bytes per device).

Every rank holds the whole model, runs it on its own slice of the batch, and so ends backward with
a *partial* gradient. One all-reduce sums the partial gradients; dividing by N once makes the
batch mean; every rank then takes the identical Adam step on its identical copy.
"""

from __future__ import annotations

import torch

from placement_edu.runtime.engines.engine import Context, ReplicatedGradient
from placement_edu.faults import FaultName


class DataParallel(ReplicatedGradient):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.params = self.replicated_params()
        self.params.grad = torch.zeros_like(self.params)  # G: whole, on every rank
        self.m, self.v = torch.zeros_like(self.params), torch.zeros_like(self.params)  # O: whole

    def step(self, step: int) -> None:
        grad = self.partial_gradient(step)
        if self.d > 1:
            if not self.fault(FaultName.SKIP_GRAD_REDUCE):
                # The optimizer state is whole on every rank, so every rank needs the whole summed
                # gradient: all-reduce (rule 1).
                self.comm.all_reduce(grad, "grads", "data")
            self.scale(grad)
        self.comm.at(step, "step")
        with torch.no_grad():
            self.params -= self.ctx.adam.delta(grad, self.m, self.v, step + 1)
        self.boundary()

    def held(self) -> tuple[torch.Tensor, slice]:
        return self.params, slice(0, self.params.numel())
