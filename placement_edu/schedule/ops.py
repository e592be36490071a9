"""The values a schedule is made of: ``Op`` (one operation on one device), ``Repeat`` (identical
micro-batch passes, or equal units, held once with their count) and ``Schedule`` (a step's
operations in order, with its totals: ring bytes, ZeRO volume, host-link bytes, by axis)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from fractions import Fraction
from typing import Any

from placement_edu.placement import STARTUP
from placement_edu.errors import MAX_LISTED_OPS, expect
from placement_edu.models import Number
from placement_edu.placement import State
from placement_edu.schedule.costs import (
    COLLECTIVES,
    HOST_TRANSFERS,
    LINK_OPS,
    OP_COSTS,
    OpKind,
    ring_bytes,
)
from placement_edu.shown import Shown
from placement_edu.units import fmt_bytes, plain


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

    op: OpKind
    state: State
    axis: str | None
    phase: str
    elements: Number
    element_bytes: Number
    group: int = 1
    why: str = ""
    micro_batches: Tag = ()
    stale: bool = False
    root: bool = False

    def __post_init__(self) -> None:
        """The op's kind as an ``OpKind`` (a name of it is accepted): a misspelt kind is an error
        here, not an op no rule ever matches."""
        if not isinstance(self.op, OpKind):
            known = [kind.value for kind in OpKind]
            expect(self.op in known, f"unknown op {self.op!r}; known: {', '.join(known)}")
            object.__setattr__(self, "op", OpKind(self.op))

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


@dataclass(frozen=True)
class Repeat:
    """A run held once: ``ops`` run ``times`` times in a row. Two kinds of run, said by ``unit``:

    - a run of identical micro-batch passes (``unit`` False). An op of the run that belongs to a
      micro-batch holds the ``range`` of them, one per repetition (``Schedule.ops`` gives
      repetition i the micro-batch ``range[i]``). A pipeline of m micro-batches is then a handful
      of entries, not a list that grows with m.
    - a run of equal units inside one pass (``unit`` True): the same collectives on k layers (or
      blocks) of one size, one after the other. 10^12 layers are one entry, not 10^12. Inside a
      run of passes, its ops' micro-batches are the enclosing run's."""

    ops: tuple[Op | Repeat, ...]
    times: int
    unit: bool = False

    def expand(self, k: int | None = None) -> Iterator[Op]:
        """The ops one by one; ``k``: the repetition of the enclosing run of passes, if any."""
        for i in range(self.times):
            rep = k if self.unit else i
            for o in self.ops:
                if isinstance(o, Repeat):
                    yield from o.expand(rep)
                elif rep is not None and isinstance(o.micro_batches, range):
                    yield replace(o, micro_batches=(o.micro_batches[rep],))
                else:
                    yield o


def held(ops: list[Op], times: int) -> list[Op | Repeat]:
    """``ops`` done for ``times`` equal units in a row (layers, blocks): the ops themselves for
    one unit, else one run of units held once (``Repeat(..., unit=True)``); none for no ops."""
    if times == 1 or not ops:
        return list(ops)
    return [Repeat(tuple(ops), times, unit=True)]


def _counted(
    entries: tuple[Op | Repeat, ...], units: int, passes: int
) -> Iterator[tuple[Op, int, int]]:
    """Each op once, with the equal units it runs on and the micro-batch passes that repeat it."""
    for e in entries:
        if isinstance(e, Op):
            yield e, units, passes
        elif e.unit:
            yield from _counted(e.ops, units * e.times, passes)
        else:
            yield from _counted(e.ops, units, passes * e.times)


def _listed_units(entries: tuple[Op | Repeat, ...], passes: int) -> Iterator[tuple[Op, int]]:
    """Each op of each unit in order (a run of units listed one by one), with the micro-batch
    passes that repeat it."""
    for e in entries:
        if isinstance(e, Op):
            yield e, passes
        elif e.unit:
            for _ in range(e.times):
                yield from _listed_units(e.ops, passes)
        else:
            yield from _listed_units(e.ops, passes * e.times)


def _unit_listing_length(entries: tuple[Op | Repeat, ...]) -> int:
    """How many rows ``_listed_units`` gives: runs of units counted, runs of passes held once."""
    return sum(
        1 if isinstance(e, Op) else (e.times if e.unit else 1) * _unit_listing_length(e.ops)
        for e in entries
    )


def _edited(
    entries: tuple[Op | Repeat, ...], edit: Callable[[tuple[Op, ...]], tuple[Op, ...]]
) -> tuple[Op | Repeat, ...]:
    out: list[Op | Repeat] = []
    single: list[Op] = []
    for e in entries + (None,):
        if isinstance(e, Op):
            single.append(e)
            continue
        out += edit(tuple(single))
        single = []
        if isinstance(e, Repeat):
            out.append(Repeat(_edited(e.ops, edit), e.times, e.unit))
    return tuple(out)


@dataclass(frozen=True)
class Schedule(Shown):
    """The ordered operations of one optimizer step on one device, plus start-up and warnings.

    ``entries``: operations, and runs held once (``Repeat``): of identical micro-batch passes, and
    inside a pass of equal units (layers). ``ops`` lists them one by one (up to
    ``MAX_LISTED_OPS``); the totals read each entry once, so they cost what the description
    costs, not what the step runs."""

    entries: tuple[Op | Repeat, ...]
    warnings: tuple[str, ...] = ()

    def counted(self) -> Iterator[tuple[Op, int]]:
        """Each operation once, with how many times it runs in a step: (op, 1), or (op, times)
        for an op of a run -- of micro-batch passes (its ``micro_batches`` the range it stands
        for), of equal units, or both (the two counts multiplied)."""
        return iter(self._counted)

    @cached_property
    def _counted(self) -> tuple[tuple[Op, int], ...]:
        """``counted``'s pairs, walked once (a plan reads each schedule's three times: its
        seconds, those on the critical path, rule 5's bytes)."""
        return tuple((o, units * passes) for o, units, passes in _counted(self.entries, 1, 1))

    def held(self) -> Iterator[tuple[Op, int, int]]:
        """Each operation once, with the two counts ``counted`` multiplies: (op, units, passes),
        the equal units in a row it runs on and the micro-batch passes that repeat it."""
        yield from _counted(self.entries, 1, 1)

    def by_unit(self) -> Iterator[tuple[Op, int]]:
        """Each operation of each unit in order, a run of equal units listed unit by unit, with
        how many micro-batch passes repeat it (what ``Report.to_dict`` prints); refused above
        ``MAX_LISTED_OPS`` rows (``counted`` holds any number of units)."""
        n = _unit_listing_length(self.entries)
        expect(
            n <= MAX_LISTED_OPS,
            f"this step has {n:,} operations once its runs of equal units (layers) are listed one "
            f"by one; listing them stops at {MAX_LISTED_OPS:,}: the totals answer without the list "
            "(the text table; Schedule.counted(), which holds a run of units once with its count)",
        )
        yield from _listed_units(self.entries, 1)

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
            f"this step runs {n:,} operations (repeated per micro-batch and per unit); "
            f"listing them one by one stops at {MAX_LISTED_OPS:,}: read the totals "
            "(ring_bytes, host_link_bytes, volume_psi) or counted(), which holds each repeated "
            "operation once with its count",
        )
        return tuple(
            o for e in self.entries for o in (e.expand() if isinstance(e, Repeat) else (e,))
        )

    def edited(self, edit: Callable[[tuple[Op, ...]], tuple[Op, ...]]) -> "Schedule":
        """The schedule with ``edit`` (ops -> ops, op by op, e.g. a fault) applied to every stretch
        of single ops and to the body of every run, passes and units alike."""
        return Schedule(_edited(self.entries, edit), self.warnings)

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

    def op_lines(self) -> list[tuple[str, str]]:
        """(label, value) rows, one per collective or host transfer; a run of equal units or a
        repeated micro-batch pass once, with its counts."""
        rows = []
        for o, units, passes in self.held():
            if o.op in LINK_OPS:
                cost = "once, not per step" if o.once else f"{fmt_bytes(o.ring_bytes)} ring"
                count = ", ".join(
                    f"×{times:,}, one per {what}"
                    for times, what in ((units, "unit"), (passes, "micro-batch"))
                    if times > 1
                )
                count = f" ({count})" if count else ""
                rows.append(
                    (
                        f"{o.phase} {o.op} {o.state.value} on {o.axis}{o.for_micro_batches}",
                        f"{fmt_bytes(o.payload_bytes)} payload, {cost}{count} -- {o.why}",
                    )
                )
        return rows

    def __str__(self) -> str:
        rows = self.op_lines() + [("ring bytes per step", fmt_bytes(self.ring_bytes))]
        if self.host_link_bytes:
            rows.append(("host link per step", fmt_bytes(self.host_link_bytes)))
        rows += [("warning", w) for w in self.warnings]
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)

    def to_dict(self) -> dict[str, Any]:
        """Bytes, exact: the step's ring bytes (by axis), its host-link bytes and each op once,
        with how many times in a row it runs ("times"; a repeated micro-batch pass) and the
        micro-batches it runs for ("micro_batches": first and last)."""
        return {
            "ring_bytes": plain(self.ring_bytes),
            "ring_bytes_by_axis": {a: plain(v) for a, v in self.ring_bytes_by_axis().items()},
            "host_link_bytes": plain(self.host_link_bytes),
            "schedule": [
                {
                    "op": o.op,
                    "state": o.state.value,
                    "axis": o.axis,
                    "phase": o.phase,
                    "payload_bytes": plain(o.payload_bytes),
                    "ring_bytes": plain(o.ring_bytes),
                    "group": o.group,
                    "times": times,
                    "why": o.why,
                    **(
                        {"micro_batches": [o.micro_batches[0], o.micro_batches[-1]]}
                        if o.micro_batches
                        else {}
                    ),
                    **({"root": True} if o.root else {}),
                }
                for o, times in self.by_unit()
            ],
            "warnings": list(self.warnings),
        }
