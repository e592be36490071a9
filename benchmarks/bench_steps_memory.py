"""Long runs, printed (not asserted): run `python benchmarks/bench_steps_memory.py` (about 30 min
on 2 cores; ``--only memory|verdicts|pool`` runs one part).

(a) memory against steps: ``zero3`` on 2 ranks for 10^3, 10^4 and 10^5 steps, each rank's peak
    resident memory (VmHWM, read from /proc every 0.5 s while the run goes on). The single-process
    reference is streamed beside the ranks (``reference.Reference``), so the peak is flat in the
    steps (target: each rank under 400 MB at every step count; issue 24 measured 1.1 GB per rank
    after 60 s of a 10^6-step run that had not begun its first step).
(b) the equivalence verdict at 9,000 steps: dp on 2 ranks and zero3 on 4 (correct: equivalent),
    and every fault (broken), each with its largest deviation, the tolerance beside the deviation
    that decides and the run's rounding floor (``verdict.tolerances``). A fixed 1e-10 called the
    correct ones broken.
(c) a warm pool forgets: six 10,000-step zero3 runs with different seeds on a 2-rank
    ``WorkerPool``, each rank's resident memory (VmRSS) after a first 1-step run and after each
    long run (target: growth under 64 MiB; issue 24 measured 237 -> 800 MiB when the pool kept every
    run's reference).

Ranks are the processes the launcher's forkserver forks: this process's grandchildren.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from placement_edu.runtime import RunConfig, WorkerPool, run_many
from placement_edu.runtime.verdict import applicable

MiB = 2**20


def _status(pid: str, key: str) -> int:
    """``key`` (VmHWM, VmRSS) of process ``pid`` in bytes; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _ranks() -> list[str]:
    """This process's grandchildren: the ranks (children of the forkserver it started)."""
    parent: dict[str, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent[pid] = f.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
    me = str(os.getpid())
    children = {p for p, pp in parent.items() if pp == me}
    return sorted((p for p, pp in parent.items() if pp in children), key=int)


class PeakWatch:
    """Each rank's peak resident memory (VmHWM) while a block runs, read every 0.5 s."""

    def __enter__(self) -> "PeakWatch":
        self.peak: dict[str, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            for pid in _ranks():
                self.peak[pid] = max(self.peak.get(pid, 0), _status(pid, "VmHWM"))

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def bench_memory() -> None:
    print("(a) zero3 on 2 ranks: each rank's peak resident memory (VmHWM), against steps")
    for steps in (10**3, 10**4, 10**5):
        start = time.perf_counter()
        with PeakWatch() as watch:
            (result,) = run_many([RunConfig("zero3", 2, steps=steps)], progress=False)
        peaks = ", ".join(f"{p / MiB:.0f} MiB" for p in watch.peak.values())
        print(
            f"  {steps:>7,} steps: peak per rank {peaks} (target < 400 MB each); "
            f"{time.perf_counter() - start:.0f} s; equivalent={result.equivalent}",
            flush=True,
        )


def _verdict(config: RunConfig) -> list[RunConfig]:
    mesh = config.resolved_mesh()
    return [config] + [config.with_(fault=f) for f in applicable(config.resolved_strategy(), mesh)]


def bench_verdicts(steps: int = 9000) -> None:
    print(f"(b) the equivalence verdict at {steps:,} steps (float64)")
    groups = [
        _verdict(RunConfig("dp", 2, steps=steps)),  # skip-grad-reduce, double-scale, unsynced-init
        [RunConfig("zero2", 2, steps=steps, fault="skip-param-sync")],
        [RunConfig("zero3", 2, steps=steps, fault="stale-gather")],
        [RunConfig("zero3", 4, steps=steps)],
    ]
    for configs in groups:
        start = time.perf_counter()
        results = run_many(configs, progress=False)
        for r in results:
            k = r.decisive_step
            verdict = "equivalent" if r.equivalent else f"BROKEN ({', '.join(r.broken) or '-'})"
            print(
                f"  {r.config.label:36} max |Δθ| {r.max_abs_deviation:.2e}; step {k + 1:>5,}: "
                f"{r.deviation[k]:.2e} vs tolerance {r.tolerance:.2e} (rounding floor "
                f"{max(r.floor[: k + 1]):.2e}; at the end {r.rounding_floor:.2e}) -> {verdict}",
                flush=True,
            )
        print(f"    ({time.perf_counter() - start:.0f} s)", flush=True)


def bench_pool(runs: int = 6, steps: int = 10_000) -> None:
    print(f"(c) a 2-rank warm pool, {runs} zero3 runs of {steps:,} steps with different seeds")
    pool = WorkerPool(2)
    try:
        pool.run(RunConfig("zero3", 2, steps=1), progress=False)
        ranks = _ranks()
        before = [_status(p, "VmRSS") for p in ranks]
        print(f"  after a 1-step run: {', '.join(f'{b / MiB:.0f} MiB' for b in before)}")
        for seed in range(1, runs + 1):
            start = time.perf_counter()
            result = pool.run(RunConfig("zero3", 2, steps=steps, seed=seed), progress=False)
            now = [_status(p, "VmRSS") for p in ranks]
            print(
                f"  seed {seed}: {', '.join(f'{n / MiB:.0f} MiB' for n in now)} "
                f"({time.perf_counter() - start:.0f} s, equivalent={result.equivalent})",
                flush=True,
            )
        growth = max(n - b for n, b in zip(now, before))
        print(f"  largest growth of a rank: {growth / MiB:.1f} MiB (target < 64 MiB)")
    finally:
        pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("memory", "verdicts", "pool"))
    args = parser.parse_args()
    for name, bench in (
        ("memory", bench_memory),
        ("verdicts", bench_verdicts),
        ("pool", bench_pool),
    ):
        if args.only in (None, name):
            bench()
