"""Time, measured against predicted (SPEC §9), printed (not asserted): run
`python benchmarks/bench_time.py [--repeats 5] [--steps 6]`.

(a) calibrate this machine at N = 2 and 4 (``placement-edu calibrate``): the fitted α and W per op,
    pooled and per world size, the compute probes, and the hardware line;
(b) run dp, zero1, zero2 and zero3 at N = 2 and 4, each ``--repeats`` times (one launch per N), and
    print per strategy the measured step time (median of each run's median step; min-max over the
    runs), the prediction on the stored ``this_machine`` preset (``timing.HARDWARE``), and the ratio
    measured / predicted with its spread, then the same split into communication and compute.

Every number is wall time on whatever else this machine is running: on a shared 2-core machine
the spread is the honest part of the answer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from placement_edu.runtime import RunConfig, run_many

STRATEGIES = ("dp", "zero1", "zero2", "zero3")


def bench_calibration(world_sizes: tuple[int, ...]) -> None:
    from placement_edu.cli.calibrate import report
    from placement_edu.runtime.calibration.calibrate import calibrate

    start = time.perf_counter()
    result = calibrate(world_sizes)
    text = report(result)
    print(
        f"(a) calibration at N = {', '.join(map(str, world_sizes))}: "
        f"{time.perf_counter() - start:.1f} s wall (`placement-edu calibrate` prints the "
        "whole table of medians)"
    )
    print(text[text.index("Fits") :])


def _spread(values: list[float], scale: float = 1.0, digits: str = ".3g") -> str:
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{mid * scale:{digits}} ({lo * scale:{digits}}-{hi * scale:{digits}})"


def bench_runs(world_sizes: tuple[int, ...], repeats: int, steps: int) -> None:
    print(
        f"\n(b) engine runs: {steps} steps each (steps 2-{steps} counted, slowest rank, median), "
        f"{repeats} runs per strategy; median (min-max) over the runs; prediction on the stored "
        "this_machine preset, no overlap"
    )
    head = (
        f"{'N':>2} {'strategy':9}{'measured ms':>24}{'predicted ms':>14}{'measured/predicted':>26}"
        f"{'comm ms meas / pred':>30}{'compute ms meas / pred':>30}"
    )
    print(head)
    for n in world_sizes:
        configs = [RunConfig(s, n, steps=steps) for s in STRATEGIES for _ in range(repeats)]
        start = time.perf_counter()
        results = run_many(configs, timeout_s=60, progress=False)
        wall = time.perf_counter() - start
        for name in STRATEGIES:
            times = [r.time() for r in results if r.config.strategy == name]
            assert all(
                r.equivalent and r.ledger_matches() for r in results if r.config.strategy == name
            )
            pred = times[0]
            comm = _spread([t["measured_comm_s"] for t in times], 1e3)
            comm += " / " + format(pred["predicted_comm_s"] * 1e3, ".3g")
            compute = _spread([t["measured_compute_s"] for t in times], 1e3)
            compute += " / " + format(pred["predicted_compute_s"] * 1e3, ".3g")
            print(
                f"{n:>2} {name:9}{_spread([t['measured_step_s'] for t in times], 1e3):>24}"
                f"{pred['predicted_step_s'] * 1e3:>14.3g}{_spread([t['ratio'] for t in times]):>26}"
                f"{comm:>30}{compute:>30}"
            )
        print(f"   ({len(configs)} runs at N = {n} in one launch: {wall:.1f} s wall)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--no-calibration", action="store_true")
    args = parser.parse_args()
    print(
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} (other processes share them)"
    )
    if not args.no_calibration:
        bench_calibration((2, 4))
    bench_runs((2, 4), args.repeats, args.steps)
