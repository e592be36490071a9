"""Issue 22's whole matrix against PyTorch's own memory trackers: GPT-2, Llama-3.2-1B and Llama-3-8B
on one device (recompute none and full) and under FSDP2 at N = 8, 64 and 1024, ranks 0 and N - 1,
fp32 and FSDP2's bf16 mixed precision -- 42 cases, docs/measured.md's table. Each case: the core's
derivation beside one tracked step (``tests/tracker_cases.py``: ``FSDPMemTracker`` on a fake process
group of N ranks, ``MemTracker`` at N = 1), each in a fake process group of its own, measured one
after another by one ``TrackerProcess`` (a later case skips the first one's ~2 s warm-up). The test
suite runs a subset (``tracker_cases.SUITE``); this prints every row, "equal" where equal to the
byte, else the ratio, and exits 1 if a state differs or a peak is off by more than 2 %. About 10
minutes on 2 cores.
Run: ``.venv/bin/python benchmarks/bench_tracker_matrix.py [MODEL ...]``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (tests/ is not installed)

from placement_edu.runtime.measurement.peak_tracker import TrackerProcess  # noqa: E402
from tests.tracker_cases import MATRIX, SEQ, figures  # noqa: E402


def _cell(ours: float, theirs: int) -> str:
    return "equal" if ours == theirs else f"{ours / theirs:.4f}x"


def main(models: list[str]) -> int:
    print(
        "| model (s) | N | rank | precision | recompute | params, grads, optimizer "
        "| activations after forward | fwd/bwd peak (tracker) | predicted ÷ tracker "
        "| step peak (tracker) | predicted ÷ tracker | seconds |"
    )
    failed = 0
    tracker = TrackerProcess()
    for model, n, rank, precision, recompute in MATRIX:
        if models and model not in models:
            continue
        start = time.perf_counter()
        ours, theirs = figures(tracker, model, n, rank, precision, recompute)
        states = all(ours[k] == theirs[k] for k in ("params", "grads", "optimizer"))
        close = all(
            abs(ours[k] - theirs[k]) <= 0.02 * theirs[k]
            for k in ("activations", "forward_backward_peak", "step_peak")
        )
        failed += not (states and close)
        print(
            f"| {model} ({SEQ[model]}) | {n} | {rank} | {precision} | {recompute} "
            f"| {'equal' if states else 'DIFFER'} "
            f"| {_cell(ours['activations'], theirs['activations'])} "
            f"| {theirs['forward_backward_peak'] / 1e9:.3f} GB "
            f"| {_cell(ours['forward_backward_peak'], theirs['forward_backward_peak'])} "
            f"| {theirs['step_peak'] / 1e9:.3f} GB "
            f"| {_cell(ours['step_peak'], theirs['step_peak'])} "
            f"| {time.perf_counter() - start:.1f} |",
            flush=True,
        )
    tracker.close()
    print(f"{failed} case(s) outside the bounds (states to the byte, peaks within 2 %)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
