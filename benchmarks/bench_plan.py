"""How long ``placement-edu plan`` takes to enumerate, price and rank every placement of a 70B
model on 1,024 devices (target: under 2 s). Run: ``.venv/bin/python benchmarks/bench_plan.py``.

Each repeat starts from empty caches (the planner caches each schedule and its seconds), so the
figure is what one command pays; the median of the repeats is printed."""

from __future__ import annotations

import statistics
import time

from placement_edu.planner import _schedule, comm_seconds, default_transformer, plan

DEVICES = 1024
REPEATS = 5


def main() -> None:
    model, assumption = default_transformer(70 * 10**9)
    seconds = []
    for _ in range(REPEATS):
        comm_seconds.cache_clear()
        _schedule.cache_clear()
        start = time.perf_counter()
        result = plan(model, DEVICES, 80 * 10**9, "h100-nvlink-ib")
        seconds.append(time.perf_counter() - start)
    print(assumption)
    print(
        f"plan of Ψ = {model.psi:,} on {DEVICES} devices (h100-nvlink-ib, 80 GB): "
        f"{len(result.ranked)} placements fit, {len(result.infeasible)} do not"
    )
    print(
        f"median {statistics.median(seconds):.2f} s over {REPEATS} runs "
        f"(min {min(seconds):.2f} s, max {max(seconds):.2f} s); target < 2 s"
    )


if __name__ == "__main__":
    main()
