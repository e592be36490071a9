"""How long ``placement-edu plan`` takes to enumerate, price and rank every placement of a 70B
model on 1,024 devices (target: under 2 s), and ``plan --model llama-8b --devices 64 --memory-gb
80`` with a warm profile cache, each FSDP2 plan's peak the module's (target: under 2 s; issue 39).
Run: ``.venv/bin/python benchmarks/bench_plan.py``.

Each repeat starts from empty caches (the planner caches each schedule and its seconds), so the
figure is what one command pays; the median of the repeats is printed."""

from __future__ import annotations

import statistics
import time

from placement_edu.planner import default_transformer, plan
from placement_edu.pricing import comm_seconds
from placement_edu.traffic import cached_schedule as _schedule

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


def main_model() -> None:
    from placement_edu.cli import build_parser
    from placement_edu.cli.plan import transformer_from_args
    from placement_edu.cli.one_peak import planner_peaks
    from placement_edu.precision import get_precision

    argv = "plan --model llama-8b --devices 64 --memory-gb 80".split()
    args = build_parser().parse_args(argv)
    model, _ = transformer_from_args(args)
    peak_of = planner_peaks("llama-8b", model, get_precision(args.precision))
    plan(model, 64, 80 * 10**9, peak_of=peak_of)  # warms the profiles (measured once, cached)
    seconds = []
    for _ in range(REPEATS):
        comm_seconds.cache_clear()
        _schedule.cache_clear()
        start = time.perf_counter()
        peak_of = planner_peaks("llama-8b", model, get_precision(args.precision))
        result = plan(model, 64, 80 * 10**9, peak_of=peak_of)
        seconds.append(time.perf_counter() - start)
    every = result.ranked + result.infeasible
    measured = sum(c.formula_peak_bytes is not None for c in every)
    print(
        f"{' '.join(argv)}: {len(result.ranked)} placements fit; {measured} of the {len(every)} "
        f"priced by the module's peak; median {statistics.median(seconds):.2f} s over "
        f"{REPEATS} runs, warm profile cache; target < 2 s"
    )


if __name__ == "__main__":
    main()
    main_model()
