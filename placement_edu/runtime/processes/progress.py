"""Where a run is, for a progress bar or a line on stderr.

Rank 0 writes one line to a progress file after every step (``write``); the process that waits
for the run reads it (``read``). A warm pool also knows how many of its ranks are up, so the bar
moves while they start (the slow part: seconds, against a tenth of a second for the steps).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

#: How often a warm pool's owner asks its store whether a job's results are in, and an idle rank
#: whether a job has come (``pool.py``, ``worker.pool_main``): a learner cannot see 20 ms; asked
#: every 2 ms, an idle pool of 4 ranks kept 11 % of a core busy (3 % at this interval) -- on a
#: Binder that a class shares.
POLL_S = 0.02


@dataclass(frozen=True)
class Progress:
    """Ranks starting (``ranks_ready`` of ``world_size``, when known), then run ``run`` of
    ``runs`` (counted from 0) at step ``step`` of ``steps``. ``unit``: what a step is (an optimizer
    "step" of a run; a "probe" of a calibration: one collective at one size)."""

    elapsed_s: float
    world_size: int
    ranks_ready: int | None = None
    run: int = 0
    runs: int = 1
    step: int = 0
    steps: int = 0
    label: str = ""
    unit: str = "step"

    @property
    def started(self) -> bool:
        """True once rank 0 has finished a step."""
        return self.steps > 0

    @property
    def fraction(self) -> float:
        """Of the steps of all runs, the share done (0 while the ranks start)."""
        return (self.run + self.step / self.steps) / self.runs if self.started else 0.0

    @property
    def text(self) -> str:
        if not self.started:
            ready = (
                "" if self.ranks_ready is None else f": {self.ranks_ready} of {self.world_size} up"
            )
            return f"starting {self.world_size} ranks{ready}"
        of = f" (run {self.run + 1} of {self.runs})" if self.runs > 1 else ""
        return f"{self.label}: {self.unit} {self.step}/{self.steps}{of}"

    @property
    def where(self) -> str:
        """Where the ranks were, for the line that says they were stopped."""
        if not self.started:
            return "while they were starting"
        return f"of {self.label} after {self.unit} {self.step} of {self.steps}"


def write(
    path: str, run: int, runs: int, step: int, steps: int, label: str, unit: str = "step"
) -> None:
    """Rank 0, after a step: one line, ``run runs step steps unit label``, replaced whole (written
    aside, then renamed over the old one), so a reader never sees it empty or half-written and
    the bar never goes back."""
    with open(path + ".new", "w") as f:
        f.write(f"{run} {runs} {step} {steps} {unit} {label}")
    os.replace(path + ".new", path)


def read(path: str, elapsed_s: float, world_size: int, ranks_ready: int | None = None) -> Progress:
    """The latest line of ``path``; a missing or half-written file means the ranks are starting."""
    try:
        with open(path) as f:
            run, runs, step, steps, unit, label = f.read().split(" ", 5)
        return Progress(
            elapsed_s,
            world_size,
            ranks_ready,
            int(run),
            int(runs),
            int(step),
            int(steps),
            label,
            unit,
        )
    except (OSError, ValueError):
        return Progress(elapsed_s, world_size, ranks_ready)


def show_on_stderr(path: str, stop: threading.Event, world_size: int) -> None:
    """After 3 s, show what rank 0 is doing on stderr, refreshed a few times a second (a thread of
    a command-line run; widgets take ``Progress`` values instead)."""
    start = time.monotonic()
    shown = False
    while not stop.wait(0.25):
        elapsed = time.monotonic() - start
        if elapsed < 3:
            continue
        sys.stderr.write(f"\r[{elapsed:5.1f} s] {read(path, elapsed, world_size).text}".ljust(78))
        sys.stderr.flush()
        shown = True
    if shown:
        sys.stderr.write("\r" + " " * 78 + "\r")
        sys.stderr.flush()
