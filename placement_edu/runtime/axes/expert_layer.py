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

Every collective goes through the runtime's ledger (``runtime.comm.Comm``: op, state, axis,
group, payload and ring bytes), compared entry by entry with the core's ops (``Op.key``'s fields)
for the layer alone (``MoESpec.layer_only``: its dense grads are the router's). Each rank also
returns its gate logits and the tokens that arrived at each of its experts from each rank, which
``expert_measure`` sets beside the core's routing of those logits (``experts.route_tokens``). The
deviation is the largest difference from ``reference`` over outputs, input gradients and weight
gradients.
``python -m placement_edu.runtime.axes.expert_layer`` prints top-1 and top-2 at e = 2 and 4, and
top-2 on data=2,expert=2 (the experts' grads then all-reduced over their 2 data replicas).
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.autograd.function import FunctionCtx

from placement_edu.experts import expert_capacity
from placement_edu.placement import EXPERT_AXIS
from placement_edu.schedule import OpKind
from placement_edu.runtime.measurement.comm import Comm

# re-exported: the run's description, torch-free
from placement_edu.runtime.axes.expert_run import (
    TIMEOUT_S,
    ExpertRun,
    Key,
    key,
    measured_is_predicted,
)

__all__ = ["ExpertRun", "Key", "key", "measured_is_predicted", "launch", "reference", "run_rank"]


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


class AllToAll(torch.autograd.Function):
    """all_to_all of equal blocks along dim 0 (block i goes to rank i of the expert group),
    through the ledger; its own inverse in backward, where autograd runs it again on the
    gradient."""

    @staticmethod
    def forward(ctx: FunctionCtx, blocks: torch.Tensor, comm: Comm) -> torch.Tensor:  # type: ignore[override]
        ctx.comm = comm  # type: ignore[attr-defined]
        return exchange(blocks.contiguous(), comm)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return exchange(grad.contiguous(), ctx.comm), None  # type: ignore[attr-defined]


def exchange(blocks: torch.Tensor, comm: Comm) -> torch.Tensor:
    out = torch.empty_like(blocks)
    comm.all_to_all(out, blocks, "activations", EXPERT_AXIS)
    return out


def groups(run: ExpertRun) -> dict[str, tuple[Any, list[int]]]:
    """This rank's groups, for the ledger: on expert its e neighbours, on data the d replicas of
    its experts. Every rank makes every group, in the same order (torch.distributed's rule)."""
    d, e, rank = run.data, run.ranks, dist.get_rank()
    mine: dict[str, tuple[Any, list[int]]] = {}
    for i in range(d):
        ranks = [i * e + j for j in range(e)]
        group = dist.new_group(ranks)
        if rank in ranks:
            mine[EXPERT_AXIS] = (group, ranks)
    for j in range(e):
        ranks = [i * e + j for i in range(d)]
        group = dist.new_group(ranks)
        if rank in ranks:
            mine["data"] = (group, ranks)
    return mine


def run_rank(run: ExpertRun) -> dict[str, Any]:
    """This rank's tokens through the layer and back, its E/e experts serving its e expert ranks;
    return its ledger and its largest deviation from ``reference``."""
    rank, e, world = dist.get_rank(), run.ranks, run.world
    comm = Comm(groups(run), TIMEOUT_S)
    # the dense grads' group is the data × expert group, every rank: the core records its
    # all-reduce on the expert axis with d·e ranks
    dense = Comm({EXPERT_AXIS: (None, list(range(world)))}, TIMEOUT_S)
    for c in (comm, dense):
        c.at(0, "forward")
    data, want = inputs(run), reference(run)
    E, C, h = run.experts, expert_capacity(run.spec()), run.hidden
    mine = rank % e  # this rank's index on the expert axis
    here = range(mine * E // e, (mine + 1) * E // e)  # this rank's experts (S on expert)
    router = data["router"].clone().requires_grad_()  # dense: R on every rank
    local = {
        n: data[n][here.start : here.stop].clone().requires_grad_() for n in ("gate", "up", "down")
    }
    x = data["x"][rank].clone().requires_grad_()
    routing = route(run, router, x)
    buffer = dispatch(run, x, routing)
    if run.drop:  # the fault: the block bound for the last expert rank never leaves
        buffer = buffer * (torch.arange(E * C) < (E - E // e) * C).unsqueeze(-1)
    # dispatch: [e source ranks, E/e experts, C, h] arrive
    blocks = buffer.view(e, E // e * C * h)
    received = AllToAll.apply(blocks, comm).view(e, E // e, C, h)
    # what reached each of this rank's experts from each rank of its group: the filled slots (a
    # token's row is never all zeros; an empty slot is)
    filled = received.detach().abs().sum(dim=-1) > 0  # [e source ranks, E/e experts, C]
    arrived = [[int(n) for n in row] for row in filled.sum(dim=-1).T]  # [expert][source]
    done = torch.stack([expert(local, i, received[:, i]) for i in range(E // e)], dim=1)
    outputs = AllToAll.apply(done.reshape(e, E // e * C * h), comm)  # combine
    out = combine(outputs.view(E * C, h), routing)
    for c in (comm, dense):
        c.at(0, "backward")
    torch.nn.functional.mse_loss(out, data["y"][rank]).backward()
    worst = float((out.detach() - want["out"][rank]).abs().max())
    dx = x.grad
    assert dx is not None
    worst = max(worst, float((dx - want["dx"][rank] * world).abs().max()) / world)
    grad = router.grad
    assert grad is not None
    # the dense grads: partial on every rank (the data × expert group), summed once ...
    dense.all_reduce(grad, "grads", EXPERT_AXIS)
    grad /= world  # ... and scaled once by d·e
    worst = max(worst, float((grad - want["drouter"]).abs().max()))
    # the experts' grads: whole on the expert axis (the all-to-alls brought every token that chose
    # them), partial over their d data replicas: one all-reduce there (the core's single op)
    flat = torch.cat([leaf.grad.flatten() for leaf in local.values()])  # type: ignore[union-attr]
    if run.data > 1 and not run.skip_expert_reduce:
        comm.all_reduce(flat, "grads", "data")
    flat /= world
    offset = 0
    for name, leaf in local.items():
        n = leaf.numel()
        got = flat[offset : offset + n].view_as(leaf)
        offset += n
        worst = max(worst, float((got - want[f"d{name}"][here.start : here.stop]).abs().max()))
    dropped = int((routing.slot < 0).sum())  # over capacity: dropped here and in the reference
    a2a = comm.entries[:4]  # in issue order: the all-to-alls, the dense all-reduce, the experts'
    ledger = [key(o) for o in [*a2a, *dense.entries, *comm.entries[4:]]]
    return {
        "rank": rank,
        "ledger": ledger,
        "deviation": worst,
        "dropped": dropped,
        "logits": (x.detach() @ data["router"]).tolist(),  # the gate logits, T rows of E
        "arrived": arrived,
    }


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
        same = all(measured_is_predicted(r["ledger"], predicted) for r in measured)
        a2a = [k for k in predicted if k[1] == OpKind.ALL_TO_ALL]
        reductions = [k for k in measured[0]["ledger"] if k[1] == OpKind.ALL_REDUCE]
        dropped = sum(r["dropped"] for r in measured)
        print(
            f"data={data},expert={ranks} top-{top_k}: {len(a2a)} all-to-alls per rank of "
            f"{a2a[0][5]} B ({a2a[0][6]} B sent); all-reduces: "
            f"{', '.join(f'{k[5]} B over {k[4]} on {k[3]}' for k in reductions)}; measured = "
            f"predicted on every rank: {same}; max |deviation| from one process "
            f"{max(r['deviation'] for r in measured):.3g} ({dropped} routed tokens over capacity, "
            "dropped alike)"
        )


if __name__ == "__main__":
    main()
