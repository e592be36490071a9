"""How long ``placement-edu time`` takes to price one configuration, as a user pays it: a fresh
process each time (Python's start-up and the package's imports included; torch never imported).
Target: under 0.5 s. Run: ``.venv/bin/python benchmarks/bench_time_command.py``.

The configuration is the largest docs/time.md prices: GPT-3 175B on 1,536 H100s, t = 8, p = 8,
d = 24, 1,536 sequences (m = 64 micro-batches), zero1 with sequence parallelism and selective
recomputation. The median of the repeats is printed, and the slowest."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

REPEATS = 7
ARGV = [
    "time",
    *("--layers", "96", "--hidden", "12288", "--heads", "96", "--seq", "2048", "--vocab", "51200"),
    *("--global-batch", "1536", "--mesh", "data=24,tensor=8,pipeline=8", "--strategy", "zero1"),
    *("--sequence-parallel", "--recompute", "selective"),
]


def main() -> None:
    code = "import sys; from placement_edu.cli import main; sys.exit(main(sys.argv[1:]))"
    seconds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, *ARGV], check=True, capture_output=True)
        seconds.append(time.perf_counter() - start)
    print(f"placement-edu {' '.join(ARGV)}")
    print(
        f"wall time per command (fresh process, {REPEATS} repeats): median "
        f"{statistics.median(seconds):.3f} s, slowest {max(seconds):.3f} s (target: under 0.5 s)"
    )


if __name__ == "__main__":
    main()
