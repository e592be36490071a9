"""The Llama-3.2-1B shape (s = 2048, b = 1) predicted against PyTorch's own accounting, live:
FSDP2 at N = 8 and 64 (fp32 or FSDP2's bf16 mixed precision: ``tracker_cases.SUITE``; N = 1024 in
``benchmarks/bench_tracker_matrix.py``), and one device under each recomputation -- none,
selective, full, on the model's widths at ``BLOCKS`` blocks (``tests/tracker_cases.py`` says what
each case checks). The full-depth cases are ``slow``."""

from __future__ import annotations

import pytest

from placement_edu.runtime.measurement.peak_tracker import TrackerProcess
from tests.tracker_cases import BLOCKS, compare, slow, suite_cases

pytestmark = pytest.mark.runtime
MODEL = "llama-1b"


@slow
@pytest.mark.parametrize("devices, rank, precision, blocks", suite_cases(MODEL))
def test_fsdp2_matches_fsdpmemtracker(
    tracker: TrackerProcess, devices: int, rank: int, precision: str, blocks: int | None
) -> None:
    compare(tracker, MODEL, devices, rank, precision, blocks=blocks)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_one_device_matches_memtracker(tracker: TrackerProcess, recompute: str) -> None:
    compare(tracker, MODEL, 1, 0, "fp32", recompute, blocks=BLOCKS)


def test_sdpa_full_recomputation_and_b_2_match_too(tracker: TrackerProcess) -> None:
    compare(
        tracker,
        MODEL,
        16,
        15,
        "fsdp2_bf16",
        recompute="full",
        attention="sdpa",
        micro_batch=2,
        seq=1024,
        blocks=BLOCKS,
    )
