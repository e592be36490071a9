"""The communication ledger: every collective the runtime issues goes through here (SPEC §7).

Each wrapper does the real ``torch.distributed`` call and records one ``Entry``: the op, the
training state it moves, the mesh axis, the payload S in SPEC §4's sense (all-gather: the full
output; reduce-scatter: the full input; all-reduce: the tensor; send/recv: the message; all-to-all:
this rank's buffer) read from the tensor actually passed, and the ring bytes this rank sends for
it (SPEC §4's exact ring formula on that payload). Host transfers of offloaded state (h2d, d2h)
are recorded the same way.

A collective that does not complete within the process group's timeout raises
``CollectiveTimeout`` naming the op, so a hung run ends with a message, not silence.

Time (SPEC §9): ``seconds[step]`` sums the wall time (``time.perf_counter``) this rank spent inside
the step's collectives and host copies -- waiting for the other ranks included. Time is measured
beside the ledger, never in it: an ``Entry`` (what "measured = predicted" compares) has no time.
"""

from __future__ import annotations

import os
import time
from array import array
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Callable, TypeVar

import torch
import torch.distributed as dist

from placement_edu.placement import STARTUP
from placement_edu.schedule import OpKind, ring_bytes

# torch >= 2.7 names the tensor-in, tensor-out collectives *_single; older versions *_tensor.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


#: What a wrapped ``torch.distributed`` call returns (``_run`` passes it through).
R = TypeVar("R")


class CollectiveTimeout(RuntimeError):
    """A collective waited longer than the run's timeout: some rank never joined it."""


@dataclass(frozen=True)
class Entry:
    """One measured operation on one rank. Bytes are exact integers."""

    step: int  # -1 for start-up
    phase: str
    op: str
    state: str
    axis: str | None
    group: int  # ranks in the group (1 for host transfers)
    payload_bytes: int
    ring_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


class Comm:
    """Collectives with a ledger. ``groups`` maps a mesh axis to (process group, group ranks).
    ``beacon``: a file this rank keeps saying "in" while it waits in a collective, "out" otherwise:
    when a run fails, a rank that wrote no error and was not waiting in a collective is the one
    that stopped first (the launcher's report names it)."""

    def __init__(
        self,
        groups: dict[str, tuple[object, list[int]]],
        timeout_s: float,
        beacon: str | None = None,
    ) -> None:
        self.groups = groups
        self.timeout_s = timeout_s
        self._beacon = os.open(beacon, os.O_WRONLY | os.O_CREAT) if beacon else None
        # The ledger, kept compact (``ledger``): start-up, and each step whose entries differ from
        # the step before; ``repeats`` lists the runs of steps [first, last] that issued exactly
        # the entries of the step before them, which are not kept -- so a run of any length holds
        # a few steps' entries, not one per step.
        self.entries: list[Entry] = []
        self.repeats: list[list[int]] = []
        self._step_began = 0  # where the current step's entries begin in ``entries``
        self._last: tuple = (-1, ())  # the step before, and its entries without their step
        self.step, self.phase = -1, STARTUP
        self._pending_sends: list = []
        # Per step, seconds inside collectives (8-byte doubles: flat in a long run); start-up apart.
        self.seconds = array("d")
        self.startup_seconds = 0.0

    def at(self, step: int, phase: str) -> None:
        """Label the entries that follow with ``step`` and ``phase``."""
        if step != self.step:
            self._close_step()
        self.step, self.phase = step, phase

    def _close_step(self) -> None:
        """The current step is over: drop its entries if they repeat the step before's."""
        if self.step < 0:  # start-up: always kept
            self._step_began = len(self.entries)
            return
        mine = tuple(
            (e.phase, e.op, e.state, e.axis, e.group, e.payload_bytes, e.ring_bytes)
            for e in self.entries[self._step_began :]
        )
        if self._last == (self.step - 1, mine):
            del self.entries[self._step_began :]
            if self.repeats and self.repeats[-1][1] == self.step - 1:
                self.repeats[-1][1] = self.step
            else:
                self.repeats.append([self.step, self.step])
        self._last = (self.step, mine)
        self._step_began = len(self.entries)

    def ledger(self) -> tuple[list[dict], list[list[int]]]:
        """(the entries kept, as dicts; the runs of repeated steps): ``result.expand_ledger``
        gives back every entry of every step, in issue order."""
        self._close_step()
        self.step, self._last = -2, (-1, ())  # (closed: a later ``at`` starts afresh)
        return [e.to_dict() for e in self.entries], [list(r) for r in self.repeats]

    def _record(
        self,
        op: str,
        state: str,
        axis: str | None,
        n: int,
        tensor: torch.Tensor,
        sends: bool = True,
    ) -> None:
        payload = tensor.numel() * tensor.element_size()
        # ``sends``: False for a broadcast's receivers (only its root sends: (n - 1) x S).
        ring = 0 if self.phase == STARTUP else ring_bytes(op, n, payload, root=sends)
        assert Fraction(ring).denominator == 1, "ring bytes of an equal-chunk collective are whole"
        self.entries.append(Entry(self.step, self.phase, op, state, axis, n, payload, int(ring)))

    def _clock(self, began: float) -> None:
        """Add the time since ``began`` to this step's seconds in communication."""
        spent = time.perf_counter() - began
        if self.step < 0:
            self.startup_seconds += spent
            return
        if len(self.seconds) <= self.step:
            self.seconds.extend([0.0] * (self.step + 1 - len(self.seconds)))
        self.seconds[self.step] += spent

    def step_seconds(self, steps: int) -> array[float]:
        """Seconds inside collectives in each of the first ``steps`` steps (0.0 where none)."""
        out = self.seconds[:steps]
        out.extend([0.0] * (steps - len(out)))
        return out

    def _mark(self, where: bytes) -> None:
        if self._beacon is not None:
            os.pwrite(self._beacon, where, 0)

    def _run(
        self, op: str, axis: str | None, call: Callable[..., R], *args: object, **kwargs: object
    ) -> R:
        began = time.perf_counter()
        result = self._wait(op, axis, call, *args, **kwargs)
        self._clock(began)
        return result

    def _wait(
        self, op: str, axis: str | None, call: Callable[..., R], *args: object, **kwargs: object
    ) -> R:
        """``call``, with the beacon saying "in" meanwhile, and a timeout or a lost peer reported
        as ``CollectiveTimeout``, naming the op, the axis and where the run was."""
        self._mark(b"in ")
        try:
            result = call(*args, **kwargs)
            self._mark(b"out")
            return result
        except RuntimeError as error:
            text = str(error).lower()
            where = f"{op} on the {axis} axis (step {self.step}, {self.phase})"
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            if "timed out" in text or "timeout" in text:
                raise CollectiveTimeout(
                    f"{where} did not complete within {self.timeout_s:g} s: another rank never "
                    f"joined it -- it hung or skipped the call. Underlying error: {first}"
                ) from error
            if "connection closed" in text or "reset by peer" in text:
                raise CollectiveTimeout(
                    f"{where} lost its peer: another rank exited (its own error comes first in "
                    f"the report). Underlying error: {first}"
                ) from error
            raise

    def _group(self, axis: str) -> tuple[object, list[int]]:
        return self.groups[axis]

    # --- collectives ------------------------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor, state: str, axis: str) -> None:
        group, ranks = self._group(axis)
        self._record(OpKind.ALL_REDUCE, state, axis, len(ranks), tensor)
        self._run(OpKind.ALL_REDUCE, axis, dist.all_reduce, tensor, group=group)

    def reduce_scatter(self, out: torch.Tensor, full: torch.Tensor, state: str, axis: str) -> None:
        group, ranks = self._group(axis)
        self._record(OpKind.REDUCE_SCATTER, state, axis, len(ranks), full)
        self._run(OpKind.REDUCE_SCATTER, axis, _reduce_scatter, out, full, group=group)

    def all_gather(self, full: torch.Tensor, mine: torch.Tensor, state: str, axis: str) -> None:
        group, ranks = self._group(axis)
        self._record(OpKind.ALL_GATHER, state, axis, len(ranks), full)
        self._run(OpKind.ALL_GATHER, axis, _all_gather, full, mine, group=group)

    def all_to_all(self, out: torch.Tensor, blocks: torch.Tensor, state: str, axis: str) -> None:
        """Equal blocks along dim 0: block i of ``blocks`` goes to rank i of the ``axis`` group,
        block i of ``out`` comes from it (S = this rank's buffer; it keeps 1/N, sends the rest)."""
        group, ranks = self._group(axis)
        self._record(OpKind.ALL_TO_ALL, state, axis, len(ranks), blocks)
        self._run(OpKind.ALL_TO_ALL, axis, dist.all_to_all_single, out, blocks, group=group)

    def broadcast(self, tensor: torch.Tensor, state: str, axis: str, root: int = 0) -> None:
        """Rank ``root`` of the ``axis`` group (0: its first) sends ``tensor`` to the others."""
        group, ranks = self._group(axis)
        self._record(
            OpKind.BROADCAST, state, axis, len(ranks), tensor, sends=dist.get_rank() == ranks[root]
        )
        self._run(OpKind.BROADCAST, axis, dist.broadcast, tensor, src=ranks[root], group=group)

    def control(self, flag: torch.Tensor, group: object) -> None:
        """Rank 0 of ``group`` sends ``flag`` to the others: a control message (a warm pool's
        cancel check, ``worker._cancel_check``), not the training's communication: out of the
        ledger and of the steps' time, but waited for like any collective (``_wait``)."""
        self._wait("cancel check", "run", dist.broadcast, flag, src=0, group=group)

    def send(self, tensor: torch.Tensor, dst: int, state: str, axis: str) -> None:
        """Non-blocking: a pipeline stage sends and moves on (blocking sends deadlock 1F1B, where
        neighbours send to each other at the same time); ``wait_sends`` completes them."""
        self._record(OpKind.SEND, state, axis, len(self._group(axis)[1]), tensor)
        tensor = tensor.contiguous()
        self._pending_sends.append((self._run(OpKind.SEND, axis, dist.isend, tensor, dst), tensor))

    def recv(self, tensor: torch.Tensor, src: int, state: str, axis: str) -> None:
        self._record(OpKind.RECV, state, axis, len(self._group(axis)[1]), tensor)
        work = self._run(OpKind.RECV, axis, dist.irecv, tensor, src)
        assert work is not None  # torch answers None only to a rank outside the group
        self._run(OpKind.RECV, axis, work.wait)

    def wait_sends(self) -> None:
        for work, _tensor in self._pending_sends:  # the tensor stays alive until sent
            self._run(OpKind.SEND, "pipeline", work.wait)
        self._pending_sends.clear()

    # --- host transfers of offloaded state ------------------------------------------------
    def d2h(self, dst: torch.Tensor, src: torch.Tensor, state: str) -> None:
        self._record(OpKind.D2H, state, "data", 1, src)
        began = time.perf_counter()
        dst.copy_(src)
        self._clock(began)

    def h2d(self, dst: torch.Tensor, src: torch.Tensor, state: str) -> None:
        self._record(OpKind.H2D, state, "data", 1, src)
        began = time.perf_counter()
        dst.copy_(src)
        self._clock(began)
