"""ZeRO-3 with every model state offloaded (``zero3_offload``, ZeRO-Infinity style): P, G and O are
all OFF on the data axis -- each rank's 1/N slice of each lives in *host* memory, and the device
holds no model state between uses (0 persistent device bytes; 16Ψ/N on the host).

It is ``zero3`` (read ``zero3.py`` first) with the host link added, as ``zero2_offload`` adds it:
  - before each all-gather (forward, and again before backward) the host slice of the parameters
    is copied to a device staging buffer (h2d): the collective runs on the device;
  - the reduce-scattered gradient slice lands in the staging buffer and moves to the host (d2h);
  - Adam runs on the host, where the parameter slice, its gradient and m, v all live: the updated
    parameters stay there, so nothing comes back after the step (the next gather's h2d brings them).
Collectives: zero3's 2 all-gathers + 1 reduce-scatter (3Ψ); host traffic: 2 h2d + 1 d2h of a slice.
"""

from __future__ import annotations

import torch

from placement_edu.memory import OFFLOAD_STAGING
from placement_edu.faults import FaultName
from placement_edu.runtime.engines.zero3 import Zero3


class Zero3Offload(Zero3):
    # zero3's slices (P, G, m, v: made like the shard) are put on the host; the window stays on the
    # device.

    def initial_shard(self) -> torch.Tensor:
        return super().initial_shard().to(self.ctx.host)  # P: slice, host (OFF)

    def _staging(self, phase: str) -> torch.Tensor:
        """A device buffer of one slice, on its way to or from the host."""
        staging = torch.empty(self.shard.numel(), dtype=self.ctx.dtype, device=self.ctx.device)
        self.mem.peak(OFFLOAD_STAGING, phase, staging.numel() * staging.element_size())
        return staging

    def slice_to_gather(self, source: torch.Tensor, phase: str) -> torch.Tensor:
        staging = self._staging(phase)
        # The all-gather runs on the device: bring this rank's parameter slice over the host link.
        self.comm.h2d(staging, source, "params")
        return staging

    def reduce_gradient(self, bucket: torch.Tensor) -> None:
        staging = self._staging("backward")
        if self.fault(FaultName.SKIP_GRAD_REDUCE):
            staging.copy_(bucket[self.mine])  # FAULT: the partial gradient reaches Adam
        else:
            # The host optimizer of each rank needs only its slice of the summed gradient (rule 1).
            self.comm.reduce_scatter(staging, bucket, "grads", "data")
        # The reduced slice moves to host memory, where Adam and the rest of the slice's state live.
        self.comm.d2h(self.grad, staging, "grads")

    # step(): zero3's. Its Adam update reads and writes self.shard, self.grad, self.m, self.v -- all
    # host tensors here -- so the optimizer step runs on the host.

    def states(self) -> tuple[dict[str, list], dict[str, list]]:
        return {}, {"params": [self.shard], "grads": [self.grad], "optimizer": [self.m, self.v]}
