"""The Llama-3-8B shape (s = 4096, b = 1) on its widths at ``BLOCKS`` blocks, predicted against
PyTorch's own accounting, live: FSDP2 at N = 8, rank 0, FSDP2's bf16 mixed precision
(``tracker_cases.SUITE``), and FSDP2 without resharding after forward at N = 8
(``tests/tracker_cases.py`` says what each case checks). Its rows at its own 32 blocks (12-50 s
each on this 2-core machine) are measured by ``benchmarks/bench_tracker_matrix.py``; the suite
checks the full depth on GPT-2 and Llama-3.2-1B."""

from __future__ import annotations

import pytest

from placement_edu.runtime.peak_tracker import TrackerProcess
from tests.tracker_cases import BLOCKS, compare, suite_cases

pytestmark = pytest.mark.runtime
MODEL = "llama-8b"


@pytest.mark.parametrize("devices, rank, precision, blocks", suite_cases(MODEL))
def test_fsdp2_matches_fsdpmemtracker(
    tracker: TrackerProcess, devices: int, rank: int, precision: str, blocks: int | None
) -> None:
    compare(tracker, MODEL, devices, rank, precision, blocks=blocks)


def test_fsdp2_without_resharding_keeps_the_blocks_not_yet_backwarded_gathered(
    tracker: TrackerProcess,
) -> None:
    # reshard_after_forward=False on every block, under full recomputation: the peak is the
    # second-last block's backward (its replayed attention), every block before it still gathered
    # -- at 32 blocks, block 30's with blocks 0..30 (56.1 GB measured). (Without recomputation the
    # peak moves from block 31's backward to the logits' gradient, all 32 blocks gathered: 170.9 GB
    # measured, 144.3 GB with resharding; benchmarks/bench_tracker_matrix.py.) Here on BLOCKS.
    compare(tracker, MODEL, 8, 0, "fp32", "full", strategy="fsdp2_no_reshard", blocks=BLOCKS)
