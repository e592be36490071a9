"""Speed of the runtime, printed (not asserted): run `python benchmarks/bench_runtime.py`.

(a) the wall time of one 4-rank, 5-step zero3 run through the elastic launcher, start-up included
    (target under 15 s on 2 cores), with the time the ranks spent in the 5 steps themselves;
(b) the wall time of the whole runtime test suite (tests/test_runtime*.py), in a subprocess.
Pass --no-suite to skip (b).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from placement_edu.runtime import RunConfig
from placement_edu.runtime.launcher import launch
from placement_edu.runtime.result import RunResult


def bench_zero3(world_size: int = 4, steps: int = 5) -> None:
    config = RunConfig("zero3", world_size, steps=steps)
    start = time.perf_counter()
    per_rank = launch([config], world_size, progress=False)[0]
    wall = time.perf_counter() - start
    result = RunResult.build(config, per_rank)
    in_steps = max(r["wall_s"] for r in per_rank)
    print(f"zero3, {world_size} ranks, {steps} steps: {wall:.2f} s wall (target < 15 s), "
          f"{in_steps:.3f} s in the steps, {os.cpu_count()} CPUs")
    print(f"  equivalent={result.equivalent} (max deviation {result.max_abs_deviation:.1e}), "
          f"memory={result.memory_matches()}, ledger={result.ledger_matches()}")


def bench_suite() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tests = sorted(os.path.join("tests", f) for f in os.listdir(os.path.join(root, "tests"))
                   if f.startswith("test_runtime") and f.endswith(".py"))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                          cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"runtime test suite ({len(tests)} files): {wall:.1f} s wall -- {summary}")


if __name__ == "__main__":
    bench_zero3()
    if "--no-suite" not in sys.argv:
        bench_suite()
