"""Starting the ranks: torch's elastic launcher (``torch.distributed.launcher.api.elastic_launch``)
on this machine, from Python or a notebook. The workers are package code (``worker.main``), a free
port is picked by the rendezvous ("localhost:0"), and every launch has its own run id, so runs
started at the same time do not collide.

Failures end the whole run: a rank that raises makes the launcher stop every other rank, and its
traceback is re-raised here as ``RunFailed``; a rank that hangs makes the others' collectives time
out (``timeout_s``, default 60 s), which then fail the same way. No worker outlives ``launch``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
import warnings

from placement_edu.errors import PlacementError, positive_seconds
from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.progress import show_on_stderr
from placement_edu.runtime.result import RunResult


class RunFailed(RuntimeError):
    """A distributed run ended because a rank failed; the message carries its traceback."""


def launch(jobs: list[RunConfig], world_size: int, timeout_s: float = 60.0, progress: bool = True,
           failure: dict | None = None) -> list[list[dict]]:
    """Run ``jobs`` one after another on ``world_size`` fresh processes; return, per job, each
    rank's raw measurements."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from placement_edu.runtime import worker
    timeout_s = positive_seconds("timeout_s", timeout_s)
    if not jobs or not all(isinstance(job, RunConfig) for job in jobs):
        raise PlacementError(f"launch runs a non-empty list of RunConfig, got {jobs!r}")
    for job in jobs:
        job.validate()
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=world_size,
                          run_id=f"placement-edu-{uuid.uuid4().hex[:12]}", rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
                          start_method="spawn")
    with tempfile.TemporaryDirectory(prefix="placement-edu-") as run_dir:
        stop = threading.Event()
        if progress:
            threading.Thread(target=show_on_stderr, args=(os.path.join(run_dir, "progress"), stop,
                                                          world_size), daemon=True).start()
        try:
            with warnings.catch_warnings(), _quiet_launcher():
                warnings.simplefilter("ignore")
                per_rank = elastic_launch(config, worker.main)(jobs, timeout_s, run_dir, failure)
        except ChildFailedError as error:
            raise RunFailed(_explain(run_dir, error)) from None
        finally:
            stop.set()
    return [[per_rank[r][j] for r in range(world_size)] for j in range(len(jobs))]


def run(config: RunConfig, timeout_s: float = 60.0, progress: bool = True) -> RunResult:
    """Run one configuration and compare it with the prediction and the single-process run."""
    return run_many([config], timeout_s, progress)[0]


def run_many(configs: list[RunConfig], timeout_s: float = 60.0, progress: bool = True) -> list[RunResult]:
    """Several configurations of one world size in one launch (processes start once: 4 ranks take
    several seconds to start on a small machine)."""
    if not isinstance(configs, (list, tuple)) or not configs or not all(isinstance(c, RunConfig) for c in configs):
        raise PlacementError(f"run_many runs a non-empty list of RunConfig, got {configs!r}")
    sizes = {c.world_size for c in configs}
    if len(sizes) != 1:
        raise PlacementError(f"run_many needs one world size per launch, got {sorted(sizes, key=str)}")
    raw = launch(list(configs), sizes.pop(), timeout_s, progress)
    return [RunResult.build(c, r) for c, r in zip(configs, raw)]


def _explain(run_dir: str, error) -> str:
    """Every failed rank's traceback, the earliest (the root cause) first."""
    reports = []
    for name in os.listdir(run_dir):
        if name.startswith("error-"):
            with open(os.path.join(run_dir, name)) as f:
                when, _, trace = f.read().partition("\n")
            reports.append((float(when), int(name[6:]), trace.rstrip()))
    if not reports:                                    # failed before reaching the worker's code
        return "\n".join(f"rank {rank} failed (exit code {f.exitcode}): {f.message}"
                         for rank, f in error.failures.items()) or str(error)
    reports.sort()
    lines = [f"rank {reports[0][1]} failed first (the root cause):", reports[0][2]]
    for _, rank, trace in reports[1:]:
        lines += [f"then rank {rank} failed:", trace.splitlines()[-1]]
    return "\n".join(lines)


class _quiet_launcher:
    """Silence the elastic agent's logs: a failure reaches the caller as RunFailed, root cause first."""

    def __enter__(self):
        import logging
        self.loggers = [logging.getLogger(n) for n in ("torch.distributed.elastic",
                                                       "torch.distributed.launcher", "torch.multiprocessing")]
        self.levels = [lg.level for lg in self.loggers]
        for lg in self.loggers:
            lg.setLevel(logging.CRITICAL)
        return self

    def __exit__(self, *exc):
        for lg, level in zip(self.loggers, self.levels):
            lg.setLevel(level)
        return False
