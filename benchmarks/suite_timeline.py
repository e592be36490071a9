"""Where the suite's time goes, worker by worker: a pytest plugin that logs each test's start and
end where it runs, and a report of those logs (each worker's busy seconds, and its files in the
order it ran them, the longer ones with their spans).

    TIMELINE_DIR=/tmp/tl PYTHONPATH=benchmarks .venv/bin/python -m pytest -p suite_timeline \\
        -m "runtime or notebook or browser" -n 3 --dist loadfile --no-loadscope-reorder
    .venv/bin/python benchmarks/suite_timeline.py /tmp/tl

A worker busy for the whole span while the cores are busy too (``vmstat 5`` beside it) means the
stage's time is its tests' CPU; gaps, or a worker that ends early, mean waiting or a file handed
out too late (``conftest.HANDED_OUT_FIRST``).
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Log ``item``'s file, start and end (seconds since the epoch) in this worker's file."""
    start = time.time()
    yield
    folder = os.environ.get("TIMELINE_DIR")
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(Path(folder) / f"{worker}.tsv", "a") as log:
            log.write(f"{item.nodeid.split('::')[0]}\t{start:.3f}\t{time.time():.3f}\n")


def report(folder: Path, longer_than_s: float = 15.0) -> None:
    rows: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for log in folder.glob("*.tsv"):
        for line in log.read_text().splitlines():
            name, start, end = line.split("\t")
            rows[log.stem].append((name, float(start), float(end)))
    t0 = min(r[1] for worker in rows.values() for r in worker)
    t1 = max(r[2] for worker in rows.values() for r in worker)
    print(f"span {t1 - t0:.0f} s")
    for worker, tests in sorted(rows.items()):
        busy = sum(end - start for _, start, end in tests)
        print(
            f"{worker}: busy {busy:.0f} s, last test ended at {max(r[2] for r in tests) - t0:.0f} s"
        )
        spans: dict[str, tuple[float, float]] = {}
        for name, start, end in sorted(tests, key=lambda r: r[1]):
            first, last = spans.get(name, (start, end))
            spans[name] = (min(first, start), max(last, end))
        for name, (first, last) in spans.items():
            if last - first > longer_than_s:
                print(f"    {first - t0:5.0f}-{last - t0:5.0f} s  {last - first:4.0f} s  {name}")


if __name__ == "__main__":
    report(Path(sys.argv[1]))
