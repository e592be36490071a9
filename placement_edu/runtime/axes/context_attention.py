"""Context parallelism run for real: one causal attention layer of a toy transformer on c gloo
ranks, each holding s/c tokens of every sequence, both ways the core derives
(``schedule.context``), measured against the core's schedule and against one process.

- ``ring``: Liu et al. 2023's ring attention. Forward: each rank starts with its own K/V chunk
  and passes the chunk in hand to the next rank (c - 1) rounds; each block merges into the output
  by its log-sum-exp (FlashAttention's online softmax), its pairs above the causal diagonal masked
  by their positions and a block with none left skipped. The chunks are contiguous, or zig-zag
  (``ContextRun.zigzag``: rank i holds chunks i and 2c - 1 - i of 2c, and every rank computes as
  many query-key pairs, ``Ledger.pairs``).
  Backward: the chunks go round again; each chunk's dK/dV travels beside it from its first
  visitor on, summing every rank's part, and the last visitor sends it home.
- ``ulysses``: Jacobs et al. 2023. An all-to-all turns Q, K, V from s/c tokens × a heads into
  s tokens × a/c heads; attention runs on whole heads; a second all-to-all turns the output back.
  Autograd runs the two in reverse in backward (an all-to-all of equal blocks is its own inverse).

The naive version first: ``reference`` is the layer on the whole sequence in one process; a run
is equivalent when every rank's output, input gradient (its tokens) and weight gradient (summed
over context, divided once by c, SPEC §5) match it. The ledger records every send, recv and
all-to-all (op, phase, payload bytes, group) and is compared entry by entry with the core's ops
on the context axis. The run (``context_config.ContextRun``) is a job of the runtime's launcher,
as a ``RunConfig`` is: ``launch`` starts its ranks, ``worker.run_job`` hands each to
``run_rank`` (``context_launch.launch``; ``python -m placement_edu.runtime.axes.context_launch``
prints both ways at c = 2 and 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.autograd.function import FunctionCtx

from placement_edu.runtime.axes.context_config import ContextRun, Key
from placement_edu.schedule import OpKind


def inputs(run: ContextRun) -> dict[str, torch.Tensor]:
    """The weights (Wq, Wk, Wv, Wo: h × h), the input x and the target y (b × s × h), the same
    on every rank and in the reference: drawn from ``run.seed``."""
    g = torch.Generator().manual_seed(run.seed)
    h, shape = run.hidden, (run.batch, run.seq, run.hidden)

    def draw(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=g, dtype=torch.float64)

    weights = {n: draw(h, h) / math.sqrt(h) for n in ("wq", "wk", "wv", "wo")}
    return {**weights, "x": draw(*shape), "y": draw(*shape)}


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ/√d + causal mask) v on (b, heads, s, d): the one-process definition."""
    s = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


def heads_of(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(b, s, h) -> (b, heads, s, h/heads)."""
    b, s, _ = t.shape
    return t.view(b, s, heads, -1).transpose(1, 2)


def merged(t: torch.Tensor) -> torch.Tensor:
    """(b, heads, s, d) -> (b, s, heads·d)."""
    b, a, s, d = t.shape
    return t.transpose(1, 2).reshape(b, s, a * d)


def layer(
    p: dict[str, torch.Tensor], x: torch.Tensor, heads: int, attend: Any = None
) -> torch.Tensor:
    """The attention layer on the tokens ``x`` holds: projections, attention, output projection.
    ``attend(q, k, v)`` on (b, heads, s, d): ``causal_attention`` in one process."""
    q, k, v = (heads_of(x @ p[w].T, heads) for w in ("wq", "wk", "wv"))
    return merged((attend or causal_attention)(q, k, v)) @ p["wo"].T


def reference(run: ContextRun) -> dict[str, torch.Tensor]:
    """One process, the whole sequence: the output, and the gradients of the mean squared error
    (over every token) with respect to the weights and the input."""
    data = inputs(run)
    leaves = {n: t.clone().requires_grad_() for n, t in data.items() if n != "y"}
    out = layer(leaves, leaves["x"], run.heads)
    torch.nn.functional.mse_loss(out, data["y"]).backward()
    return {"out": out.detach(), **{f"d{n}": t.grad for n, t in leaves.items()}}  # type: ignore[misc]


# --- the ledger and the ring's messages --------------------------------------------------------
@dataclass
class Ledger:
    """Every context-axis op this rank issues, and the pass it runs in; ``pairs``: the query-key
    pairs its forward attention computes, for one sequence and one head (the causal work)."""

    phase: str = "forward"
    entries: list[Key] = field(default_factory=list)
    pairs: int = 0

    def note(self, op: str, tensor: torch.Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        self.entries.append((op, self.phase, size, dist.get_world_size()))


def pass_on(ledger: Ledger, tensor: torch.Tensor) -> torch.Tensor:
    """Send ``tensor`` to the next rank of the ring and return what the previous one sent."""
    rank, c = dist.get_rank(), dist.get_world_size()
    out = torch.empty_like(tensor)
    ledger.note(OpKind.SEND, tensor)
    sending = dist.isend(tensor.contiguous(), (rank + 1) % c)
    ledger.note(OpKind.RECV, out)
    dist.recv(out, (rank - 1) % c)
    assert sending is not None  # isend on a process group of this rank returns its Work
    sending.wait()
    return out


def causal_mask(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Which (query, key) pairs the causal mask removes: a key after the query, by position."""
    return keys[None, :] > queries[:, None]


def block(
    q: torch.Tensor, kv: torch.Tensor, masked: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of the queries ``q`` on one K/V chunk: (its normalised output, its log-sum-exp
    per query), the pairs ``masked`` left out. A query with every key masked (a zig-zag block) has
    a log-sum-exp of -inf and contributes nothing when merged."""
    scores = q @ kv[0].transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse[..., None]).nan_to_num(0.0)  # -inf - -inf: no key, no weight
    return weights @ kv[1], lse


def block_grads(
    q: torch.Tensor,
    kv: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    masked: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention's backward on one block: (dq's part, the chunk's [dK, dV] part), from the
    whole row's output and log-sum-exp (Dao et al. 2022, Algorithm 4)."""
    scale = 1 / math.sqrt(q.shape[-1])
    scores = (q @ kv[0].transpose(-1, -2) * scale).masked_fill(masked, float("-inf"))
    p = torch.exp(scores - lse[..., None])
    ds = p * (dout @ kv[1].transpose(-1, -2) - (dout * out).sum(-1, keepdim=True))
    return ds @ kv[0] * scale, torch.stack(
        (ds.transpose(-1, -2) @ q * scale, p.transpose(-1, -2) @ dout)
    )


class RingAttention(torch.autograd.Function):
    """Causal attention of this rank's queries on every rank's keys and values, by the ring."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        ledger: Ledger,
        held: list[torch.Tensor],
    ) -> torch.Tensor:
        rank, c = dist.get_rank(), dist.get_world_size()
        kv = torch.stack((k, v))
        masked = causal_mask(held[rank], held[rank])  # the own chunk: the causal diagonal
        out, lse = block(q, kv, masked)
        ledger.pairs = int((~masked).sum())
        for r in range(1, c):
            kv = pass_on(ledger, kv)  # now rank - r's chunk (mod c)
            masked = causal_mask(held[rank], held[(rank - r) % c])
            if masked.all():  # every key after every query: nothing to compute
                continue
            o, l = block(q, kv, masked)
            ledger.pairs += int((~masked).sum())
            both = torch.logaddexp(lse, l)
            out = out * torch.exp(lse - both)[..., None] + o * torch.exp(l - both)[..., None]
            lse = both
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ledger, ctx.held = ledger, held  # type: ignore[attr-defined]
        return out

    @staticmethod
    def backward(ctx: FunctionCtx, dout: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors  # type: ignore[attr-defined]
        ledger: Ledger = ctx.ledger  # type: ignore[attr-defined]
        held: list[torch.Tensor] = ctx.held  # type: ignore[attr-defined]
        rank, c = dist.get_rank(), dist.get_world_size()
        kv = torch.stack((k, v))
        dq, home = block_grads(q, kv, out, lse, dout, causal_mask(held[rank], held[rank]))
        travelling = torch.zeros_like(kv)
        for r in range(1, c):
            kv = pass_on(ledger, kv)
            if r > 1:  # the dK/dV of the chunk that came with it, summed by its earlier visitors
                travelling = pass_on(ledger, travelling)
            else:
                travelling = torch.zeros_like(kv)
            masked = causal_mask(held[rank], held[(rank - r) % c])
            if not masked.all():
                dq_part, dkv = block_grads(q, kv, out, lse, dout, masked)
                dq, travelling = dq + dq_part, travelling + dkv
        dkv = home + pass_on(ledger, travelling)  # the last visitor sends each chunk's dK/dV home
        return dq, dkv[0], dkv[1], None, None


def ring(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ledger: Ledger, held: list[torch.Tensor]
) -> torch.Tensor:
    """``RingAttention``: ``held[j]``, the token positions rank j holds."""
    out = RingAttention.apply(q, k, v, ledger, held)
    assert isinstance(out, torch.Tensor)
    return out


# --- Ulysses -------------------------------------------------------------------------------------
class AllToAll(torch.autograd.Function):
    """all_to_all of equal blocks along dim 0 (block i goes to rank i); its own inverse in
    backward."""

    @staticmethod
    def forward(ctx: FunctionCtx, blocks: torch.Tensor, ledger: Ledger) -> torch.Tensor:
        ctx.ledger = ledger  # type: ignore[attr-defined]
        return exchange(blocks.contiguous(), ledger)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return exchange(grad.contiguous(), ctx.ledger), None  # type: ignore[attr-defined]


def exchange(blocks: torch.Tensor, ledger: Ledger) -> torch.Tensor:
    out = torch.empty_like(blocks)
    ledger.note(OpKind.ALL_TO_ALL, blocks)
    dist.all_to_all_single(out, blocks)
    return out


def ulysses(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ledger: Ledger, held: list[torch.Tensor]
) -> torch.Tensor:
    """Q, K, V (b, a, s/c, d) -> s tokens of a/c heads by one all-to-all, causal attention, and
    the output back to s/c tokens of a heads by a second (contiguous chunks: ``held`` is rank
    order)."""
    c = dist.get_world_size()
    b, a, sc, d = q.shape
    # (3, b, a, s/c, d) -> blocks by head group: (c, 3, b, a/c, s/c, d); block i to rank i
    qkv = torch.stack((q, k, v)).view(3, b, c, a // c, sc, d).movedim(2, 0)
    got = AllToAll.apply(qkv, ledger)  # (c: whose tokens, 3, b, a/c, s/c, d)
    assert isinstance(got, torch.Tensor)
    whole = got.permute(1, 2, 3, 0, 4, 5).reshape(3, b, a // c, c * sc, d)
    out = causal_attention(whole[0], whole[1], whole[2])  # (b, a/c, s, d)
    # blocks by sequence chunk: (c, b, a/c, s/c, d); block i (chunk i) to rank i
    back = AllToAll.apply(out.view(b, a // c, c, sc, d).movedim(2, 0), ledger)
    assert isinstance(back, torch.Tensor)  # (c: whose heads, b, a/c, s/c, d)
    return back.movedim(0, 1).reshape(b, a, sc, d)


# --- one rank's job, and the launch -------------------------------------------------------------
def run_rank(run: ContextRun) -> dict[str, Any]:
    """This rank's tokens through the layer and back; return its ledger and its largest
    deviation from ``reference`` (output, input gradient, weight gradients)."""
    rank, c = dist.get_rank(), dist.get_world_size()
    data, want = inputs(run), reference(run)
    held = [torch.tensor(run.held(j)) for j in range(c)]
    mine = held[rank]
    leaves = {
        n: t.clone().requires_grad_() for n, t in data.items() if n in ("wq", "wk", "wv", "wo")
    }
    x = data["x"][:, mine].clone().requires_grad_()
    ledger = Ledger()
    attend = {"ring": ring, "ulysses": ulysses}[run.attention]
    out = layer(leaves, x, run.heads, lambda q, k, v: attend(q, k, v, ledger, held))
    ledger.phase = "backward"
    # each rank's mean over its tokens; the gradient summed over context and divided once by c
    torch.nn.functional.mse_loss(out, data["y"][:, mine]).backward()
    worst = float((out.detach() - want["out"][:, mine]).abs().max())
    worst = max(worst, float((x.grad - want["dx"][:, mine] * c).abs().max()) / c)  # type: ignore[operator]
    for name, leaf in leaves.items():
        grad = leaf.grad
        assert grad is not None
        dist.all_reduce(grad)  # SPEC §5: partial on context, summed once ...
        grad /= c  # ... and scaled once
        worst = max(worst, float((grad - want[f"d{name}"]).abs().max()))
    return {"rank": rank, "ledger": ledger.entries, "deviation": worst, "pairs": ledger.pairs}
