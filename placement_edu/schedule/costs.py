"""SPEC §4's cost table: what each kind of op sends over a group of N, in ring bytes and in ZeRO's
convention, and its latency-bound steps (SPEC §9). One table, read by the exact scalar path, the
numpy sweep, the time model and the runtime's ledger; beside it, the kinds of op read from it
(host transfers, collectives, reductions, ...) and the one function that says how many bytes a
device sends (``ring_bytes``, and ``sent_bytes`` for the link it sends them over)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from placement_edu.names import Word


class OpKind(Word):
    """The kinds of op a schedule holds: the collectives and host transfers of the cost table
    below, the receiving end of a send, and the local ops that move nothing but matter for
    correctness (a ``Word``: each equals, hashes and prints as its name, "all_gather")."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND = "send"
    RECV = "recv"
    BROADCAST = "broadcast"
    H2D = "h2d"  # host to device: an offloaded state brought in
    D2H = "d2h"  # device to host: an offloaded state sent out
    SCALE = "scale"  # divide the summed gradient by the number of contributions
    OPTIMIZER_STEP = "optimizer_step"


def _over(numerator: Any, n: Any) -> Any:
    """numerator / n: an exact Fraction for whole numbers, float division for numpy arrays."""
    return Fraction(numerator, n) if isinstance(n, int) else numerator / n


@dataclass(frozen=True)
class OpCost:
    """What one kind of op costs over a group of N (SPEC §4, §9), one row of ``OP_COSTS``.

    ``ring``: bytes one device sends, as a multiple of the payload S. It takes an int N (exact
    Fractions) or a numpy array of N (floats): the scalar derivation and the vectorised sweep read
    this one table. ``zero``: the ZeRO paper's volume convention (all-reduce moves 2S, the others
    S). ``steps``: the latency-bound steps of a ring over N > 1 devices (each one α)."""

    ring: Callable[[Any], Any]
    zero: int
    steps: Callable[[int], int]


OP_COSTS: Mapping[str, OpCost] = MappingProxyType(
    {
        # a reduce-scatter then an all-gather
        OpKind.ALL_REDUCE: OpCost(lambda n: _over(2 * (n - 1), n), 2, lambda n: 2 * (n - 1)),
        # S = the full output
        OpKind.ALL_GATHER: OpCost(lambda n: _over(n - 1, n), 1, lambda n: n - 1),
        # S = the full input
        OpKind.REDUCE_SCATTER: OpCost(lambda n: _over(n - 1, n), 1, lambda n: n - 1),
        # S = this device's buffer (its input; its output is as large): it keeps 1/N of it and
        # sends one block to each of the N-1 others, N-1 pairwise steps (Ulysses' heads <->
        # sequence exchange, Jacobs et al. 2023 §3.2)
        OpKind.ALL_TO_ALL: OpCost(lambda n: _over(n - 1, n), 1, lambda n: n - 1),
        # point to point: S, counted by the sender (its ``recv`` is not in the table: 0 bytes)
        OpKind.SEND: OpCost(lambda n: 1 + 0 * n, 1, lambda n: 1),
        # the root sends S to each of the N-1 others; the message passes N-1 hops, all members wait
        OpKind.BROADCAST: OpCost(lambda n: n - 1, 1, lambda n: n - 1),
        # a host transfer crosses the host link, not the network: no ring bytes, one message
        OpKind.H2D: OpCost(lambda n: 0 * n, 0, lambda n: 1),
        OpKind.D2H: OpCost(lambda n: 0 * n, 0, lambda n: 1),
    }
)


def _rounds(n: int) -> int:
    """⌈log2 n⌉: the rounds of a binomial tree over n ranks (each round doubles the holders)."""
    return (n - 1).bit_length()


#: How each collective library broadcasts (SPEC §9), as the time model prices it. The
#: ``broadcast`` row above is the bytes convention the schedule and the runtime's ledger count: a
#: star, the root sending S to each of the N - 1 others. The libraries do better:
#: - "gloo": ``gloo::broadcast`` (what PyTorch's ProcessGroupGloo calls) is a binomial tree: in
#:   each of ⌈log2 N⌉ rounds every rank holding the message sends it to one more;
#: - "nccl": a ring, pipelined in chunks: every rank but the last forwards S once, N - 1 hops.
#: Every member waits for the last copy, so each prices the whole broadcast: ``ring`` counts the
#: S-sized messages one after another on its longest path, ``steps`` its hops.
BROADCASTS: Mapping[str, OpCost] = MappingProxyType(
    {
        "nccl": OpCost(lambda n: 1 + 0 * n, 1, lambda n: n - 1),
        "gloo": OpCost(_rounds, 1, _rounds),
    }
)
#: The collective libraries the time model prices (``timing.Hardware.collectives``).
LIBRARIES: tuple[str, ...] = tuple(BROADCASTS)
#: Two columns of ``OP_COSTS`` for the network collectives, as notebook 01 prints them.
RING_FACTOR = MappingProxyType({op: c.ring for op, c in OP_COSTS.items() if c.zero})
ZERO_FACTOR = MappingProxyType({op: c.zero for op, c in OP_COSTS.items() if c.zero})

# The kinds of op, read from the table; every other op of a schedule (scale, optimizer_step) is
# local and moves nothing.
#: Over the host link (offloaded state, SPEC §7): the rows that move no network bytes.
HOST_TRANSFERS = frozenset(op for op, c in OP_COSTS.items() if not c.zero)
#: Over the network: the rows that do, and ``recv``, the receiving end of a ``send``.
COLLECTIVES = frozenset(op for op, c in OP_COSTS.items() if c.zero) | {OpKind.RECV}
#: Every op that crosses a link, network or host: what a runtime's ledger records.
LINK_OPS = COLLECTIVES | HOST_TRANSFERS
#: The collectives that sum gradients over a batch-splitting axis (SPEC §5): all-reduce leaves the
#: sum on every device, reduce-scatter each owner's slice of it.
REDUCTIONS = frozenset({OpKind.ALL_REDUCE, OpKind.REDUCE_SCATTER})
#: The collectives that bring the owners' updated parameters back to every replica after an
#: owner-only step (SPEC §4 rule 2): an all-gather, or each owner's broadcast of its slice.
PARAM_SYNCS = frozenset({OpKind.ALL_GATHER, OpKind.BROADCAST})


def ring_factor(op: str, n: Any) -> Any:
    """Bytes this device sends for ``op`` as a multiple of its payload (recv: counted by the
    sender; a broadcast: by its root, see ``ring_bytes``; local ops: nothing). An int N gives an
    exact Fraction, a numpy array of N floats (the sweep)."""
    if op not in OP_COSTS:
        return Fraction(0)
    return _exact_ring_factor(op, n) if isinstance(n, int) else OP_COSTS[op].ring(n)


@lru_cache(maxsize=1024)  # (a plan prices the same few ops on the same groups many times)
def _exact_ring_factor(op: str, n: int) -> Fraction:
    return Fraction(OP_COSTS[op].ring(n))


def ring_bytes(op: str, n: Any, payload_bytes: Any, root: bool = True) -> Any:
    """Bytes one device sends over the network for ``op`` on a payload of S bytes over a group of
    ``n`` (SPEC §4): the ring factor times S. A broadcast is sent by its root alone, (N-1)·S: its
    receivers (``root`` False) send nothing; so does a recv (its send counts) and a host transfer
    (it crosses the host link, not the network)."""
    if op == OpKind.BROADCAST and not root:
        return 0
    return ring_factor(op, n) * payload_bytes


def sent_bytes(
    op: str, n: Any, payload_bytes: Any, root: bool = True, library: str | None = None
) -> Any:
    """Bytes one device puts on the link ``op`` runs over, as the time model prices them
    (SPEC §9): a collective's ring bytes on the network, a host transfer's payload on the host
    link.
    ``library`` (``LIBRARIES``) prices a broadcast as that library runs it (``BROADCASTS``: the
    bytes on its longest path, root or not); None, as the star of the ``broadcast`` row."""
    if op == OpKind.BROADCAST and library is not None:
        return BROADCASTS[library].ring(n) * payload_bytes
    return payload_bytes if op in HOST_TRANSFERS else ring_bytes(op, n, payload_bytes, root)
