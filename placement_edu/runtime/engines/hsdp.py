"""Hybrid sharding (``hsdp``, FSDP HYBRID_SHARD): ZeRO-3 within each data group, replicated across
the groups of the replica axis. Mesh replica=r (outermost) x data=d.

Placements: P is SG on data and R on replica; G and O are S on data and R on replica. So a rank
holds 1/d of each state (16Ψ/d bytes), identical to the rank with the same data index in every
other replica group. Read ``zero3.py`` first: within a data group everything is zero3's. Added:
  - start-up: the parameter slices are replicated across replica groups, so they must start
    identical: one broadcast of the slice along replica (rule 4);
  - gradients are partial on *both* batch-splitting axes (the batch is split over r x d ranks):
    reduce-scatter within the data group (each owner's slice summed over d), then all-reduce that
    slice across the replica group (summed over r; every replica of the slice needs it whole,
    because its optimizer state is R there), then one scale by r x d.
The replica all-reduce moves only the slice (Ψ/d elements): the cheap axis-crossing traffic that
makes hybrid sharding attractive across nodes.
"""

from __future__ import annotations

import torch

from placement_edu.runtime.engines.zero3 import Zero3
from placement_edu.faults import FaultName


class HybridShard(Zero3):
    def initial_shard(self) -> torch.Tensor:
        shard = super().initial_shard()
        if self.r > 1 and not self.fault(FaultName.UNSYNCED_INIT):
            # The slice is replicated across replica groups: make the copies identical (rule 4).
            # (FAULT unsynced-init: each rank keeps its own initialisation.)
            self.comm.broadcast(shard, "params", "replica")
        return shard

    def reduce_gradient(self, bucket: torch.Tensor) -> None:
        super().reduce_gradient(bucket)  # reduce-scatter within the data group
        if self.r > 1:
            # The slice is still partial across replica groups, and its optimizer state is
            # replicated there: all-reduce the slice along replica (rule 1, R on replica).
            self.comm.all_reduce(self.grad, "grads", "replica")
        # Zero3.step then scales once, by r x d (Engine.scale).
