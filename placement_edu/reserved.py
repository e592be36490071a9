"""The reserved peak of a real model's step, estimated: ``peak.derive``'s step replayed through the
caching allocator's model (``placement_edu.allocator``). Bytes; GiB = 2^30 bytes where shown.

``derive`` gives the *allocated* peak: the bytes live at every event of the step, exact against
PyTorch's ``FSDPMemTracker``. What a GPU's allocator *reserves* is more, for three reasons this
replay accounts for:

1. rounding: every block is a multiple of 512 B, and memory is taken from the GPU in segments or
   pages of 2 or 20 MiB;
2. per-stream pools: FSDP2 allocates on three streams, and memory freed on one is never reused by
   another. Each stream's pool keeps its own high-water mark, so the reserved peak is close to the
   *sum* of each stream's peak, not the peak of their sum. In torch 2.13's
   ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``: the all-gather output is
   allocated under ``device_handle.stream(all_gather_copy_in_stream)``; the reduce-scatter
   *output*, which the sharded gradients are views of (``torch.as_strided(reduce_output, ...)``),
   under ``device_handle.stream(reduce_scatter_stream)``; the reduce-scatter input, the gathered
   parameters (copied out in ``wait_for_unshard``), activations and optimizer states on the
   default stream;
3. fragmentation in the sequence's own order, including the first step's: Adam creates m and v
   lazily, inside the first ``optimizer.step()`` (torch.optim.Adam's ``_init_group``), when the
   activations' memory is free, so they take part of it, and the second step's activations need
   that much more. The replay runs three steps; the reserved peak is the largest reserved (it never
   shrinks: no ``empty_cache`` during training).

The sequence is ``derive``'s own events, not a trace: persistent states, gathered parameters,
collective buffers, sharded gradients and Adam's states and temporaries are allocated tensor by
tensor (each tensor of the model, sharded as FSDP2 stores it); what a block keeps for backward is
one allocation per block; the rest of each event's activations and temporaries is one allocation,
made at the event and freed at the next. At each event what is no longer live is freed first; then
a unit's gathered parameters are allocated before the activations its compute makes, so every
block's parameters reuse the hole the block before left (and at the loss's backward that hole is
one the larger tensors cannot use). The blocks' forward events before the last one (which
``derive`` does not list: their live sets are below the last one's) are placed as the last one is.
So the replay's requested peak equals ``derive``'s peak to the byte, and the reserved estimate
counts what the rounding, the streams and this order cost. What it cannot know is the finer
fragmentation of a real trace (the many temporaries inside each module), the margin measured on a
GPU (``benchmarks/bench_reserved_cuda.py``).
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from placement_edu.allocator import Allocator
from placement_edu.architectures import Architecture, get_architecture
from placement_edu.errors import expect
from placement_edu.fsdp_storage import chunk_rows, fsdp_precision, held_rows
from placement_edu.peak import (
    ACTIVATIONS_AND_TEMPORARIES,
    ALL_GATHER_BUFFER,
    BLOCK_GATHERED,
    OPTIMIZER,
    OPTIMIZER_TEMPORARIES,
    PERSISTENT_TERMS,
    REDUCE_SCATTER_BUFFER,
    ROOT_GATHERED,
    ROOT_GRADIENTS,
    SHARDED_GRADS,
    Checkpoints,
    Event,
    FSDPPrecision,
    GRADS,
    PARAMS,
    SHARDED_PARAMS,
    StepPeak,
    derive,
    fsdp2_applies,
)

#: The streams FSDP2 allocates on (module docstring), by the term of ``derive``'s events.
STREAM_OF_TERM: Mapping[str, str] = {
    ALL_GATHER_BUFFER: "all-gather copy-in",
    SHARDED_GRADS: "reduce-scatter",
}
DEFAULT_STREAM = "default"
#: The two events of the root unit the replay adds to ``derive``'s (``Replay.root_gather``,
#: ``Replay.root_reduce``), and the name of the embedding's backward, after which the root reduces.
ROOT_FORWARD, ROOT_BACKWARD = (
    "forward, the root's all-gather",
    "backward, the root's reduce-scatter",
)
EMBEDDING = "backward, embedding"
BUFFERS_OF_THE_ROOT = (ALL_GATHER_BUFFER, REDUCE_SCATTER_BUFFER)
#: Terms allocated first at an event: a unit's parameters are gathered before the compute that
#: uses them makes its activations (``move_to``; the rest in ``derive``'s order).
GATHERED = (ROOT_GATHERED, BLOCK_GATHERED, ALL_GATHER_BUFFER)
#: Terms whose tensors are the same at every event where their bytes are (split once).
SAME_EVERY_EVENT = PERSISTENT_TERMS | {OPTIMIZER_TEMPORARIES, ROOT_GATHERED}
#: Steps replayed: the first (Adam's states made lazily in its optimizer step), then two more.
STEPS = 3
#: The deepest model the replay estimates: it replays each block's allocations (about 1 ms a block,
#: three steps), so its cost grows with the layers; the deepest dense models published have 126
#: blocks (Llama 3.1 405B). Deeper ones get no estimate, said in one line (``fit``'s JSON and text).
MAX_LAYERS = 256
#: The allocator setting ``fit`` estimates under: torchtitan's launch, and what PyTorch's
#: out-of-memory message advises ("try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True").
ALLOCATOR = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
#: What the estimate is, in a line (printed beside it).
SOURCE = (
    "derive's step replayed through a model of PyTorch's caching allocator "
    "(placement_edu.allocator): 512 B blocks in 2 and 20 MiB pages, a pool per stream, best fit, "
    "3 steps; a real trace's finer fragmentation is measured only on a GPU"
)


@dataclass(frozen=True)
class ReservedEstimate:
    """The replay's three peaks (bytes): ``requested`` (what tensors asked for: ``derive``'s
    peak), ``allocated`` (blocks, rounded to 512 B), ``reserved`` (the estimate); ``by_pool``:
    reserved bytes by (stream, pool) at the end; ``expandable``: the allocator's setting."""

    requested: int
    allocated: int
    reserved: int
    by_pool: Mapping[tuple[str, str], int]
    expandable: bool


@dataclass(frozen=True)
class Tensors:
    """Elements of each parameter tensor on this rank: ``stored`` (FSDP2's padded shard),
    ``held`` (the rows it really holds: Adam's m and v are ``zeros_like`` these) and
    ``unsharded`` (N padded chunks, as an all-gather fills them), for the root's tensors and one
    block's."""

    root_stored: tuple[int, ...]
    root_held: tuple[int, ...]
    root_unsharded: tuple[int, ...]
    block_stored: tuple[int, ...]
    block_held: tuple[int, ...]
    block_unsharded: tuple[int, ...]


def tensors(arch: Architecture, devices: int, rank: int) -> Tensors:
    """Each tensor's elements on rank ``rank`` of ``devices`` (``fsdp_storage``'s rules, per
    tensor)."""
    before, after = arch.root_tensors()

    def sizes(shapes: list[tuple[str, tuple[int, ...]]]) -> tuple[tuple[int, ...], ...]:
        stored, held, gathered = [], [], []
        for _, shape in shapes:
            per_row, c = math.prod(shape[1:]), chunk_rows(shape[0], devices)
            stored.append(c * per_row)
            held.append(held_rows(shape[0], devices, rank) * per_row)
            gathered.append(devices * c * per_row)
        return tuple(stored), tuple(held), tuple(gathered)

    return Tensors(*sizes(before + after), *sizes(arch.block_tensors()))


def estimate(*derive_args: Any, expandable: bool = True, **derive_kwargs: Any) -> ReservedEstimate:
    """The reserved peak of ``derive``'s step, replayed ``STEPS`` times through the caching
    allocator's model. It takes ``derive``'s own arguments (``derive_args``, ``derive_kwargs``:
    they are declared once, there), plus ``expandable``: ``PYTORCH_CUDA_ALLOC_CONF=
    expandable_segments:True`` (torchtitan's ``run_llama_train.sh`` sets it)."""
    given = inspect.signature(derive).bind(*derive_args, **derive_kwargs)
    given.apply_defaults()
    step = derive(*given.args, **given.kwargs)
    named = given.arguments  # derive's arguments by their names, defaults filled in
    arch, prec = get_architecture(named["arch"]), fsdp_precision(named["precision"])
    profile, devices, rank = named["profile"], named["devices"], named["rank"]
    every, full = named["every_kth"] or (0, profile)
    replay = Replay(
        Allocator(expandable),
        step,
        tensors(arch, devices, rank),
        prec,
        Checkpoints(profile, full, every, arch.layers),
        fsdp2_applies(devices, prec.name),
    )
    for first in [True] + [False] * (STEPS - 1):
        replay.step(first)
    a = replay.allocator
    return ReservedEstimate(
        a.peak_requested, a.peak_allocated, a.peak_reserved, a.reserved_by_pool(), expandable
    )


#: A tensor of an event's live set: a name that stays the same while it lives, and its bytes.
Piece = tuple[tuple, int]
#: An event's live tensors by term, each term with the stream it is allocated on.
Live = dict[str, tuple[list[Piece], str]]


def block_of(e: Event) -> int | None:
    """The block an event of ``derive`` is in ("forward, block 31", "backward, block 7"), else
    None."""
    match = re.search(r", block (\d+)$", e.name)
    return int(match.group(1)) if match else None


def first_index(events: list[Event], where: Callable[[Event], bool]) -> int:
    """The index of the first event ``where`` holds for (``derive`` lists the last block's forward
    and the embedding's backward for every profile ``fit`` measures)."""
    found = next((i for i, e in enumerate(events) if where(e)), None)
    expect(found is not None, "the profile has no moment for the last block or the embedding")
    return found  # type: ignore[return-value]


@dataclass
class Replay:
    """``derive``'s events as allocations: at each event, the tensors of the last one that are no
    longer live are freed, then the new ones allocated (frees first, as between two snapshots of
    live sets)."""

    allocator: Allocator
    peak: StepPeak
    tensors: Tensors
    prec: FSDPPrecision
    kept: Checkpoints
    fsdp: bool
    count: int = 0  # events replayed: names what is made anew at each event
    memo: dict = field(default_factory=dict)  # the tensors of SAME_EVERY_EVENT's terms
    now: Live = field(default_factory=dict)  # the tensors live at the last event
    blocks_done: bool = False  # this step's backward is past block 0

    @property
    def layers(self) -> int:
        return self.kept.layers

    def step(self, first: bool) -> None:
        """One step: the blocks' forward up to the last one, then ``derive``'s events. In the
        first step Adam's m and v appear only at the optimizer step."""
        events = list(self.peak.events)
        last = first_index(events, lambda e: block_of(e) == self.layers - 1)
        embedding = first_index(events, lambda e: e.name.startswith(EMBEDDING))
        earlier = [self.forward_before(events[last], k) for k in range(self.layers - 1)]
        events = (
            self.root_gather(events[0])
            + events[:last]
            + earlier
            + events[last : embedding + 1]
            + self.root_reduce(events[embedding])
            + events[embedding + 1 :]
        )
        self.blocks_done = False
        for e in events:
            if first and e.phase != "step":
                e = Event(e.name, e.phase, {k: v for k, v in e.terms.items() if k != OPTIMIZER})
            self.move_to(self.pieces(e))
            self.blocks_done |= e.phase == "backward" and block_of(e) == 0

    def forward_before(self, last: Event, k: int) -> Event:
        """Block k's forward, placed as the last block's (``derive``'s ``forward, block L-1``):
        blocks 0 .. k-1 kept instead of 0 .. L-2 (and, unresharded, 0 .. k gathered)."""
        terms, fewer = dict(last.terms), self.kept.before(self.layers - 1) - self.kept.before(k)
        terms[ACTIVATIONS_AND_TEMPORARIES] -= fewer
        if terms.get(BLOCK_GATHERED):
            terms[BLOCK_GATHERED] = self.block_bytes() * (k + 1 if self.unresharded(last) else 1)
        return Event(f"forward, block {k}", last.phase, terms)

    def root_gather(self, first: Event) -> list[Event]:
        """The root's all-gather at the start of forward, which ``derive`` does not list (the
        live set is small then): its output, on the all-gather stream, as large as the root's
        gathered parameters."""
        if not first.terms.get(ALL_GATHER_BUFFER):
            return []
        base = {k: v for k, v in first.terms.items() if k in PERSISTENT_TERMS}
        root = first.terms[ROOT_GATHERED]
        return [
            Event(ROOT_FORWARD, "forward", {**base, ROOT_GATHERED: root, ALL_GATHER_BUFFER: root})
        ]

    def root_reduce(self, embedding: Event) -> list[Event]:
        """The root's reduce-scatter after the embedding's backward, which ``derive`` does not
        list: its parameters resharded, its gradients copied into the reduce-scatter input (on
        the default stream), its sharded gradients made (on the reduce-scatter stream)."""
        if not embedding.terms.get(REDUCE_SCATTER_BUFFER):
            return []
        t, p = self.tensors, self.prec
        terms = {k: v for k, v in embedding.terms.items() if k in PERSISTENT_TERMS}
        terms[ROOT_GRADIENTS] = embedding.terms.get(ROOT_GRADIENTS, 0)
        terms[REDUCE_SCATTER_BUFFER] = sum(t.root_unsharded) * p.reduce
        terms[SHARDED_GRADS] = (sum(t.root_stored) + self.layers * sum(t.block_stored)) * p.reduce
        return [Event(ROOT_BACKWARD, "backward", terms)]

    def block_bytes(self) -> int:
        return sum(self.tensors.block_unsharded) * self.prec.compute

    def unresharded(self, e: Event) -> bool:
        return e.terms.get(BLOCK_GATHERED, 0) > self.block_bytes()

    def move_to(self, wanted: Live) -> None:
        """From the live tensors of the last event to ``wanted``, term by term: free what is no
        longer live, then allocate what is new (a term whose tensors are unchanged is skipped)."""
        a = self.allocator
        for term, (parts, _) in self.now.items():
            new = wanted.get(term, ([], ""))[0]
            if new is not parts:
                still = {name for name, _ in new}
                for name in [n for n, _ in parts if n not in still and n in a.live]:
                    a.free(name)
        for term, (parts, stream) in sorted(wanted.items(), key=lambda t: t[0] not in GATHERED):
            if self.now.get(term, ([], ""))[0] is not parts:
                for name, size in parts:
                    if name not in a.live and size:
                        a.malloc(name, size, stream)
        self.now = wanted
        self.count += 1

    def pieces(self, e: Event) -> Live:
        """The tensors live at event ``e``, by term, each term with its stream."""
        out = {}
        for term, value in e.terms.items():
            stream = STREAM_OF_TERM.get(term, DEFAULT_STREAM) if self.fsdp else DEFAULT_STREAM
            same = term in SAME_EVERY_EVENT
            parts = self.memo.get((term, value)) if same else None
            if parts is None:
                parts = self.split(term, value, e)
                if sum(size for _, size in parts) != value:  # (a term this replay cannot split)
                    parts = [((term, self.count), value)]
                if same:
                    self.memo[term, value] = parts
            out[term] = (parts, stream)
        return out

    def split(self, term: str, value: int, e: Event) -> list[Piece]:
        """Term ``term`` of event ``e`` as named tensors (bytes summing to ``value``)."""
        t, L, p, k = self.tensors, self.layers, self.prec, block_of(e)
        held = list(t.root_held) + list(t.block_held) * L
        if term in (SHARDED_PARAMS, PARAMS):
            stored = list(t.root_stored) + list(t.block_stored) * L
            return [(("param", i), n * p.storage) for i, n in enumerate(stored)]
        if term == OPTIMIZER:  # zeros_like each parameter's shard, m then v; the step scalars
            mv = [((s, i), n * p.storage) for i, n in enumerate(held) for s in ("m", "v")]
            return mv + [(("step", i), 4) for i in range(len(held))]
        if term == OPTIMIZER_TEMPORARIES:  # foreach: sqrt(v), one tensor per parameter
            return [(("adam temporary", i), n * p.storage) for i, n in enumerate(held)]
        if term == ROOT_GATHERED:
            return [((ROOT_GATHERED, i), n * p.compute) for i, n in enumerate(t.root_unsharded)]
        if term == BLOCK_GATHERED:  # the running block, and those kept gathered below it
            top = L - 1 if k is None else k
            blocks = range(top + 1 - value // self.block_bytes(), top + 1)
            return [
                ((BLOCK_GATHERED, j, i), n * p.compute)
                for j in blocks
                for i, n in enumerate(t.block_unsharded)
            ]
        if e.name in (ROOT_FORWARD, ROOT_BACKWARD) and term in BUFFERS_OF_THE_ROOT:
            return [((term, "root"), value)]
        if term == ALL_GATHER_BUFFER:  # forward: block k's; backward: the prefetch of k - 1's
            backward = e.phase == "backward"
            return [(("all-gather", e.phase, (L if k is None else k) - backward), value)]
        if term == REDUCE_SCATTER_BUFFER:  # the last one issued: block k + 1's (0's after)
            return [(("reduce-scatter input", 0 if k is None else k + 1), value)]
        if term in (SHARDED_GRADS, GRADS):  # a unit's at a time: the blocks L-1 down, the root
            unit = sum(t.block_stored) * (p.reduce if self.fsdp else p.storage)
            done = [(("gradient", L - 1 - j), unit) for j in range(min(L, value // unit))]
            rest = value - unit * len(done)
            return done + ([(("gradient", "root"), rest)] if rest else [])
        if term == ACTIVATIONS_AND_TEMPORARIES:
            kept = [
                (("kept by block", j), self.kept.before(j + 1) - self.kept.before(j))
                for j in self.kept_blocks(e, k)
            ]
            rest = value - sum(size for _, size in kept)
            return kept + [((ACTIVATIONS_AND_TEMPORARIES, self.count), rest)]
        # the gradients being made, the root's gradients, the loss, the inputs, the buffers: one
        # tensor each, the same while its bytes are
        return [((term, value), value)]

    def kept_blocks(self, e: Event, k: int | None) -> range:
        """The blocks whose kept activations are live at ``e``: those before block k during its
        forward or backward; all L between the blocks' forward and backward; none after."""
        if k is not None:
            return range(k)
        return range(0 if self.blocks_done else self.layers)
