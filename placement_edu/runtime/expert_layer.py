"""Expert parallelism run for real: one mixture-of-experts layer (a router and E SwiGLU experts) on
e gloo ranks, each holding E/e experts and reading its own tokens, measured against the core's
schedule (``schedule/expert_parallel.py``) and against one process.

The naive version first: ``reference`` runs the layer in one process with every expert at hand,
rank by rank's tokens (each rank's capacity C = ⌈k·cf·T/E⌉ decides which routed tokens are
dropped, as on the rank itself). The parallel version (``run_rank``):

- the router (dense, R on the expert ranks) picks each token's top-k experts, weighted by the
  softmax of their k logits (Mixtral's rule); each rank fills an [E, C, h] buffer, C slots per
  expert, experts in owner order;
- dispatch: an all-to-all sends block j of the buffer (the E/e experts of rank j) to rank j; each
  rank runs its experts on the e·C tokens it received; combine: the reverse all-to-all brings the
  outputs home, where each token sums its k experts' outputs times their gates. Autograd runs the
  two all-to-alls again in backward (an all-to-all of equal blocks is its own inverse);
- gradients: an expert's gradient arrives whole on its owner (the combine's backward brought it
  every token that chose the expert) and is summed over the d data replicas of that expert; the
  router's is partial on every rank, summed over the d·e of them (one all-reduce each); both are
  divided once by d·e (each rank's loss is the mean over its own tokens).

The ledger records every all-to-all (op, phase, payload bytes, group), compared entry by entry
with the core's activation ops on the expert axis, and the router's all-reduce; the deviation is
the largest difference from ``reference`` over outputs, input gradients and weight gradients.
``python -m placement_edu.runtime.expert_layer`` prints top-1 and top-2 at e = 2 and 4, and top-2
on data=2,expert=2 (the experts' grads then all-reduced over their 2 data replicas).
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.autograd.function import FunctionCtx

from placement_edu.experts import MoESpec, all_to_all_elements, expert_capacity
from placement_edu.mesh import Mesh
from placement_edu.precision import get_precision
from placement_edu.schedule import derive_schedule
from placement_edu.strategies import STRATEGIES

#: (op, phase, payload bytes, group): what a measurement sees of an expert-axis op.
Key = tuple[str, str, int, int]


@dataclass(frozen=True)
class ExpertRun:
    """The toy layer: ``batch`` sequences of ``seq`` tokens per rank, width ``hidden``, ``experts``
    SwiGLU experts of width ``ffn``, top-``top_k``, float64, on ``ranks`` expert ranks, times
    ``data`` replicas of each expert (mesh ``data=d,expert=e``: d·e ranks, each its own tokens).
    Faults: ``drop`` (drop-routed-tokens: the block bound for the last expert rank is left out)
    and ``skip_expert_reduce`` (skip-expert-grad-reduce: the experts' grads are not summed over
    their data replicas)."""

    ranks: int
    top_k: int
    experts: int = 4
    batch: int = 2
    seq: int = 8
    hidden: int = 8
    ffn: int = 16
    capacity_factor: Fraction = Fraction(1)
    seed: int = 0
    drop: bool = False
    data: int = 1
    skip_expert_reduce: bool = False

    @property
    def world(self) -> int:
        """d·e ranks: expert inside data (``mesh.LAYOUT``): rank = data index · e + expert index."""
        return self.data * self.ranks

    def spec(self) -> MoESpec:
        """The core's model of the layer: one MoE layer of the toy's shape."""
        return MoESpec(
            layers=1,
            hidden=self.hidden,
            heads=1,
            ffn=self.ffn,
            vocab=2,
            experts=self.experts,
            top_k=self.top_k,
            seq=self.seq,
            micro_batch=self.batch,
            capacity_factor=self.capacity_factor,
        )

    def predicted(self) -> list[Key]:
        """The core's activation ops on the expert axis for rank 0, in order (float64: 8 B)."""
        mesh = Mesh.of(data=self.data, expert=self.ranks)
        schedule = derive_schedule(STRATEGIES["dp"], self.spec(), mesh, get_precision("fp64_adam"))
        return [
            (o.op, o.phase, int(o.payload_bytes), o.group)
            for o in schedule.ops
            if o.axis == "expert" and o.state.value == "activations"
        ]


def inputs(run: ExpertRun) -> dict[str, torch.Tensor]:
    """The same draw on every rank: the router, the experts' weights, every rank's tokens and
    targets (rank r's are x[r], y[r])."""
    g = torch.Generator().manual_seed(run.seed)

    def draw(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=g, dtype=torch.float64)

    E, h, f = run.experts, run.hidden, run.ffn
    shape = (run.world, run.batch * run.seq, h)
    return {
        "router": draw(h, E),
        "gate": draw(E, f, h) / math.sqrt(h),
        "up": draw(E, f, h) / math.sqrt(h),
        "down": draw(E, h, f) / math.sqrt(f),
        "x": draw(*shape),
        "y": draw(*shape),
    }


def expert(p: dict[str, torch.Tensor], i: int, tokens: torch.Tensor) -> torch.Tensor:
    """SwiGLU expert ``i`` (gate, up, down) on ``tokens`` [..., h]."""
    act = torch.nn.functional.silu(tokens @ p["gate"][i].T) * (tokens @ p["up"][i].T)
    return act @ p["down"][i].T


@dataclass
class Routing:
    """Where each of a rank's T tokens went: ``slot[t, j]`` its j-th expert's slot in the [E·C]
    buffer (-1: dropped over capacity), ``weight[t, j]`` that expert's gate."""

    slot: torch.Tensor
    weight: torch.Tensor


def route(run: ExpertRun, router: torch.Tensor, x: torch.Tensor) -> Routing:
    """Top-k experts of each token, weighted by the softmax of their k logits; each expert takes
    the first C tokens that chose it (token order, then k order), the rest are dropped."""
    C = expert_capacity(run.spec())
    top, chosen = torch.topk(x @ router, run.top_k, dim=-1)
    weight = torch.softmax(top, dim=-1)
    slot = torch.full_like(chosen, -1)
    taken = [0] * run.experts
    for t in range(x.shape[0]):
        for j in range(run.top_k):
            e = int(chosen[t, j])
            if taken[e] < C:
                slot[t, j] = e * C + taken[e]
                taken[e] += 1
    return Routing(slot, weight)


def dispatch(run: ExpertRun, x: torch.Tensor, routing: Routing) -> torch.Tensor:
    """The [E·C, h] buffer: each kept routed token in its slot, zeros in the empty ones."""
    C = expert_capacity(run.spec())
    kept = routing.slot >= 0
    buffer = x.new_zeros(run.experts * C, x.shape[-1])
    tokens = torch.arange(x.shape[0]).unsqueeze(1).expand_as(routing.slot)
    return buffer.index_put((routing.slot[kept],), x[tokens[kept]])


def combine(outputs: torch.Tensor, routing: Routing) -> torch.Tensor:
    """Each token's output: its kept experts' outputs (rows of ``outputs``) times their gates."""
    kept = (routing.slot >= 0).to(outputs.dtype)
    picked = outputs[routing.slot.clamp(min=0)]  # [T, k, h]
    return ((routing.weight * kept).unsqueeze(-1) * picked).sum(dim=1)


def reference(run: ExpertRun) -> dict[str, torch.Tensor]:
    """The layer in one process, every expert at hand, rank by rank's tokens (each rank's own
    capacity), loss the mean over each rank's tokens summed over ranks / (d·e): the global
    mean."""
    data = inputs(run)
    leaves = {n: data[n].clone().requires_grad_() for n in ("router", "gate", "up", "down")}
    x = data["x"].clone().requires_grad_()
    outs, losses = [], []
    C = expert_capacity(run.spec())
    for r in range(run.world):
        routing = route(run, leaves["router"], x[r])
        buffer = dispatch(run, x[r], routing).view(run.experts, C, -1)
        done = torch.stack([expert(leaves, i, buffer[i]) for i in range(run.experts)])
        out = combine(done.view(run.experts * C, -1), routing)
        outs.append(out)
        losses.append(torch.nn.functional.mse_loss(out, data["y"][r]))
    (sum(losses) / run.world).backward()  # type: ignore[union-attr]
    grads = {f"d{n}": t.grad for n, t in leaves.items()}
    return {"out": torch.stack(outs).detach(), "dx": x.grad, **grads}  # type: ignore[dict-item]


@dataclass
class Ledger:
    """Every collective this rank issues: (op, phase, payload bytes, group)."""

    phase: str = "forward"
    entries: list[Key] = field(default_factory=list)

    def note(self, op: str, tensor: torch.Tensor, group: Any) -> None:
        size = tensor.numel() * tensor.element_size()
        self.entries.append((op, self.phase, size, dist.get_world_size(group)))


class AllToAll(torch.autograd.Function):
    """all_to_all of equal blocks along dim 0 (block i goes to rank i); its own inverse in
    backward, where autograd runs it again on the gradient."""

    @staticmethod
    def forward(ctx: FunctionCtx, blocks: torch.Tensor, ledger: Ledger, group: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.ledger, ctx.group = ledger, group  # type: ignore[attr-defined]
        return exchange(blocks.contiguous(), ledger, group)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        return exchange(grad.contiguous(), ctx.ledger, ctx.group), None, None  # type: ignore[attr-defined]


def exchange(blocks: torch.Tensor, ledger: Ledger, group: Any) -> torch.Tensor:
    out = torch.empty_like(blocks)
    ledger.note("all_to_all", blocks, group)
    dist.all_to_all_single(out, blocks, group=group)
    return out


def groups(run: ExpertRun) -> tuple[Any, Any]:
    """This rank's (expert group, data group): e neighbours, and the d replicas of its experts.
    Every rank makes every group, in the same order (torch.distributed's rule)."""
    d, e, rank = run.data, run.ranks, dist.get_rank()
    mine: dict[str, Any] = {}
    for i in range(d):
        group = dist.new_group([i * e + j for j in range(e)])
        mine["expert"] = group if rank // e == i else mine.get("expert")
    for j in range(e):
        group = dist.new_group([i * e + j for i in range(d)])
        mine["data"] = group if rank % e == j else mine.get("data")
    return mine["expert"], mine["data"]


def run_rank(run: ExpertRun) -> dict[str, Any]:
    """This rank's tokens through the layer and back, its E/e experts serving its e expert ranks;
    return its ledger and its largest deviation from ``reference``."""
    rank, e, world = dist.get_rank(), run.ranks, run.world
    by_expert, by_data = groups(run)
    data, want = inputs(run), reference(run)
    E, C, h = run.experts, expert_capacity(run.spec()), run.hidden
    mine = rank % e  # this rank's index on the expert axis
    here = range(mine * E // e, (mine + 1) * E // e)  # this rank's experts (S on expert)
    router = data["router"].clone().requires_grad_()  # dense: R on every rank
    local = {
        n: data[n][here.start : here.stop].clone().requires_grad_() for n in ("gate", "up", "down")
    }
    x = data["x"][rank].clone().requires_grad_()
    ledger = Ledger()
    routing = route(run, router, x)
    buffer = dispatch(run, x, routing)
    if run.drop:  # the fault: the block bound for the last expert rank never leaves
        buffer = buffer * (torch.arange(E * C) < (E - E // e) * C).unsqueeze(-1)
    # dispatch: [e source ranks, E/e experts, C, h] arrive
    blocks = buffer.view(e, E // e * C * h)
    received = AllToAll.apply(blocks, ledger, by_expert).view(e, E // e, C, h)
    done = torch.stack([expert(local, i, received[:, i]) for i in range(E // e)], dim=1)
    outputs = AllToAll.apply(done.reshape(e, E // e * C * h), ledger, by_expert)  # combine
    out = combine(outputs.view(E * C, h), routing)
    ledger.phase = "backward"
    torch.nn.functional.mse_loss(out, data["y"][rank]).backward()
    worst = float((out.detach() - want["out"][rank]).abs().max())
    dx = x.grad
    assert dx is not None
    worst = max(worst, float((dx - want["dx"][rank] * world).abs().max()) / world)
    grad = router.grad
    assert grad is not None
    # the dense grads: partial on every rank (the data × expert group), summed once ...
    ledger.note("all_reduce", grad, None)
    dist.all_reduce(grad)
    grad /= world  # ... and scaled once by d·e
    worst = max(worst, float((grad - want["drouter"]).abs().max()))
    # the experts' grads: whole on the expert axis (the all-to-alls brought every token that chose
    # them), partial over their d data replicas: one all-reduce there (the core's single op)
    flat = torch.cat([leaf.grad.flatten() for leaf in local.values()])  # type: ignore[union-attr]
    if run.data > 1 and not run.skip_expert_reduce:
        ledger.note("all_reduce", flat, by_data)
        dist.all_reduce(flat, group=by_data)
    flat /= world
    offset = 0
    for name, leaf in local.items():
        n = leaf.numel()
        got = flat[offset : offset + n].view_as(leaf)
        offset += n
        worst = max(worst, float((got - want[f"d{name}"][here.start : here.stop]).abs().max()))
    dropped = int((routing.slot < 0).sum())  # over capacity: dropped here and in the reference
    return {"rank": rank, "ledger": ledger.entries, "deviation": worst, "dropped": dropped}


def _rank_main(rank: int, run: ExpertRun, port: int, results: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=run.world)
    try:
        results.put(run_rank(run))
    finally:
        dist.destroy_process_group()


def launch(run: ExpertRun) -> list[dict[str, Any]]:
    """Run ``run`` on d·e fresh gloo processes; each rank's result, by rank."""
    run.predicted()  # the core refuses a shape it cannot derive, before any process starts
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    mp.start_processes(
        _rank_main, args=(run, port, results), nprocs=run.world, start_method="spawn"
    )
    return sorted((results.get() for _ in range(run.world)), key=lambda r: r["rank"])


def main() -> None:
    for data, ranks, top_k in ((1, 2, 1), (1, 4, 1), (1, 2, 2), (1, 4, 2), (2, 2, 2)):
        run = ExpertRun(ranks, top_k, data=data)
        measured = launch(run)
        predicted = run.predicted()
        a2a = [[k for k in r["ledger"] if k[0] == "all_to_all"] for r in measured]
        same = all(entries == predicted for entries in a2a)
        each = all_to_all_elements(run.spec()) * 8
        dropped = sum(r["dropped"] for r in measured)
        reductions = [k for k in measured[0]["ledger"] if k[0] == "all_reduce"]
        print(
            f"data={data},expert={ranks} top-{top_k}: {len(predicted)} all-to-alls per rank of "
            f"{each} B ({each * (ranks - 1) // ranks} B leave the rank); measured = predicted on "
            f"every rank: {same}; all-reduces (payload B, group): "
            f"{', '.join(f'{b} B over {g}' for _, _, b, g in reductions)}; max |deviation| from "
            f"one process {max(r['deviation'] for r in measured):.3g} ({dropped} routed tokens "
            "over capacity, dropped alike)"
        )


if __name__ == "__main__":
    main()
