"""ZeRO stage 2 (``zero2``): gradients and optimizer state sharded (S), parameters replicated (R).

The same two collectives as ZeRO-1 (reduce-scatter, then all-gather), but after the reduce-scatter
a rank keeps only its slice of the gradient: the whole gradient exists only transiently, in the
*reduce bucket* backward fills (here: one bucket for the whole model, padded to a multiple of N).
"""

from __future__ import annotations

import torch

from placement_edu.memory import REDUCE_BUCKET
from placement_edu.faults import FaultName
from placement_edu.runtime.engines.engine import Context, Engine
from placement_edu.runtime.engines.zero1 import update_owned_slice


class Zero2(Engine):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.psi, self.padded, self.mine = self.sharded_layout()
        self.params = self.replicated_params()  # P: R
        k = self.padded // self.d
        self.grad = torch.zeros(k, dtype=ctx.dtype, device=ctx.device)  # G: this rank's slice (S)
        self.m, self.v = torch.zeros_like(self.grad), torch.zeros_like(self.grad)  # O: slice (S)

    def step(self, step: int) -> None:
        self.comm.at(step, "forward")
        x, y = self.local_batch(step)
        bucket = torch.zeros(self.padded, dtype=self.ctx.dtype, device=self.ctx.device)
        self.params.grad = bucket[: self.psi]  # backward writes the partial gradient here
        self.forward_backward(self.params, x, y, step)
        self.mem.peak(REDUCE_BUCKET, "backward", bucket.numel() * bucket.element_size())
        if self.fault(FaultName.SKIP_GRAD_REDUCE):
            self.grad.copy_(bucket[self.mine])  # FAULT: the partial gradient reaches Adam
        else:
            # Each rank keeps only its slice of the summed gradient: reduce-scatter (rule 1).
            self.comm.reduce_scatter(self.grad, bucket, "grads", "data")
        self.params.grad = None  # free the bucket: G is sharded from here on
        del bucket
        self.scale(self.grad)
        self.boundary()

        self.comm.at(step, "step")
        # Only owners update their slice; then all-gather so every replica is whole (rule 2).
        update_owned_slice(self, self.grad, step)
        self.boundary()

    def states(self) -> tuple[dict[str, list], dict[str, list]]:
        return {"params": [self.params], "grads": [self.grad], "optimizer": [self.m, self.v]}, {}

    def held(self) -> tuple[torch.Tensor, slice]:
        return self.params, slice(0, self.psi)
