"""The values a schedule is made of: ``Op`` (one operation on one device), ``Repeat`` (identical
micro-batch passes held once with their count) and ``Schedule`` (a step's operations in order,
with its totals: ring bytes, ZeRO volume, host-link bytes, by axis)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction

from placement_edu.placement import STARTUP
from placement_edu.errors import expect
from placement_edu.models import Number
from placement_edu.placement import State
from placement_edu.schedule.costs import COLLECTIVES, HOST_TRANSFERS, OP_COSTS, ring_bytes


#: The micro-batches an op belongs to: () for the step as a whole, (k,) for micro-batch k, or the
#: ``range`` of micro-batches a repeated op stands for.
Tag = tuple[int, ...] | range


@dataclass(frozen=True)
class Op:
    """One scheduled operation on one device.

    ``elements``: for a collective, S in SPEC §4's sense (all-gather: the full output; reduce-
    scatter: the full input; all-reduce: the tensor; send/recv/broadcast: the message), padding
    included. ``element_bytes``: bytes per element of that state under the precision preset.
    ``group``: the size of the axis group it runs over (1 for local ops); for ``scale``, the
    divisor (the number of ranks whose contributions were summed).
    ``micro_batches``: for an op that belongs to one micro-batch (a pipeline send or recv; a
    gradient reduction or scale that runs once per micro-batch), that micro-batch, ``(k,)``; ()
    means the step as a whole (e.g. the gradient accumulated over every micro-batch). In a
    ``Repeat`` it is the ``range`` of micro-batches, one per repetition.
    ``stale``: a gather that returns the previous step's slices (the stale-gather fault, SPEC §5).
    ``root``: for a broadcast, this device is its root (it sends; the others receive).
    """

    op: str
    state: State
    axis: str | None
    phase: str
    elements: Number
    element_bytes: int
    group: int = 1
    why: str = ""
    micro_batches: Tag = ()
    stale: bool = False
    root: bool = False

    @property
    def is_collective(self) -> bool:
        return self.op in COLLECTIVES

    @property
    def once(self) -> bool:
        """Done once, at start-up, not per step: it costs no per-step bytes or time."""
        return self.phase == STARTUP

    def key(self) -> tuple:
        """What a measurement sees of the op, and what "measured = predicted" compares."""
        return (
            self.op,
            str(self.state),
            self.axis,
            self.phase,
            self.payload_bytes,
            self.ring_bytes,
            self.group,
        )

    def describe(self) -> str:
        return (
            f"{self.phase} {self.op} {self.state} on {self.axis} (group "
            f"{self.group}){self.for_micro_batches}: {self.payload_bytes} B payload, "
            f"{self.ring_bytes} B sent"
        )

    @property
    def for_micro_batches(self) -> str:
        """ " for micro-batch 3", " for micro-batches 0..99" (a repeated op), or ""."""
        ks = self.micro_batches
        if not ks:
            return ""
        one = ks[0] == ks[-1]  # (a range: no len() beyond 2^63)
        return f" for micro-batch {ks[0]}" if one else f" for micro-batches {ks[0]}..{ks[-1]}"

    @property
    def payload_bytes(self) -> Number:
        return self.elements * self.element_bytes

    @property
    def ring_bytes(self) -> Number:
        """Exact bytes this device sends for the op per step (what a measurement sees)."""
        return 0 if self.once else ring_bytes(self.op, self.group, self.payload_bytes, self.root)

    @property
    def zero_volume_elements(self) -> Number:
        """Elements moved in the ZeRO paper's convention (all-reduce counts 2S)."""
        if self.once:
            return 0
        return OP_COSTS[self.op].zero * self.elements if self.op in OP_COSTS else 0


#: The most operations ``Schedule.ops`` lists one by one (a display's list, a runtime's comparison).
#: The totals never need the list: they read each repeated op once, times its count.
MAX_LISTED_OPS = 100_000


@dataclass(frozen=True)
class Repeat:
    """A run of identical micro-batch passes, held once: ``ops`` run ``times`` times in a row.

    An op of the run that belongs to a micro-batch holds the ``range`` of them, one per
    repetition (``Schedule.ops`` gives repetition i the micro-batch ``range[i]``). A pipeline of
    m micro-batches is then a handful of entries, not a list that grows with m."""

    ops: tuple[Op, ...]
    times: int

    def expand(self) -> Iterator[Op]:
        for i in range(self.times):
            for o in self.ops:
                yield (
                    replace(o, micro_batches=(o.micro_batches[i],))
                    if isinstance(o.micro_batches, range)
                    else o
                )


@dataclass(frozen=True)
class Schedule:
    """The ordered operations of one optimizer step on one device, plus start-up and warnings.

    ``entries``: operations, and runs of identical micro-batch passes held once (``Repeat``).
    ``ops`` lists them one by one (up to ``MAX_LISTED_OPS``); the totals read each entry once."""

    entries: tuple[Op | Repeat, ...]
    warnings: tuple[str, ...] = ()

    def counted(self) -> Iterator[tuple[Op, int]]:
        """Each operation once, with how many times it runs in a row: (op, 1), or (op, times)
        for an op of a ``Repeat`` (its ``micro_batches`` the range it stands for)."""
        for e in self.entries:
            if isinstance(e, Repeat):
                yield from ((o, e.times) for o in e.ops)
            else:
                yield e, 1

    @property
    def length(self) -> int:
        """How many operations the step runs, repeats counted (``len(ops)`` without listing
        them)."""
        return sum(times for _, times in self.counted())

    @property
    def ops(self) -> tuple[Op, ...]:
        """Every operation, one by one, in execution order; refused above ``MAX_LISTED_OPS``."""
        n = self.length
        expect(
            n <= MAX_LISTED_OPS,
            f"this step runs {n:,} operations (repeated once per micro-batch); listing them one by "
            f"one stops at {MAX_LISTED_OPS:,}: read the totals (ring_bytes, host_link_bytes, "
            "volume_psi) or counted(), which holds each repeated operation once with its count",
        )
        return tuple(
            o for e in self.entries for o in (e.expand() if isinstance(e, Repeat) else (e,))
        )

    def edited(self, edit: Callable[[tuple[Op, ...]], tuple[Op, ...]]) -> "Schedule":
        """The schedule with ``edit`` (ops -> ops, op by op, e.g. a fault) applied to every stretch
        of single ops and to the body of every repeated run."""
        out: list[Op | Repeat] = []
        single: list[Op] = []
        for e in self.entries + (None,):
            if isinstance(e, Op):
                single.append(e)
                continue
            out += edit(tuple(single))
            single = []
            if isinstance(e, Repeat):
                out.append(Repeat(edit(e.ops), e.times))
        return Schedule(tuple(out), self.warnings)

    @property
    def per_step(self) -> tuple[Op, ...]:
        return tuple(o for o in self.ops if not o.once)

    @property
    def collectives(self) -> tuple[Op, ...]:
        return tuple(o for o in self.per_step if o.is_collective)

    @property
    def ring_bytes(self) -> Number:
        return sum((o.ring_bytes * n for o, n in self.counted() if not o.once), 0)

    @property
    def host_link_bytes(self) -> Number:
        """Bytes moved between this device and its host per step (offloaded state, SPEC §7):
        their own total, never counted as network ring bytes."""
        return sum(
            (
                o.payload_bytes * n
                for o, n in self.counted()
                if not o.once and o.op in HOST_TRANSFERS
            ),
            0,
        )

    def volume_psi(self, psi: int) -> Number:
        """Per-step volume in units of Ψ elements, ZeRO convention (dp: 2, zero3: 3)."""
        return Fraction(sum((o.zero_volume_elements * n for o, n in self.counted()), 0), psi)

    def differences(self, other: "Schedule") -> list[str]:
        """The entries where this schedule and ``other`` (e.g. predicted and measured) differ, by
        ``Op.key``; the first difference is named, then a count. Empty when they agree."""
        mine, theirs = [o.key() for o in self.ops], [o.key() for o in other.ops]
        if mine == theirs:
            return []
        at = next(
            (i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs))
        )
        left = self.ops[at].describe() if at < len(mine) else "nothing"
        right = other.ops[at].describe() if at < len(theirs) else "nothing"
        return [
            f"entry {at} of {max(len(mine), len(theirs))}: {left} vs {right}"
            + (f" ({len(mine)} vs {len(theirs)} entries)" if len(mine) != len(theirs) else "")
        ]

    def ring_bytes_by_axis(self) -> dict[str, Number]:
        out: dict[str, Number] = {}
        for o, n in self.counted():
            if not o.once and o.axis is not None and o.is_collective:
                out[o.axis] = out.get(o.axis, 0) + o.ring_bytes * n
        return out
