"""ZeRO stage 1 (``zero1``): optimizer state sharded (S), parameters and gradients replicated (R).

Each rank owns the Adam state of one 1/N slice of the flat, padded parameter buffer. Because only
owners can update their slice, two collectives replace dp's one all-reduce -- and cost the same:
  1. reduce-scatter the gradient: each owner receives the sum for its slice only (rule 1 keys on
     O's placement: the naive "G is replicated, so all-reduce" would cost 3Ψ, not ZeRO's 2Ψ);
  2. all-gather the updated parameter slices so every replica is whole again (rule 2).
"""

from __future__ import annotations

import torch

from placement_edu.memory import GATHER_BUFFER, REDUCE_BUCKET
from placement_edu.faults import FaultName
from placement_edu.runtime.engines import flat
from placement_edu.runtime.engines.engine import Context, Engine, ReplicatedGradient


class Zero1(ReplicatedGradient):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.psi, self.padded, self.mine = self.sharded_layout()  # mine: this rank's slice
        self.params = self.replicated_params()
        self.params.grad = torch.zeros_like(self.params)  # G: whole (R)
        k = self.padded // self.d
        self.m = torch.zeros(k, dtype=ctx.dtype, device=ctx.device)  # O: this rank's slice (S)
        self.v = torch.zeros_like(self.m)

    def step(self, step: int) -> None:
        partial = self.partial_gradient(step)
        bucket = flat.pad(partial, self.padded)  # the collective moves equal, padded chunks
        if bucket is not partial:
            self.mem.peak(REDUCE_BUCKET, "backward", bucket.numel() * bucket.element_size())
        grad = torch.empty_like(self.m)
        if self.fault(FaultName.SKIP_GRAD_REDUCE):
            grad.copy_(bucket[self.mine])  # FAULT: the partial gradient reaches Adam
        else:
            # Only this rank's optimizer slice needs the summed gradient: reduce-scatter (rule 1).
            self.comm.reduce_scatter(grad, bucket, "grads", "data")
        self.scale(grad)

        self.comm.at(step, "step")
        # Only owners update their slice; then all-gather so every replica is whole (rule 2).
        update_owned_slice(self, grad, step)
        self.boundary()

    def held(self) -> tuple[torch.Tensor, slice]:
        return self.params, slice(0, self.psi)


def update_owned_slice(engine: Engine, grad: torch.Tensor, step: int) -> None:
    """The owner-only step of zero1 and zero2: Adam updates this rank's slice of the replicated
    parameters, then the slices are all-gathered so every replica is whole again (rule 2)."""
    params, mine_at = engine.params.data, engine.mine  # type: ignore[attr-defined]
    with torch.no_grad():
        mine = flat.take(params, mine_at)
        mine -= engine.ctx.adam.delta(grad, engine.m, engine.v, step + 1)  # type: ignore[attr-defined]
        if engine.fault(FaultName.SKIP_PARAM_SYNC):
            flat.put(params, mine_at, mine)  # FAULT: the other ranks' slices stay stale here
        else:
            gather_params(engine, mine)


def gather_params(engine: Engine, mine: torch.Tensor) -> None:
    """All-gather the owners' updated slices into the replicated flat parameters (straight into
    them when there is no padding; through a padded buffer otherwise)."""
    params = engine.params.data  # type: ignore[attr-defined]
    padded = engine.padded  # type: ignore[attr-defined]
    full = (
        params
        if params.numel() == padded
        else torch.empty(padded, dtype=params.dtype, device=params.device)
    )
    engine.comm.all_gather(full, mine, "params", "data")
    if full is not params:
        engine.mem.peak(GATHER_BUFFER, "step", full.numel() * full.element_size())
        params.copy_(full[: params.numel()])
