"""Speed of the runtime, printed (not asserted): run `python benchmarks/bench_runtime.py`.

(a) the wall time of one 4-rank, 5-step zero3 run through the elastic launcher, start-up included
    (target under 15 s on 2 cores), with the time the ranks spent in the 5 steps themselves;
(b) a warm pool (``WorkerPool``): the median click-to-result time of a 4-rank, 3-step zero3 run on
    ranks already started (target under 0.5 s), without and with a progress function (the
    widget's path), beside the pool's cold first run;
(c) the peak memory of the ranks of a 4- and an 8-rank pool during a run: RSS and PSS summed over
    the ranks (PSS shares the pages the ranks have in common, so it is what they cost together),
    read from /proc/PID/smaps_rollup every 20 ms;
(d) a command's run against a script's: ``placement-edu run zero3 --world-size 4 --steps 2``
    (its launch in an agent forked from the rank server: the command never imports torch) and
    a script that calls ``run`` (torch's launcher in the script's own process); median wall time
    and CPU time of the whole machine (/proc/stat, every process: read on a quiet machine);
(e) the wall time of the whole runtime test suite (tests/test_runtime*.py), in a subprocess.
Pass --no-suite to skip (e).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from placement_edu.runtime import RunConfig
from placement_edu.runtime.processes.launcher import launch
from placement_edu.runtime.result import RunResult


def bench_zero3(world_size: int = 4, steps: int = 5) -> None:
    config = RunConfig("zero3", world_size, steps=steps)
    start = time.perf_counter()
    per_rank = launch([config], world_size, progress=False)[0]
    wall = time.perf_counter() - start
    result = RunResult.build(config, per_rank)
    in_steps = max(r["wall_s"] for r in per_rank)
    print(
        f"zero3, {world_size} ranks, {steps} steps: {wall:.2f} s wall (target < 15 s), "
        f"{in_steps:.3f} s in the steps, {os.cpu_count()} CPUs"
    )
    print(
        f"  equivalent={result.equivalent} (max deviation {result.max_abs_deviation:.1e}), "
        f"memory={result.memory_matches()}, ledger={result.ledger_matches()}"
    )


def bench_warm(runs: int = 15) -> None:
    from placement_edu.runtime import WorkerPool

    config = RunConfig("zero3", 4, steps=3)
    pool = WorkerPool(4)
    start = time.perf_counter()
    pool.run(config, progress=False)
    cold = time.perf_counter() - start
    pool.run(config, progress=False)  # the first gloo connections are made lazily
    for how, progress in (
        ("no progress", False),
        ("a progress function, as the widget", lambda _now: None),
    ):
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            result = pool.run(config, progress=progress)
            times.append(time.perf_counter() - start)
        times.sort()
        print(
            f"warm pool, zero3, 4 ranks, 3 steps, {how}: median {times[len(times) // 2]:.3f} s "
            f"click to result (min {times[0]:.3f}, max {times[-1]:.3f}, {runs} runs; "
            f"target < 0.5 s); the pool's first, cold run: {cold:.2f} s; "
            f"equivalent={result.equivalent}"
        )
    pool.close()


def _children_memory() -> tuple[int, int]:
    """(RSS, PSS) in bytes summed over this process's child processes (the ranks)."""
    me, rss, pss = str(os.getpid()), 0, 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] != me:
                    continue
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith(("Rss:", "Pss:")):
                        kib = int(line.split()[1]) * 1024
                        rss, pss = (rss + kib, pss) if line.startswith("Rss:") else (rss, pss + kib)
        except (OSError, IndexError):
            continue
    return rss, pss


def bench_memory(world_size: int) -> None:
    import threading

    from placement_edu.runtime import WorkerPool

    pool = WorkerPool(world_size)
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            rss, pss = _children_memory()
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

    threading.Thread(target=sample, daemon=True).start()
    for name in ("zero3", "dp"):
        pool.run(RunConfig(name, world_size, steps=3), progress=False)
    done.set()
    pool.close()
    gib = 2**30
    print(
        f"{world_size}-rank pool, peak over its ranks: RSS {peak[0] / gib:.2f} GiB, PSS "
        f"{peak[1] / gib:.2f} GiB ({peak[1] / world_size / 2**20:.0f} MiB PSS per rank)"
    )


def _machine_cpu_s() -> float:
    """CPU seconds every process of this machine has used (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def bench_command(repeats: int = 5) -> None:
    script = (
        "from placement_edu.runtime import RunConfig, run\n"
        "print(run(RunConfig('zero3', 4, steps=2), progress=False).equivalent)"
    )
    ways = {
        "placement-edu run (launch in an agent)": [
            "-m",
            "placement_edu.cli",
            "run",
            "zero3",
            "--world-size",
            "4",
            "--steps",
            "2",
        ],
        "a script calling run (launch in its process)": ["-c", script],
    }
    measured: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
    for _ in range(repeats):  # alternated, so that the machine's noise falls on both
        for way, argv in ways.items():
            cpu, start = _machine_cpu_s(), time.perf_counter()
            subprocess.run([sys.executable, *argv], check=True, capture_output=True)
            measured[way].append((time.perf_counter() - start, _machine_cpu_s() - cpu))
    for way, times in measured.items():
        wall = sorted(w for w, _ in times)[repeats // 2]
        cpu = sorted(c for _, c in times)[repeats // 2]
        print(f"{way}: zero3, 4 ranks, 2 steps, median {wall:.2f} s wall, {cpu:.2f} s CPU")


def bench_suite() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tests = sorted(
        os.path.join("tests", f)
        for f in os.listdir(os.path.join(root, "tests"))
        if f.startswith("test_runtime") and f.endswith(".py")
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=root,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"runtime test suite ({len(tests)} files): {wall:.1f} s wall -- {summary}")


if __name__ == "__main__":
    bench_zero3()
    bench_warm()
    for n in (4, 8):
        bench_memory(n)
    bench_command()
    if "--no-suite" not in sys.argv:
        bench_suite()
