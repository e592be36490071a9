"""The caching allocator's model (issue 39, item 4: allocated and reserved), on sequences small
enough to work out by hand: each expected value is derived in the comment beside it from the rules
of c10/cuda/CUDACachingAllocator.cpp that ``placement_edu.allocator`` quotes."""

from __future__ import annotations

import pytest

from placement_edu.allocator import (
    LARGE_BUFFER,
    SMALL_BUFFER,
    Allocator,
    allocation_size,
    round_size,
)

pytestmark = pytest.mark.fast

MiB = 2**20


def test_requests_round_up_to_512_bytes_and_small_ones_share_a_2_mib_segment() -> None:
    a = Allocator()
    a.malloc("x", 1)  # round_size: max(512, 512 * ceil(1 / 512)) = 512 B, small pool
    a.malloc("y", 1000)  # 1000 B -> 1024 B, split off the same 2 MiB segment's free rest
    assert (round_size(1), round_size(1000), round_size(513)) == (512, 1024, 1024)
    assert a.requested == 1 + 1000  # what the tensors asked for (what a tracker counts)
    assert a.allocated == 512 + 1024  # torch.cuda.memory_allocated counts the blocks
    assert a.reserved == SMALL_BUFFER == 2 * MiB  # one kSmallBuffer segment holds both


def test_a_large_request_under_10_mib_reserves_20_mib_and_the_next_one_splits_it() -> None:
    a = Allocator()
    a.malloc("x", 3 * MiB)  # 1 MiB < 3 MiB < kMinLargeAlloc (10 MiB): a kLargeBuffer segment
    assert a.reserved == LARGE_BUFFER == 20 * MiB
    a.malloc("y", 5 * MiB)  # best fit: the 17 MiB left (17 MiB > kSmallSize, so it was split)
    assert (a.reserved, a.allocated) == (20 * MiB, 8 * MiB)


def test_from_10_mib_up_a_segment_is_the_request_rounded_to_2_mib_and_a_small_rest_not_split() -> (
    None
):
    a = Allocator()
    size = 11 * MiB + 1  # round_size: 11 MiB + 512 B; get_allocation_size: 12 MiB (kRoundLarge)
    assert allocation_size(round_size(size)) == 12 * MiB
    a.malloc("x", size)
    # remaining = 12 MiB - (11 MiB + 512 B) < kSmallSize (1 MiB): should_split is false in the
    # large pool, so the tensor keeps the whole 12 MiB block and allocated counts all of it
    assert (a.requested, a.allocated, a.reserved) == (size, 12 * MiB, 12 * MiB)


def test_a_freed_block_is_reused_by_best_fit_and_its_rest_split_off() -> None:
    a = Allocator()
    a.malloc("x", 100 * MiB)  # a 100 MiB segment
    a.free("x")  # cached, still reserved
    assert (a.allocated, a.reserved) == (0, 100 * MiB)
    a.malloc("y", 60 * MiB)  # fits the cached block: 60 MiB taken, 40 MiB split off free
    assert a.reserved == 100 * MiB
    a.malloc("z", 50 * MiB)  # the 40 MiB rest is too small: a new 50 MiB segment
    assert (a.reserved, a.peak_allocated) == (150 * MiB, 110 * MiB)


def test_freed_neighbours_merge_so_a_larger_request_fits_where_two_were() -> None:
    a = Allocator()
    a.malloc("x", 100 * MiB)
    a.free("x")
    a.malloc("p", 40 * MiB)  # [p 0..40][free 40..100]
    a.malloc("q", 40 * MiB)  # [p 0..40][q 40..80][free 80..100]
    a.free("p")
    a.free("q")  # q merges with both free neighbours: one free 100 MiB block again
    a.malloc("r", 90 * MiB)  # so 90 MiB fits without a new segment
    assert a.reserved == 100 * MiB


def test_memory_freed_on_one_stream_is_not_reused_by_another() -> None:
    a = Allocator()
    a.malloc("x", 100 * MiB, stream="all-gather")
    a.free("x")  # cached in the all-gather stream's pool
    a.malloc("y", 100 * MiB)  # the default stream's pool is empty: a second 100 MiB segment
    assert (a.peak_allocated, a.reserved) == (100 * MiB, 200 * MiB)
    assert a.reserved_by_pool() == {
        ("all-gather", "large"): 100 * MiB,
        ("default", "large"): 100 * MiB,
    }


def test_an_expandable_segment_grows_by_20_mib_pages_joined_to_its_free_end() -> None:
    a = Allocator(expandable=True)
    a.malloc("x", 30 * MiB)  # ceil(30 / 20) = 2 pages: 40 MiB mapped, 10 MiB free at the end
    assert a.reserved == 40 * MiB
    a.malloc("y", 15 * MiB)  # the free end (10 MiB) is short by 5 MiB: one more page, joined
    assert a.reserved == 60 * MiB  # y at 30..45 MiB, 15 MiB free at the end
    segment, block = a.live["y"]
    assert (block.start, segment.size, len(a.segments)) == (30 * MiB, 60 * MiB, 1)
    # without expandable segments: a 30 MiB segment, then 15 MiB rounded to a 16 MiB one
    b = Allocator()
    b.malloc("x", 30 * MiB)
    b.malloc("y", 15 * MiB)
    assert b.reserved == 46 * MiB


def test_best_fit_takes_the_free_end_of_an_expandable_segment_last() -> None:
    a = Allocator(expandable=True)
    a.malloc("x", 20 * MiB)  # one page, all used
    a.malloc("y", 5 * MiB)  # a second page: y at 20..25 MiB, 15 MiB free at the end
    a.free("x")  # a 20 MiB hole at 0
    a.malloc("z", 4 * MiB)
    # plain best fit would take the smaller 15 MiB end; get_free_block counts the end as large as
    # the segment can grow, so the 20 MiB hole at address 0 is taken, and nothing more mapped
    assert a.live["z"][1].start == 0 and a.reserved == 40 * MiB


def test_a_small_request_grows_the_small_pool_by_2_mib_pages() -> None:
    a = Allocator(expandable=True)
    a.malloc("x", 4)  # 512 B block; the small pool's segment maps one 2 MiB page
    a.malloc("y", 20 * MiB)  # the large pool is a segment of its own: one 20 MiB page
    assert a.reserved_by_pool() == {("default", "small"): 2 * MiB, ("default", "large"): 20 * MiB}
