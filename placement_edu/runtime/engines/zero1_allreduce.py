"""ZeRO stage 1 as PyTorch runs it (``zero1_allreduce``): ``ZeroRedundancyOptimizer`` under DDP.

The placement is zero1's -- parameters and gradients replicated (R), optimizer state sharded (S)
-- but the schedule is PyTorch's (the strategy's ``owner_update = "allreduce_broadcast"``):
  1. all-reduce the whole gradient, as DDP does: every rank gets the whole sum (2Ψ);
  2. every *whole tensor* has one owner, chosen greedily (largest tensors first, each to the
     rank that owns the fewest elements so far: ``models.greedy_partition``); the owner's Adam
     updates it;
  3. each owner, in rank order, broadcasts its updated tensors to every replica (rule 2).
The broadcasts move Ψ in all, so a step costs 3Ψ -- 1.5x zero1's reduce-scatter + all-gather.
No tensor is split, so nothing is padded and the optimizer bytes differ from rank to rank; a rank
that owns nothing broadcasts nothing. Read ``zero1.py`` next: the same placement at 2Ψ.
"""

from __future__ import annotations

import math

import torch

from placement_edu.models import greedy_partition
from placement_edu.faults import FaultName
from placement_edu.runtime.engines import flat
from placement_edu.runtime.engines.engine import Context, ReplicatedGradient


class Zero1AllReduce(ReplicatedGradient):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.params = self.replicated_params()  # P: whole (R)
        self.params.grad = torch.zeros_like(self.params)  # G: whole (R)
        sizes = [math.prod(shape) for _, shape in self.shapes]
        owners = greedy_partition(sizes, self.d)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        # Per data rank, the flat-buffer slices of the whole tensors it owns (in model order).
        self.owned = [
            [slice(s, s + n) for s, n, o in zip(starts, sizes, owners) if o == rank]
            for rank in range(self.d)
        ]
        mine = sum(part.stop - part.start for part in self.owned[self.di])
        self.m = torch.zeros(mine, dtype=ctx.dtype, device=ctx.device)  # O: my tensors only (S)
        self.v = torch.zeros_like(self.m)

    def step(self, step: int) -> None:
        grad = self.partial_gradient(step)
        if not self.fault(FaultName.SKIP_GRAD_REDUCE):
            # DDP's way: every rank gets the whole summed gradient, though it updates only its
            # tensors.
            self.comm.all_reduce(grad, "grads", "data")
        self.scale(grad)  # FAULT skip-grad-reduce: a partial gradient

        self.comm.at(step, "step")
        with torch.no_grad():
            mine = self.owned[self.di]
            if mine:
                packed = torch.cat([self.params.data[part] for part in mine])
                packed -= self.ctx.adam.delta(
                    torch.cat([grad[part] for part in mine]), self.m, self.v, step + 1
                )
                self._unpack(packed, mine)
            if not self.fault(
                FaultName.SKIP_PARAM_SYNC
            ):  # FAULT: the other owners' tensors stay stale here
                self._broadcast_owned()
        self.boundary()

    def _broadcast_owned(self) -> None:
        """Each owner in rank order sends its updated tensors to every replica (one broadcast
        each)."""
        for owner, parts in enumerate(self.owned):
            if not parts:
                continue
            if owner == self.di:
                buffer = torch.cat([self.params.data[part] for part in parts])
            else:
                buffer = torch.empty(
                    sum(p.stop - p.start for p in parts),
                    dtype=self.ctx.dtype,
                    device=self.ctx.device,
                )
            self.comm.broadcast(buffer, "params", "data", root=owner)
            if owner != self.di:
                self._unpack(buffer, parts)

    def _unpack(self, packed: torch.Tensor, parts: list[slice]) -> None:
        offset = 0
        for part in parts:
            n = part.stop - part.start
            self.params.data[part] = packed[offset : offset + n]
            offset += n

    def held(self) -> tuple[torch.Tensor, slice]:
        return self.params, slice(0, flat.numel(self.shapes))
