"""ZeRO-Offload (``zero2_offload``): parameters replicated on the device; the gradient and
optimizer-state slices live in *host* memory (OFF), and the Adam step runs on the host.

The collectives are ZeRO-2's; two host transfers are added (SPEC §2's host link): the reduced
gradient slice goes device -> host (d2h), and the step's result comes back host -> device (h2d)
before the parameter all-gather. Adam without weight decay does not read the parameters, so the
host computes the update of this rank's slice from (gradient, m, v) and sends that back.

On a CPU-only machine "device" and "host" are both CPU memory: the pools are kept apart by
bookkeeping. With CUDA the device tensors live on the GPU and the host tensors in CPU memory.
"""

from __future__ import annotations

import torch

from placement_edu.memory import OFFLOAD_STAGING, REDUCE_BUCKET
from placement_edu.faults import FaultName
from placement_edu.runtime.engines import flat
from placement_edu.runtime.engines.engine import Context, Engine
from placement_edu.runtime.engines.zero1 import gather_params


class Zero2Offload(Engine):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.psi, self.padded, self.mine = self.sharded_layout()
        self.params = self.replicated_params()  # P: R, device
        k = self.padded // self.d
        self.grad = torch.zeros(k, dtype=ctx.dtype, device=ctx.host)  # G: slice, host (OFF)
        self.m, self.v = torch.zeros_like(self.grad), torch.zeros_like(self.grad)  # O: slice, host

    def step(self, step: int) -> None:
        self.comm.at(step, "forward")
        x, y = self.local_batch(step)
        bucket = torch.zeros(self.padded, dtype=self.ctx.dtype, device=self.ctx.device)
        self.params.grad = bucket[: self.psi]
        self.forward_backward(self.params, x, y, step)
        self.mem.peak(REDUCE_BUCKET, "backward", bucket.numel() * bucket.element_size())
        staging = torch.empty(self.grad.numel(), dtype=self.ctx.dtype, device=self.ctx.device)
        self.mem.peak(OFFLOAD_STAGING, "backward", staging.numel() * staging.element_size())
        if self.fault(FaultName.SKIP_GRAD_REDUCE):
            staging.copy_(bucket[self.mine])  # FAULT: the partial gradient reaches Adam
        else:
            # Each rank's host optimizer needs only its slice of the summed gradient (rule 1).
            self.comm.reduce_scatter(staging, bucket, "grads", "data")
        self.params.grad = None
        del bucket
        self.scale(staging)
        # The reduced slice moves to host memory, where the optimizer state lives.
        self.comm.d2h(self.grad, staging, "grads")
        self.boundary()

        self.comm.at(step, "step")
        update = self.ctx.adam.delta(self.grad, self.m, self.v, step + 1)  # on the host
        # The update of this rank's slice comes back to the device.
        self.comm.h2d(staging, update, "params")
        with torch.no_grad():
            mine = flat.take(self.params.data, self.mine) - staging
            if self.fault(FaultName.SKIP_PARAM_SYNC):
                flat.put(self.params.data, self.mine, mine)  # FAULT: other slices stay stale
            else:
                # Only the owner updated each slice: all-gather them so every replica is whole
                # (rule 2).
                gather_params(self, mine)
        self.boundary()

    def states(self) -> tuple[dict[str, list], dict[str, list]]:
        return ({"params": [self.params]}, {"grads": [self.grad], "optimizer": [self.m, self.v]})

    def held(self) -> tuple[torch.Tensor, slice]:
        return self.params, slice(0, self.psi)
