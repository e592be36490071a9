"""What every engine shares: where this rank sits on the mesh, its slice of the batch, its flat
parameter layout, and the bookkeeping (ledgers, faults, deviation from the reference).

An engine subclass writes one ``step`` with its collectives in the order the placement implies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from placement_edu.mesh import Mesh
from placement_edu.faults import FaultName
from placement_edu.strategies import Strategy
from placement_edu.runtime.engines import flat
from placement_edu.runtime.engines.adam import Adam
from placement_edu.runtime.measurement.comm import Comm
from placement_edu.runtime.measurement.memtrack import MemoryLedger
from placement_edu.runtime.engines.toy import (
    Params,
    TinyMLP,
    ToyModel,
    init_params,
    loss_fn,
    make_batch,
    mlp_forward,
)


@dataclass
class Context:
    """Everything an engine needs from the outside world, made once per run on each rank."""

    rank: int
    strategy: Strategy  # its placement chose the engine; its options steer it
    mesh: Mesh
    comm: Comm
    mem: MemoryLedger
    module: ToyModel  # the architecture (its own parameters are never trained)
    dtype: torch.dtype
    device: torch.device
    host: torch.device
    seed: int
    global_batch: int
    micro_batches: int
    pipeline_schedule: str
    fault: str | None
    adam: Adam


class Engine:
    """Base class. Subclasses set ``self.shapes`` (the tensors this rank's model replica covers)
    and implement ``step``, ``states`` and ``held``."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.comm, self.mem = ctx, ctx.comm, ctx.mem
        self.coords = ctx.mesh.coords(ctx.rank)
        self.d = ctx.mesh.degree("data")
        self.di = self.coords["data"]
        # hsdp's replica axis splits the batch too (outermost): the batch goes to r x d ranks.
        self.r = ctx.mesh.degree("replica")
        self.ri = self.coords.get("replica", 0)
        self.shapes: flat.Shapes = self.model_shapes()

    # --- helpers ------------------------------------------------------------------------------
    def model_shapes(self) -> flat.Shapes:
        """(name, shape) of the tensors this rank's replica of the model covers (all of them here;
        a tensor-parallel rank has slices, a pipeline stage its own layers)."""
        return [(n, tuple(p.shape)) for n, p in self.ctx.module.named_parameters()]

    def fault(self, name: FaultName) -> bool:
        """True when the run injects fault ``name`` (SPEC §5); engines test it where it strikes."""
        return self.ctx.fault == name

    def initial_params(self) -> Params:
        """The model's initial parameters: the same seed on every rank, unless ``unsynced-init``
        gives each rank its own (and the start-up broadcast is then skipped)."""
        seed = self.ctx.seed + (
            1000 * (self.ctx.rank + 1) if self.fault(FaultName.UNSYNCED_INIT) else 0
        )
        return {
            n: t.to(self.ctx.device)
            for n, t in init_params(self.ctx.module, seed, self.ctx.dtype).items()
        }

    def replicated_params(self) -> torch.Tensor:
        """The whole model as one flat leaf tensor, replicated (R) on the data axis. Replicated
        parameters must start identical: one broadcast at start-up (SPEC §4 rule 4) -- the
        ``unsynced-init`` fault skips it, and each rank keeps its own initialisation."""
        params = flat.flatten(self.initial_params(), self.shapes).requires_grad_()
        self.mem.parameters_live_in(params)
        if self.d > 1 and not self.fault(FaultName.UNSYNCED_INIT):
            self.comm.broadcast(params.data, "params", "data")
        return params

    def sharded_layout(self) -> tuple[int, int, slice]:
        """The flat layout of an engine that shards on the data axis: Ψ (the elements of this
        rank's replica), Ψ padded to a multiple of d (the collectives move equal chunks) and
        this rank's 1/d slice of the padded buffer."""
        psi = flat.numel(self.shapes)
        padded = flat.padded(psi, self.d)
        return psi, padded, flat.owned(psi, self.d, self.di)

    def local_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's equal slice of the global batch of ``step``: one of r x d (replica, data)."""
        x, y = make_batch(
            step, self.ctx.module, self.ctx.global_batch, self.ctx.seed, self.ctx.dtype
        )
        rows = self.ctx.global_batch // (self.r * self.d)
        index = self.ri * self.d + self.di
        part = slice(index * rows, (index + 1) * rows)
        return x[part].to(self.ctx.device), y[part].to(self.ctx.device)

    def forward_loss(self, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The whole model on a micro-batch (overridden by the tensor- and pipeline-parallel
        engines)."""
        assert isinstance(self.ctx.module, TinyMLP)
        return loss_fn(mlp_forward(params, x, range(len(self.ctx.module.layers))), y)

    def forward(
        self, leaf: torch.Tensor, x: torch.Tensor, y: torch.Tensor, micro_batch: int = 0
    ) -> torch.Tensor:
        """Forward of one micro-batch on the flat parameter buffer ``leaf``, counting what autograd
        keeps for backward."""
        with self.mem.forward(micro_batch):
            return self.forward_loss(flat.views(leaf, self.shapes), x, y)

    def backward(self, loss: torch.Tensor, micro_batch: int = 0) -> None:
        """Backward: the gradient accumulates into ``leaf.grad`` (preset by the engine) and is
        *partial* -- it covers only this rank's samples until a data-axis reduction."""
        loss.backward()
        self.mem.backward_done(micro_batch)

    def forward_backward(
        self, leaf: torch.Tensor, x: torch.Tensor, y: torch.Tensor, step: int
    ) -> None:
        loss = self.forward(leaf, x, y)
        self.comm.at(step, "backward")
        self.backward(loss)

    def scale(self, grad: torch.Tensor) -> None:
        """Turn the summed gradient into the mean over the r x d batch ranks: divide once."""
        grad.div_(self.r * self.d)
        if self.fault(FaultName.DOUBLE_SCALE):
            grad.div_(self.r * self.d)  # FAULT double-scale: divided by N a second time

    # --- what the runner asks of an engine -------------------------------------------------
    def step(self, step: int) -> None:
        raise NotImplementedError

    def states(self) -> tuple[dict[str, list], dict[str, list]]:
        """(device, host) tensors holding params, grads and optimizer state right now."""
        raise NotImplementedError

    def held(self) -> tuple[torch.Tensor, slice]:
        """The parameters this rank holds, as a flat tensor, and the slice of the padded flat
        reference layout it corresponds to."""
        raise NotImplementedError

    def local_reference(self, ref: Params) -> Params:
        """The reference's tensors as this rank's replica sees them (tensor/pipeline slices)."""
        return {n: ref[n] for n, _ in self.shapes}

    def deviation(self, ref: Params) -> float:
        """Max |θ_rank − θ_reference| over every parameter element this rank holds."""
        mine, where = self.held()
        local = self.local_reference(ref)
        full = flat.flatten(local, self.shapes, max(where.stop, flat.numel(self.shapes)))
        return float(
            (mine.detach().cpu().to(torch.float64) - full[where].to(torch.float64)).abs().max()
        )

    def boundary(self) -> None:
        device, host = self.states()
        self.mem.boundary(device, host)


class ReplicatedGradient(Engine):
    """An engine whose parameters and gradient are whole on every rank (dp, zero1,
    zero1_allreduce): one flat leaf ``params`` whose ``.grad`` (preset by the engine) backward
    fills, and Adam's ``m`` and ``v`` -- whole, or only what this rank updates."""

    params: torch.Tensor
    m: torch.Tensor
    v: torch.Tensor

    def partial_gradient(self, step: int) -> torch.Tensor:
        """Forward and backward of this rank's slice of the batch of ``step`` into
        ``params.grad``, zeroed first: the *partial* gradient, before any data-axis reduction."""
        self.comm.at(step, "forward")
        x, y = self.local_batch(step)
        assert self.params.grad is not None  # G: preset in __init__; backward accumulates into it
        self.params.grad.zero_()
        self.forward_backward(self.params, x, y, step)
        self.boundary()
        return self.params.grad

    def states(self) -> tuple[dict[str, list], dict[str, list]]:
        return {
            "params": [self.params],
            "grads": [self.params.grad],
            "optimizer": [self.m, self.v],
        }, {}
