"""The Llama-3-8B shape (s = 4096, b = 1) predicted against PyTorch's own accounting, live: FSDP2 at
N = 8, rank 0 (FSDP2's bf16 mixed precision: ``tracker_cases.SUITE``), and FSDP2
without resharding after forward at N = 8 on its widths at ``BLOCKS`` blocks
(``tests/tracker_cases.py`` says what each case checks).
Its other rows (fp32, rank 7, N = 64 and 1024, one device: 12-50 s each) are measured by
``benchmarks/bench_tracker_matrix.py`` only; the suite checks those on GPT-2 and Llama-3.2-1B.
The full-depth case is ``slow``."""

from __future__ import annotations

import pytest

from placement_edu.runtime.peak_tracker import TrackerProcess
from tests.tracker_cases import BLOCKS, compare, slow, suite_cases

pytestmark = pytest.mark.runtime
MODEL = "llama-8b"


@slow
@pytest.mark.parametrize("devices, rank, precision", suite_cases(MODEL))
def test_fsdp2_matches_fsdpmemtracker(
    tracker: TrackerProcess, devices: int, rank: int, precision: str
) -> None:
    compare(tracker, MODEL, devices, rank, precision)


def test_fsdp2_without_resharding_keeps_the_blocks_not_yet_backwarded_gathered(
    tracker: TrackerProcess,
) -> None:
    # reshard_after_forward=False on every block, under full recomputation: the peak is the
    # second-last block's backward (its replayed attention), every block before it still gathered
    # -- at 32 blocks, block 30's with blocks 0..30 (56.1 GB measured). (Without recomputation the
    # peak moves from block 31's backward to the logits' gradient, all 32 blocks gathered: 170.9 GB
    # measured, 144.3 GB with resharding; benchmarks/bench_tracker_matrix.py.) Here on BLOCKS.
    compare(tracker, MODEL, 8, 0, "fp32", "full", strategy="fsdp2_no_reshard", blocks=BLOCKS)
