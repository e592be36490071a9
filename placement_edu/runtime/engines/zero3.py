"""ZeRO stage 3 / FSDP (``zero3``, ``fsdp``, ``fsdp_grad_op``): parameters sharded-with-gather (SG),
gradients and optimizer state sharded (S): 16Ψ/N bytes of model state per device.

A rank stores only its 1/N slice of the flat, padded parameter buffer. Just before forward uses
them, the slices are all-gathered into a whole buffer (the *gather window*, here one unit: the whole
model); after forward the window is freed (its storage resized to zero, as FSDP does, so the
views autograd saved stay valid) and gathered again before backward (rule 3). ``fsdp_grad_op``
(SHARD_GRAD_OP) keeps the window through backward instead: one gather fewer, a longer window.
Backward fills a whole partial gradient (the reduce bucket), reduce-scattered to the owners.
Result: 2 all-gathers + 1 reduce-scatter = 3Ψ per step, 1.5x dp (SPEC §4).

Two variants change only three hooks (``initial_shard``, ``slice_to_gather``, ``reduce_gradient``):
``zero3_offload.py`` keeps every slice on the host, ``hsdp.py`` replicates the slices across groups.
"""

from __future__ import annotations

import torch

from placement_edu.memory import GATHER_WINDOW, REDUCE_BUCKET
from placement_edu.faults import FaultName
from placement_edu.runtime.engines import flat
from placement_edu.runtime.engines.engine import Context, Engine


class Zero3(Engine):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.reshard = ctx.strategy.reshard_after_forward
        self.psi, self.padded, self.mine = self.sharded_layout()
        self.shard = self.initial_shard()  # P: this rank's slice (SG)
        self.grad = torch.zeros_like(self.shard)  # G: slice (S)
        self.m, self.v = torch.zeros_like(self.shard), torch.zeros_like(self.shard)  # O: slice (S)
        self.stale = self.shard.clone() if self.fault(FaultName.STALE_GATHER) else None
        # The gather window: a whole flat buffer whose storage exists only while gathered.
        self.window = torch.zeros(
            self.padded, dtype=ctx.dtype, device=ctx.device, requires_grad=True
        )
        self._free()

    # --- what the variants (zero3_offload, hsdp) change ---------------------------------------
    def initial_shard(self) -> torch.Tensor:
        """This rank's slice of the flat, padded initial parameters."""
        whole = flat.flatten(self.initial_params(), self.shapes, self.padded)
        return whole[self.mine].clone()

    def slice_to_gather(self, source: torch.Tensor, phase: str) -> torch.Tensor:
        """The slice this rank contributes to a gather (here it already lives on the device)."""
        return source

    def reduce_gradient(self, bucket: torch.Tensor) -> None:
        """Sum the partial gradient ``bucket`` over the data ranks into this rank's slice
        ``self.grad``."""
        if self.fault(FaultName.SKIP_GRAD_REDUCE):
            self.grad.copy_(bucket[self.mine])  # FAULT: the partial gradient reaches Adam
        else:
            # Each owner needs only its slice of the summed gradient: reduce-scatter (rule 1).
            self.comm.reduce_scatter(self.grad, bucket, "grads", "data")

    # --- the step -------------------------------------------------------------------------------
    def _gather(self, phase: str) -> None:
        """Rebuild the whole parameters from the owners' slices, just before use (rule 3)."""
        self.window.untyped_storage().resize_(self.padded * self.window.element_size())
        self.mem.parameters_live_in(self.window)  # its views in autograd are not activations
        source = (
            self.stale if self.stale is not None else self.shard
        )  # FAULT stale-gather: last step's slices
        mine = self.slice_to_gather(source, phase)
        self.comm.all_gather(self.window.data, mine, "params", "data")
        self.mem.peak(GATHER_WINDOW, phase, self.window.untyped_storage().nbytes())

    def _free(self) -> None:
        self.window.untyped_storage().resize_(0)

    def step(self, step: int) -> None:
        self.comm.at(step, "forward")
        x, y = self.local_batch(step)
        self._gather("forward")
        loss = self.forward(self.window, x, y)
        if self.reshard:
            self._free()  # FULL_SHARD: free the window after forward
        self.boundary()

        self.comm.at(step, "backward")
        if self.reshard:
            self._gather("backward")  # ... so gather the parameters again
        else:
            self.mem.peak(GATHER_WINDOW, "backward", self.window.untyped_storage().nbytes())
        self.window.grad = torch.zeros(self.padded, dtype=self.ctx.dtype, device=self.ctx.device)
        self.backward(loss)
        self._free()
        bucket = self.window.grad  # the whole partial gradient
        self.mem.peak(REDUCE_BUCKET, "backward", bucket.numel() * bucket.element_size())
        self.reduce_gradient(bucket)
        self.window.grad = None
        del bucket
        self.scale(self.grad)
        self.boundary()

        self.comm.at(step, "step")
        if self.stale is not None:
            self.stale.copy_(self.shard)
        with torch.no_grad():  # each owner updates only its own slice (where it lives)
            self.shard -= self.ctx.adam.delta(self.grad, self.m, self.v, step + 1)
        self.boundary()

    def states(self) -> tuple[dict[str, list], dict[str, list]]:
        return {"params": [self.shard], "grads": [self.grad], "optimizer": [self.m, self.v]}, {}

    def held(self) -> tuple[torch.Tensor, slice]:
        return self.shard, self.mine
