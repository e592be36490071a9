"""SPEC §4 rule 5, counted: how many times a step reduces its gradients and gathers its
parameters on the batch axes, and the bytes they send, against plain data parallelism's on the
same mesh (what ``plan`` prints as "×m" on every line, and ``--json``'s ``data_axis``).

The schedules are derived at m = 1 and m = 2 and extended affinely in m, as ``pricing``'s
seconds are (``at_micro_batches``, ``cached_schedule``: one derivation per schedule).
"""

from __future__ import annotations

from collections.abc import Container
from fractions import Fraction
from functools import lru_cache

from placement_edu.candidates import compose
from placement_edu.configuration import DataTraffic
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.placement import AXES, BATCH_AXES, State
from placement_edu.precision import Precision
from placement_edu.schedule import REDUCTIONS, OpKind, Schedule, derive_schedule, ring_bytes
from placement_edu.strategies import Strategy
from placement_edu.timing import Hardware
from placement_edu.units import total, weighted_total


@lru_cache(maxsize=4096)  # (every recomputation but full's replay prices the same schedule)
def data_traffic(
    strategy: Strategy, model: TransformerSpec, mesh: Mesh, precision: Precision, hw: Hardware
) -> DataTraffic:
    """SPEC §4 rule 5 counted on rank 0's schedule: the runs per step of its gradient reductions
    and of its parameter all-gathers on the batch axes (0 where there are none; m where a kind's
    bytes grow with m -- more than 1.5× from m = 1 to m = 2, as ``timing.overlapped`` reads it --
    else 1), the ring bytes all its collectives of parameters and gradients on those axes send
    in a step (affine in m, as ``comm_seconds``), and plain dp's on the same mesh: one
    all-reduce of the gradient a step, at any m. zero2 on data=8 at m = 128 reduce-scatters
    128 times and gathers once, 129 × 7/8 of its gradient's bytes against dp's 2 × 7/8: 64.5×.

    Beside them, the pipeline's sends, and the bytes that leave through rank 0's NIC on ``hw``:
    those of every axis whose groups span nodes (``Hardware.spans_nodes``)."""
    m = strategy.micro_batches
    one, two = (_batch_bytes(at_micro_batches(strategy, k), model, mesh, precision) for k in (1, 2))
    dp = compose("dp", mesh, 1, strategy.sequence_parallel)
    plain_dp = _batch_bytes(dp, model, mesh, precision)
    zero = Fraction(0)
    at_m = {k: one.get(k, zero) + (m - 1) * (two.get(k, zero) - one.get(k, zero)) for k in two}

    def runs(kind: str) -> int:
        at1, at2 = (sum((b for (k, _), b in at.items() if k == kind), zero) for at in (one, two))
        return 0 if not at1 else m if at2 > Fraction(3, 2) * at1 else 1

    def summed(kinds: tuple[str, ...], axes: Container[str] = AXES) -> Fraction:
        return total([zero, *(b for (k, a), b in at_m.items() if k in kinds and a in axes)])

    crossing = {axis for axis, n in mesh if n > 1 and hw.spans_nodes(mesh, axis)}
    on_batch = ("reductions", "gathers", "other")
    return DataTraffic(
        runs("reductions"),
        runs("gathers"),
        summed(on_batch),
        sum((b for (k, _), b in plain_dp.items() if k in on_batch), Fraction(0)),
        summed(("pipeline",)),
        summed((*on_batch, "pipeline"), crossing),
        bool(summed(on_batch, crossing)) and "pipeline" in crossing,
        hw.network_link.bandwidth if hw.network_link is not None else None,
    )


@lru_cache(maxsize=4096)  # (one per schedule: every recomputation prices the same one)
def _batch_bytes(
    strategy: Strategy, model: TransformerSpec, mesh: Mesh, precision: Precision
) -> dict[tuple[str, str], Fraction]:
    """Ring bytes per step of the schedule's collectives by (kind, axis): on the batch axes, its
    gradient reductions, its parameter all-gathers and any other collective of parameters or
    gradients (an owner's broadcast; not the context axis' activations, nor the start-up
    broadcast); on the pipeline axis, its sends ("pipeline")."""
    payloads: dict[tuple[str, str, str, int, bool], list[tuple[int, int | Fraction]]] = {}
    for op, times in cached_schedule(strategy, model, mesh, precision).counted():
        if op.once or op.axis is None:
            continue
        if op.axis == "pipeline":
            kind = "pipeline"
        elif op.axis not in BATCH_AXES or op.state is State.ACTIVATIONS:
            continue
        elif op.state is State.GRADS and op.op in REDUCTIONS:
            kind = "reductions"
        elif op.state is State.PARAMS and op.op == OpKind.ALL_GATHER:
            kind = "gathers"
        else:
            kind = "other"
        key = (kind, op.axis, op.op, op.group, op.root)  # (ring bytes: linear in the payload)
        payloads.setdefault(key, []).append((times, op.payload_bytes))
    out: dict[tuple[str, str], list[Fraction]] = {}
    for (kind, axis, collective, group, root), sizes in payloads.items():
        sent = ring_bytes(collective, group, weighted_total(sizes), root)  # Σ times × payload
        out.setdefault((kind, axis), [Fraction(0)]).append(sent)
    return {key: total(sent) for key, sent in out.items()}  # (units.total: sum's value and type)


@lru_cache(maxsize=4096)
def at_micro_batches(strategy: Strategy, micro_batches: int) -> Strategy:
    """``strategy`` at ``micro_batches`` (the m = 1 and m = 2 of every affine extension), built
    once."""
    return strategy.with_(micro_batches=micro_batches)


@lru_cache(maxsize=4096)
def cached_schedule(
    strategy: Strategy, model: TransformerSpec, mesh: Mesh, precision: Precision
) -> Schedule:
    """``derive_schedule``, once per (strategy, model, mesh, precision)."""
    return derive_schedule(strategy, model, mesh, precision)
