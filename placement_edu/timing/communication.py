"""Collectives' time: α·steps + bytes / W (SPEC §9).

- ``ring_steps``       how many latency-bound steps a ring collective takes
- ``op_time``          α·steps + ring bytes / W for one operation of a derived schedule
- ``op_link``          the link an operation runs over (where its group's ranks sit)
- ``on_critical_path`` tensor parallelism's collectives, which compute waits for
- ``comm_time``        the seconds of a whole schedule, per phase (forward, backward, step)
- ``startup_time``     the start-up operations, booked once per run
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from placement_edu.errors import expect
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import Number
from placement_edu.placement import PHASES, State
from placement_edu.schedule import (
    BROADCASTS,
    HOST_TRANSFERS,
    OP_COSTS,
    Op,
    OpKind,
    Schedule,
    sent_bytes,
)
from placement_edu.timing.hardware import Hardware, Link

#: The passes a step's time is split into: the step's phases; "step" is the optimizer step (its
#: compute is not modelled).
PASSES: tuple[str, ...] = PHASES


# --- collectives: α·steps + bytes / W (SPEC §9) -----------------------------------------------
def ring_steps(op: str, n: int, library: str | None = None) -> int:
    """SPEC §9: the latency-bound steps of ``op`` over a group of ``n`` (``library``: a broadcast
    as that library runs it, ``schedule.BROADCASTS``: NCCL's ring N-1, gloo's tree ⌈log2 N⌉).

    all-reduce 2(N-1) (a reduce-scatter then an all-gather); all-gather, reduce-scatter N-1;
    send 1 (one message); recv 0 (the transfer is priced once, at the sender, as its bytes are:
    SPEC §4); broadcast N-1 (a ring broadcast passes the message down N-1 hops, and every member
    of the group waits for it, root or not); a host transfer (h2d, d2h) 1, one message over the
    host link, on a "group" of one device. Local ops (scale, optimizer_step) and collectives over
    one device take none. The steps are a column of the core's one cost table,
    ``schedule.OP_COSTS``."""
    if op not in OP_COSTS or (n <= 1 and op not in HOST_TRANSFERS):
        return 0
    if op == OpKind.BROADCAST and library is not None:
        return BROADCASTS[library].steps(n)
    return OP_COSTS[op].steps(n)


def op_time(op: Op, link: Link, library: str | None = None) -> float:
    """Seconds one device spends on ``op`` over ``link``: α·steps + bytes / W (SPEC §9).

    The bytes are the ones this device sends (``schedule.sent_bytes``: the ring bytes of SPEC §4;
    a host transfer: its payload over the host link). A broadcast: as ``library`` runs it (NCCL's
    ring: every member waits N-1 hops and S/W; gloo's binomial tree: ⌈log2 N⌉ rounds of α + S/W),
    or with None the star the schedule counts (the root sends (N-1)·S). Start-up ops (once, not
    per step: ``startup_time``) and local ops cost 0 s."""
    return 0.0 if op.once else _alpha_beta(op, link, library)


def _alpha_beta(op: Op, link: Link, library: str | None) -> float:
    size = op.elements
    whole = isinstance(size, (int, Fraction))
    numerator, denominator = (size.numerator, size.denominator) if whole else (size, 1)
    parts = (op.element_bytes, op.root, library, link.alpha_s, link.bandwidth)
    return _seconds(op.op, op.group, numerator, denominator, *parts)


@lru_cache(maxsize=4096)  # (a plan prices a few hundred distinct ops some 30,000 times)
def _seconds(
    kind: OpKind,
    group: int,
    numerator: Number,
    denominator: int,
    element_bytes: int,
    root: bool,
    library: str | None,
    alpha_s: float,
    bandwidth: float,
) -> float:
    """α·steps + sent bytes / W of one op, by what it reads of the op and its link: the op's size
    as a numerator and a denominator (an int and an equal Fraction are one key; a Fraction
    hashes slowly), the link's α and W (a Link hashes its every field)."""
    elements = numerator if denominator == 1 else Fraction(numerator, denominator)
    sent = sent_bytes(kind, group, elements * element_bytes, root, library)
    return alpha_s * ring_steps(kind, group, library) + float(sent) / bandwidth


def op_link(op: Op, hw: Hardware, mesh: Mesh) -> Link | None:
    """The link ``op`` runs over: the host link for h2d/d2h; for a collective, the link of its
    axis' groups on ``mesh`` (``Hardware.axis_link``: where the ranks sit); None for a local op."""
    if op.op in HOST_TRANSFERS:
        expect(
            hw.host_link is not None,
            f"hardware {hw.name!r} has no host link, but the schedule moves offloaded state "
            f"({op.op}); give it host_link=Link(...) (PCIe)",
        )
        return hw.host_link
    if op.is_collective and op.axis is not None:
        return hw.axis_link(mesh, op.axis)
    return None


def on_critical_path(op: Op) -> bool:
    """SPEC §9: tensor parallelism's collectives of activations (Megatron's g and f all-reduces,
    sequence parallelism's all-gathers and reduce-scatters) sit on the critical path: the next
    matmul needs their result, so no compute of the same micro-batch runs under them, unless the
    implementation splits the matmuls to overlap them (Megatron's ``--tp-comm-overlap``: the
    "per_pass+tp" overlap model). Gradient reductions and parameter gathers can run beside the
    compute of other layers. On a context axis, Ulysses' all-to-alls wait the same way (attention
    needs the head-split Q, K, V; the next matmul the output sent back), while ring attention's
    K/V chunks travel under the blockwise attention of the chunk in hand (Liu et al. 2023, §3:
    the rounds overlap compute), so they hide like the others. On the expert axis, the MoE
    all-to-alls wait too: the experts need the dispatched tokens, the next layer the combined
    outputs (nothing of the same micro-batch is left to run under them)."""
    if op.state is not State.ACTIVATIONS:
        return False
    return op.axis in ("tensor", "expert") or (op.axis == "context" and op.op == OpKind.ALL_TO_ALL)


def comm_time(
    schedule: Schedule, hw: Hardware, mesh: Mesh | str, critical: bool | None = None
) -> dict[str, float]:
    """Seconds of communication per phase ("forward", "backward", "step") of one optimizer step on
    one device of ``mesh``: the sum of ``op_time`` over the schedule's per-step operations, in that
    phase, each on the link of its axis' groups (``op_link``). ``critical``: True sums only the
    ops ``on_critical_path``, False only the others, None all.

    A step repeats the same operation many times (each layer, each micro-batch): identical
    operations (same op, axis, phase, group and bytes) are priced once and counted -- an operation
    of a repeated micro-batch pass (``Schedule.counted``) with its count."""
    return comm_times(schedule, hw, mesh, (critical,))[0]


def comm_times(
    schedule: Schedule,
    hw: Hardware,
    mesh: Mesh | str,
    criticals: tuple[bool | None, ...],
) -> tuple[dict[str, float], ...]:
    """``comm_time`` for each of ``criticals`` (None, True, False), the schedule read once: each
    selection's ops counted and summed in the order ``comm_time`` alone takes them."""
    counts: list[dict[tuple, list]] = [{} for _ in criticals]
    for op, times in schedule.counted():
        if op.once:
            continue
        on_path, key = None, None
        for critical, grouped in zip(criticals, counts):
            if critical is not None:
                on_path = on_critical_path(op) if on_path is None else on_path
                if on_path != critical:
                    continue
            if key is None:
                size = op.elements  # an int or a Fraction: both have numerator and denominator
                key = (
                    op.op,
                    op.axis,
                    op.phase,
                    op.group,
                    size.numerator,
                    size.denominator,
                    op.element_bytes,
                    op.root,
                )
            if key in grouped:
                grouped[key][1] += times
            else:
                grouped[key] = [op, times]
    mesh = as_mesh(mesh)
    links, library = _links(hw, mesh), hw.collectives
    outs = []
    for grouped in counts:
        out = {phase: 0.0 for phase in PASSES}
        for key, (op, count) in grouped.items():
            kind, axis, phase, group, numerator, denominator, element_bytes, root = key
            if (kind, axis) not in links:
                links[kind, axis] = op_link(op, hw, mesh)
            link = links[kind, axis]
            if link is not None:  # (op_time's seconds: no op here is once)
                parts = (element_bytes, root, library, link.alpha_s, link.bandwidth)
                seconds = _seconds(kind, group, numerator, denominator, *parts)
                out[phase] = out.get(phase, 0.0) + count * seconds
        outs.append(out)
    return tuple(outs)


@lru_cache(maxsize=1024)
def _links(hw: Hardware, mesh: Mesh) -> dict[tuple[OpKind, str | None], Link | None]:
    """The links ``op_link`` finds on ``mesh``, by what it reads of an op (its kind and axis),
    filled as ``comm_times`` asks (a plan asks them for thousands of schedules of one mesh)."""
    return {}


def startup_time(schedule: Schedule, hw: Hardware, mesh: Mesh | str) -> float:
    """Seconds of the start-up operations (SPEC §4 rule 4: replicated parameters broadcast once,
    so that the replicas start identical), booked once per run, never per step: ``comm_time``
    and ``step_time`` leave them out, each priced as ``hw``'s library runs it."""
    mesh = as_mesh(mesh)
    once = [op for op, _ in schedule.counted() if op.once]
    return sum(
        _alpha_beta(op, link, hw.collectives) for op in once if (link := op_link(op, hw, mesh))
    )
