"""The orders PyTorch issues its collectives in, each as its source documents it: DDP's gradient
buckets, ZeroRedundancyOptimizer's broadcasts, FSDP2's gathers and reduce-scatters, and
``torch.distributed.pipelining``'s sends and recvs (1F1B, and the looped schedules' lowering).

Plain lists of ints, torch-free: ``implementations.predict`` reshapes the placement's ideal schedule
with them, one documented choice per function.
"""

from __future__ import annotations

from placement_edu.errors import expect
from placement_edu.models import greedy_partition
from placement_edu.schedule import OpKind, looped_order


#: DDP's gradient buckets (torch/nn/parallel/distributed.py): the first step uses one bucket for
#: every parameter; from the second step on, the reducer rebuilds them in the order gradients
#: became ready (reverse parameter order here), closing a bucket once it holds at least its
#: limit: 1 MiB for the first (``dist._DEFAULT_FIRST_BUCKET_BYTES``), then 25 MiB (bucket_cap_mb).
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
DDP_BUCKET_BYTES = 25 * 1024 * 1024


def ddp_buckets(tensor_bytes: list[int], step: int) -> list[int]:
    """Bytes of each bucket DDP all-reduces at ``step``, in order; ``tensor_bytes`` in parameter
    order."""
    if step == 0:
        return [sum(tensor_bytes)]
    buckets, current, limit = [], 0, DDP_FIRST_BUCKET_BYTES
    for size in reversed(tensor_bytes):
        current += size
        if current >= limit:
            buckets.append(current)
            current, limit = 0, DDP_BUCKET_BYTES
    return buckets + [current] * (current > 0)


def zero_redundancy_broadcasts(tensor_elements: list[int], n: int) -> list[tuple[int, int]]:
    """(owner, elements) of each broadcast ``ZeroRedundancyOptimizer._sync_params`` issues after the
    step: owner by owner, each owner's tensors largest first (its partition keeps the sorted
    order)."""
    owners = greedy_partition(tensor_elements, n)
    order = sorted(range(len(tensor_elements)), key=lambda i: (-tensor_elements[i], i))
    return [(r, tensor_elements[i]) for r in range(n) for i in order if owners[i] == r]


def fsdp2_order(units: int, reshard: bool | None) -> list[tuple[OpKind, int]]:
    """FSDP2's collectives for an MLP whose Linears 0..L-2 are each ``fully_shard``-ed and whose
    root owns the last Linear (unit L-1), as ("all_gather" | "reduce_scatter", unit) in order.

    Forward: the root's pre-forward gathers its own unit first, then each child as it runs.
    Backward, in reverse: a unit resharded after forward is gathered again, and the next one is
    prefetched before the current one computes; a unit is reduce-scattered when backward reaches
    its inputs -- except units whose inputs need no gradient (the root, whose input is the batch,
    and the first Linear), which wait for the final callback, root first. ``reshard``: True
    reshards every unit, False none, None every unit but the root (FSDP2's default)."""
    root, last = units - 1, units - 1
    regathered = [u for u in range(units) if reshard or (reshard is None and u != root)]
    ops = [(OpKind.ALL_GATHER, root)] + [(OpKind.ALL_GATHER, u) for u in range(units - 1)]
    backward = [root] + list(range(last - 1, -1, -1))  # the root's Linear runs last, so first back
    gathered: set[int] = set()

    def gather(u: int) -> None:
        if u in regathered and u not in gathered:
            ops.append((OpKind.ALL_GATHER, u))
            gathered.add(u)

    for k, u in enumerate(backward):
        gather(u)
        if k + 1 < len(backward):
            gather(backward[k + 1])  # backward prefetch of the next unit
        if u not in (root, 0):
            ops.append((OpKind.REDUCE_SCATTER, u))
    return (
        ops + [(OpKind.REDUCE_SCATTER, root)] + ([(OpKind.REDUCE_SCATTER, 0)] if units > 1 else [])
    )


def torch_1f1b_order(stages: int, stage: int, m: int) -> list[tuple[str, str, int]]:
    """(op, pass, micro-batch) of each send and recv ``Schedule1F1B._step_microbatches`` issues on
    ``stage``: min(m, p - stage) warm-up forwards (the textbook's p - stage - 1 and its first
    steady-state forward: the same compute order; the last warm-up forward's send waits to go out
    together with the first backward's recv), then
    backward / forward pairs whose sends and recvs are fired together, then the cool-down."""
    first, last = stage == 0, stage == stages - 1
    recv_f = lambda k: [] if first else [(OpKind.RECV, "forward", k)]  # noqa: E731
    send_f = lambda k: [] if last else [(OpKind.SEND, "forward", k)]  # noqa: E731
    recv_b = lambda k: [] if last else [(OpKind.RECV, "backward", k)]  # noqa: E731
    send_b = lambda k: [] if first else [(OpKind.SEND, "backward", k)]  # noqa: E731
    warmup = min(m, stages - stage)
    ops: list[tuple[str, str, int]] = []
    for k in range(warmup):
        ops += recv_f(k) + (send_f(k) if k != warmup - 1 else [])
    f, b, pending = warmup, 0, send_f(warmup - 1)
    while True:
        ops += pending + recv_b(b)
        sends, b = send_b(b), b + 1
        if f == m:
            break
        ops += sends + recv_f(f)
        pending, f = send_f(f), f + 1
    ops += sends
    for k in range(b, m):
        ops += recv_b(k) + send_b(k)
    return ops


def torch_1f1b(
    ideal: list[tuple[str, int, int]], stages: int, stage: int, m: int
) -> list[tuple[str, int, int]]:
    """The ideal 1F1B schedule's sends and recvs (each one boundary activation, or its gradient,
    of the same size) in the order ``Schedule1F1B`` issues them on ``stage``."""
    size = ideal[0][1]
    return [(op, size, stages) for op, _, _ in torch_1f1b_order(stages, stage, m)]


#: torch's runtime keeps at most this many stages unsharded at once (``_add_unshard_reshard``'s
#: ``max_active_stages``): its UNSHARD / RESHARD actions take their turns in the lowering below.
TORCH_ACTIVE_STAGES = 3


def _torch_actions(
    stages: int, rank: int, m: int, virtual_stages: int, zero_bubble: bool
) -> list[tuple[str, int, int]]:
    """``looped_order`` as torch's runtime holds it before adding communication: an UNSHARD of
    each of the next ``TORCH_ACTIVE_STAGES`` stages before the pass that needs it and a RESHARD
    of each stage no longer among them (``_add_unshard_reshard``; without FSDP they do nothing but
    take a turn), and a REDUCE_GRAD after a stage's m-th full backward or weight pass
    (``_add_reduce_grad``). Bookkeeping actions are ("-", stage, -1)."""
    passes = looped_order(stages, rank, m, virtual_stages, zero_bubble)
    out: list[tuple[str, int, int]] = []
    active: list[int] = []
    taken: dict[int, int] = {}
    for i, (kind, stage, k) in enumerate(passes):
        upcoming: list[int] = []
        for _, s, _ in passes[i:]:
            if s not in upcoming:
                upcoming.append(s)
                if len(upcoming) == TORCH_ACTIVE_STAGES:
                    break
        out += [("-", s, -1) for s in active if s not in upcoming]  # RESHARD
        out += [("-", s, -1) for s in upcoming if s not in active]  # UNSHARD
        active = [s for s in active if s in upcoming] + [s for s in upcoming if s not in active]
        out.append((kind, stage, k))
        if kind in ("B", "W"):
            taken[stage] = taken.get(stage, 0) + 1
            if taken[stage] == m:
                out.append(("-", stage, -1))  # REDUCE_GRAD
    return out + [("-", s, -1) for s in active]  # the last RESHARDs


def torch_looped_order(
    stages: int, m: int, virtual_stages: int = 1, zero_bubble: bool = False
) -> list[list[tuple[str, str, int]]]:
    """Per rank, (op, pass, micro-batch) of each send and recv torch's ``ScheduleInterleaved1F1B``
    / ``ScheduleInterleavedZeroBubble`` issue, as ``_add_send_recv`` lowers their passes: round
    by round, each rank places its next action if its input is there (its own recv placed, or the
    stage before / after is its own); a forward of a stage before the last places its send, and
    the receiving rank's recv at the end of that rank's list; likewise a backward (B or I) of a
    stage after the first. Stage s sits on rank s mod p."""
    p, v = stages, virtual_stages
    last = v * p - 1
    queues = {r: _torch_actions(p, r, m, v, zero_bubble) for r in range(p)}
    lowered: dict[int, list[tuple[str, str, int]]] = {r: [] for r in range(p)}
    seen: dict[int, set[tuple[str, int, int]]] = {r: set() for r in range(p)}
    backward = "I" if zero_bubble else "B"

    def ready(r: int, kind: str, s: int, k: int) -> bool:
        if kind == "F" and s != 0:
            return ("recv F", s, k) in seen[r] or ("F", s - 1, k) in seen[r]
        if kind == backward and s != last:
            return ("recv B", s, k) in seen[r] or (backward, s + 1, k) in seen[r]
        return True

    while queues:
        moved = False
        for r in sorted(queues):
            kind, s, k = queues[r][0]
            if not ready(r, kind, s, k):
                continue
            seen[r].add((kind, s, k))
            forward = kind == "F" and s != last
            if forward or (kind == backward and s != 0):
                phase, to = ("forward", s + 1) if forward else ("backward", s - 1)
                lowered[r].append((OpKind.SEND, phase, k))
                lowered[to % p].append((OpKind.RECV, phase, k))
                seen[to % p].add(("recv " + phase[0].upper(), to, k))
            queues[r].pop(0)
            if not queues[r]:
                del queues[r]
            moved = True
        expect(moved, f"torch's lowering deadlocks at p = {p}, m = {m}, v = {v}")
    return [lowered[r] for r in range(p)]
