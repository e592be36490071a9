"""How much CPU a warm pool takes while it waits for the next run: a notebook keeps its ranks warm
between cells, and a class shares one Binder machine. Starts ``WorkerPool(4)``, runs one step, then
reads the CPU time of this process and every process under it (from /proc) over ``SECONDS``.
Its ranks and owner ask the store every ``progress.POLL_S`` (20 ms): asked every 2 ms, as before,
the idle pool took 11 % of a core on this 2-core machine; at 20 ms, 2-3 %.
Run: ``.venv/bin/python benchmarks/bench_idle_pool.py``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from placement_edu.runtime import RunConfig, WorkerPool
from placement_edu.runtime.processes.progress import POLL_S

SECONDS = 10.0
TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(root: int) -> float:
    """User + system seconds of ``root`` and its living descendants."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
    tree, todo = {root}, [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                todo.append(pid)
    return sum(stats[pid][1] for pid in tree if pid in stats)


def main() -> None:
    pool = WorkerPool(4)
    try:
        pool.run(RunConfig("dp", 4, steps=1), progress=False)
        before = _tree_cpu_s(os.getpid())
        time.sleep(SECONDS)
        busy = (_tree_cpu_s(os.getpid()) - before) / SECONDS
    finally:
        pool.close()
    print(
        f"a warm pool of 4 ranks, idle for {SECONDS:g} s, polling every {POLL_S * 1000:g} ms: "
        f"{busy:.1%} of one core (its owner, forkserver and ranks)"
    )


if __name__ == "__main__":
    main()
