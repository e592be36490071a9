"""Speed of the placement core, printed (not asserted): run `python benchmarks/bench_core.py`.

(a) derivations per second over a sweep of (strategy, Ψ, N) points, through the vectorised path
    (target >= 1,000,000 per second) and, for contrast, through the exact scalar path;
(b) the median time of one ZeroExplorer widget update: derivation + chart redraw (target < 100 ms).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from placement_edu import analyze
from placement_edu.sweep import sweep

STRATEGIES = ["dp", "zero1", "zero2", "zero3", "fsdp_grad_op", "zero2_offload", "zero3_offload"]


def bench_sweep(points_per_strategy: int = 200_000) -> float:
    rng = np.random.default_rng(0)
    psi = rng.uniform(1e6, 1e12, points_per_strategy)
    n = rng.integers(1, 4097, points_per_strategy).astype(np.float64)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        sweep(STRATEGIES, psi, n)
        best = min(best, time.perf_counter() - start)
    points = points_per_strategy * len(STRATEGIES)
    rate = points / best
    print(
        f"(a) vectorised sweep: {points:,} (strategy, Ψ, N) points in {best * 1e3:.1f} ms "
        f"-> {rate:,.0f} derivations/s (target >= 1,000,000/s)"
    )
    return rate


def bench_scalar(points: int = 2_000) -> float:
    start = time.perf_counter()
    for i in range(points):
        analyze(STRATEGIES[i % len(STRATEGIES)], 1e9 + i, 1 + i % 1024)
    elapsed = time.perf_counter() - start
    print(
        f"    exact scalar path (Fractions, full schedule): {points / elapsed:,.0f} derivations/s"
    )
    return points / elapsed


def bench_widget(updates: int = 30) -> float:
    from placement_edu.presentation.widgets import ZeroExplorer

    explorer = ZeroExplorer()
    times = []
    for i in range(updates):
        start = time.perf_counter()
        explorer.psi.value = 1e9 * (1 + i % 10)  # derive, move the bars, re-render the PNG image
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(
        f"(b) widget update (derive + move bars + render PNG), median of {updates}: "
        f"{median * 1e3:.1f} ms (target < 100 ms)"
    )
    return median


if __name__ == "__main__":
    bench_sweep()
    bench_scalar()
    bench_widget()
