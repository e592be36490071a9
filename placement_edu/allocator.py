"""A model of PyTorch's CUDA caching allocator: why *reserved* memory exceeds *allocated* memory.

``torch.cuda.max_memory_allocated()`` counts the blocks handed to tensors; ``nvidia-smi``,
torchtitan's logs and most published tables show ``max_memory_reserved()``: the memory the
allocator took from the GPU and keeps cached. This module replays a sequence of allocations and
frees through the rules of ``c10/cuda/CUDACachingAllocator.cpp`` (read at pytorch/pytorch commit
001074d; the quoted lines below are that file's) and reports both peaks. Sizes are bytes.

The rules, each a function or a method below:

- every request is rounded up to a multiple of 512 B (``round_size``);
- requests of at most 1 MiB come from the *small* pool, larger ones from the *large* pool;
- each pool is kept per stream: a block freed on one stream is reused only by requests on that
  stream (a tensor allocated on FSDP2's all-gather stream never lends its memory to the default
  stream's activations);
- a request takes the smallest free block of its pool and stream that fits (best fit), and the
  rest of the block is split off as a free block when large enough (``should_split``);
- a freed block merges with free neighbours of its segment;
- with no block that fits, a new segment is reserved: 2 MiB for a small request, 20 MiB for a
  large one under 10 MiB, else the request rounded up to 2 MiB (``allocation_size``); or, with
  ``expandable_segments:True`` (torchtitan's launch sets it), the stream's one segment of that pool
  grows at its end by whole pages of 2 MiB (small pool) or 20 MiB (large pool).

Not modelled: returning memory (``empty_cache``, or the retry after an out-of-memory), which a
training step does not do; ``max_split_size_mb`` and ``roundup_power2_divisions`` (both off by
default); CUDA graphs' private pools; ``record_stream`` (FSDP2 does not use it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placement_edu.errors import expect

# The constants, as CUDACachingAllocator.cpp states them:
#   constexpr size_t kMinBlockSize = 512; // all sizes are rounded to at least 512 bytes
#   constexpr size_t kSmallSize = 1048576; // largest "small" allocation is 1 MiB
#   constexpr size_t kSmallBuffer = 2097152; // "small" allocations are packed in 2 MiB blocks
#   const size_t kLargeBuffer = 20971520; // "large" allocations may be packed in 20 MiB blocks
#   constexpr size_t kMinLargeAlloc =
#       10485760; // allocations between 1 and 10 MiB may use kLargeBuffer
#   constexpr size_t kRoundLarge = 2097152; // round up large allocations to 2 MiB
MIN_BLOCK = 512
SMALL_SIZE = 1_048_576
SMALL_BUFFER = 2_097_152
LARGE_BUFFER = 20_971_520
MIN_LARGE_ALLOC = 10_485_760
ROUND_LARGE = 2_097_152


def round_size(size: int) -> int:
    """The block a request of ``size`` bytes takes: a multiple of 512 B, at least 512 B
    (``round_size``: ``kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize)``)."""
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def is_small(size: int) -> bool:
    """Whether a (rounded) request comes from the small pool (``get_pool``: ``size <=
    kSmallSize``)."""
    return size <= SMALL_SIZE


def allocation_size(size: int) -> int:
    """The segment ``cudaMalloc`` reserves for a request no cached block fits, without expandable
    segments (``get_allocation_size``): 2 MiB for a small one, 20 MiB below 10 MiB, else the
    request rounded up to 2 MiB."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def page_size(small: bool) -> int:
    """The page an expandable segment grows by: "we use 2MiB pages for our small pool and 20MiB
    pages for our large pool" (Note [Expandable Segments])."""
    return SMALL_BUFFER if small else LARGE_BUFFER


def should_split(remaining: int, small: bool, expandable: bool) -> bool:
    """Whether the ``remaining`` bytes of a chosen block are split off as a free block
    (``should_split``): in the small pool or under expandable segments when at least 512 B
    remain; in the large pool otherwise only when more than 1 MiB remains (else the request keeps
    the whole block, and the allocated bytes count it)."""
    if small or expandable:
        return remaining >= MIN_BLOCK
    return remaining > SMALL_SIZE


@dataclass(eq=False)  # a block is itself: two free blocks of one size are not the same block
class Block:
    """A piece of a segment: ``start`` (offset in its segment) and ``size`` bytes; allocated or
    free. ``requested``: the bytes the tensor asked for (0 when free). ``prev`` and ``next``: its
    neighbours in the segment, as the C++ ``Block`` links them."""

    start: int
    size: int
    allocated: bool = False
    requested: int = 0
    prev: Block | None = field(default=None, repr=False)
    next: Block | None = field(default=None, repr=False)


@dataclass(eq=False)
class Segment:
    """Memory reserved from the GPU for one stream and pool: ``size`` bytes, split into blocks
    linked in address order from offset 0 to ``last``. An expandable segment grows at its end."""

    stream: str
    small: bool
    size: int = 0
    last: Block | None = None


@dataclass
class Allocator:
    """The caching allocator's state and its three peaks (bytes): ``requested`` (what tensors asked
    for: what ``FSDPMemTracker`` and ``peak.derive`` count), ``allocated`` (their blocks, rounded:
    ``torch.cuda.max_memory_allocated``), ``reserved`` (the segments: ``max_memory_reserved``)."""

    expandable: bool = False
    segments: list[Segment] = field(default_factory=list)
    live: dict[object, tuple[Segment, Block]] = field(default_factory=dict)
    cached: dict[Block, Segment] = field(default_factory=dict)  # the free blocks
    requested: int = 0
    allocated: int = 0
    reserved: int = 0
    peak_requested: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0

    def malloc(self, key: object, size: int, stream: str = "default") -> None:
        """Allocate ``size`` bytes on ``stream`` for the tensor named ``key``."""
        expect(size > 0 and key not in self.live, f"cannot allocate {key!r} ({size} B) twice")
        rounded = round_size(size)
        small = is_small(rounded)
        found = self._best_fit(rounded, stream, small) or self._reserve(rounded, stream, small)
        segment, block = found
        del self.cached[block]
        remaining = block.size - rounded
        if should_split(remaining, small, self.expandable):  # the rest: a free block after it
            rest = Block(block.start + rounded, remaining, prev=block, next=block.next)
            self._link(segment, rest)
            self.cached[rest] = segment
            block.size = rounded
        block.allocated, block.requested = True, size
        self.live[key] = found
        self.requested += size
        self.allocated += block.size
        self.peak_requested = max(self.peak_requested, self.requested)
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: object) -> None:
        """Free the tensor named ``key``: its block returns to its stream's pool, merged with free
        neighbours (``free_block``, ``try_merge_blocks``). Reserved memory stays reserved."""
        segment, block = self.live.pop(key)
        self.requested -= block.requested
        self.allocated -= block.size
        block.allocated, block.requested = False, 0
        for other in (block.next, block.prev):
            if other is not None and not other.allocated:
                low, high = (block, other) if other is block.next else (other, block)
                low.size += high.size
                low.next = high.next
                self._link(segment, low)
                self.cached.pop(high, None)
                block = low
        self.cached[block] = segment

    @staticmethod
    def _link(segment: Segment, block: Block) -> None:
        """Point ``block``'s neighbours (or the segment's end) back at it."""
        if block.prev is not None:
            block.prev.next = block
        if block.next is not None:
            block.next.prev = block
        else:
            segment.last = block

    def _best_fit(self, size: int, stream: str, small: bool) -> tuple[Segment, Block] | None:
        """The smallest free block of this stream's pool that fits, the lowest address first among
        equals (``get_free_block``: ``pool.blocks.lower_bound``, ordered by stream, size,
        address). A free block at the end of an expandable segment counts as large as the
        segment can grow ("for the purposes of "best fit" we consider its size to be the size it
        can expand to"), so it is taken last."""
        fits = [
            (segment.last is b and self.expandable, b.size, b.start, id(segment), b)
            for b, segment in self.cached.items()
            if segment.stream == stream and segment.small == small and b.size >= size
        ]
        if not fits:
            return None
        block = min(fits, key=lambda f: f[:4])[-1]
        return self.cached[block], block

    def _reserve(self, size: int, stream: str, small: bool) -> tuple[Segment, Block]:
        """Memory from the GPU: a new segment (``alloc_block``), or, under expandable segments,
        whole pages at the end of the stream's one segment of that pool, joined to a free block
        already at its end (``try_allocate_expandable_block``, ``map_block``)."""
        segment = next((s for s in self.segments if s.stream == stream and s.small == small), None)
        if segment is None or not self.expandable:
            segment = Segment(stream, small)
            self.segments.append(segment)
        tail = segment.last
        if self.expandable:
            page = page_size(small)
            free_tail = tail.size if tail is not None and not tail.allocated else 0
            grown = -(-(size - free_tail) // page) * page
        else:
            grown = allocation_size(size)
        if tail is not None and not tail.allocated:
            tail.size += grown  # joined to the free block at the end
        else:
            self._link(segment, Block(segment.size, grown, prev=tail))
            self.cached[segment.last] = segment  # type: ignore[index]
        segment.size += grown
        self.reserved += grown
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return segment, segment.last  # type: ignore[return-value]

    def reserved_by_pool(self) -> dict[tuple[str, str], int]:
        """Reserved bytes by (stream, "small" or "large" pool)."""
        out: dict[tuple[str, str], int] = {}
        for s in self.segments:
            k = (s.stream, "small" if s.small else "large")
            out[k] = out.get(k, 0) + s.size
        return out
