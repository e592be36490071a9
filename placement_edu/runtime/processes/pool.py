"""A warm pool of ranks: start N processes once, then run strategy after strategy on them.

A cold ``run`` spends almost all its time starting processes (importing torch, the rendezvous);
three training steps on ranks already set up take a tenth of a second. A ``WorkerPool`` keeps N
ranks alive between runs, started by torch's own elastic launcher exactly as ``launcher.py`` does
(in a background thread of this process), and hands them jobs through a ``TCPStore`` this process
holds:

    >>> from placement_edu.runtime import RunConfig, WorkerPool
    >>> pool = WorkerPool(4)
    >>> print(pool.run(RunConfig("zero3", 4)))       # the same RunResult as run()
    >>> pool.close()                                  # also done at exit

- Any run of at most N ranks fits: the mesh's groups are formed on the ranks it needs (and kept for
  the next run); the ranks beyond it wait.
- A failure ends the run as ``run`` does (a rank that raises, or a collective that times out after
  ``timeout_s``): the launcher stops every rank, ``RunFailed`` shows the root cause, and the next
  run starts the pool again.
- An interrupted run is cancelled (Ctrl-C, a Jupyter interrupt): the ranks stop after the step in
  hand, within ``CANCEL_S``, ``RunInterrupted`` says where the run was, and the next run starts at
  once on the same ranks.
- A pool belongs to the process that made it (a notebook kernel): its ranks exit when that process
  dies, however it dies (a kernel's shutdown, SIGTERM, SIGKILL), and remove the pool's files; and
  ``shared_pool`` never hands a pool to another process.
- A pool gives its memory back: it closes itself after ``idle_s`` seconds without a run (``IDLE_S``,
  5 minutes), and the next run starts it again. Binder gives a learner 1-2 GiB, and a learner who
  moves to the next notebook leaves this kernel running.
"""

from __future__ import annotations

import atexit
import multiprocessing.util  # noqa: F401  (registers its atexit before the pool's: see __init__)
import os
import pickle
import signal
import threading
import time
import warnings
from typing import Callable

from placement_edu.errors import (
    MAX_LOCAL_WORLD_SIZE,
    PlacementError,
    positive_int,
    positive_seconds,
)
from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.processes import forkserver, rundir
from placement_edu.runtime.processes import progress as progress_file
from placement_edu.runtime.processes.launcher import (
    RunFailed,
    RunInterrupted,
    _quiet_launcher,
    launch_config,
    ranks_start_with_sigint_held,
)
from placement_edu.runtime.processes.explain import explain
from placement_edu.runtime.processes.failure import RankFailure
from placement_edu.runtime.processes.progress import POLL_S, Progress
from placement_edu.runtime.result import RunResult


#: Seconds a pool waits for its next run before it closes itself (its ranks hold memory meanwhile).
IDLE_S = 300.0

#: Seconds an interrupted run's ranks have to stop (they check between steps) before they are
#: stopped with the pool instead (a step longer than that), and the next run starts them again.
CANCEL_S = 2.0


class WorkerPool:
    """N warm ranks on this machine (gloo on CPU, NCCL where every rank has a GPU)."""

    #: The ranks' run folder (``rundir.make``) while they are up; None once the pool is closed.
    _dir: str | None

    def __init__(
        self, world_size: int, timeout_s: float = 60.0, idle_s: float | None = IDLE_S
    ) -> None:
        self.world_size = positive_int("world_size", world_size)
        if not 2 <= self.world_size <= MAX_LOCAL_WORLD_SIZE:
            raise PlacementError(
                f"a pool holds 2 to {MAX_LOCAL_WORLD_SIZE} ranks, got {world_size}"
            )
        self.timeout_s = positive_seconds("timeout_s", timeout_s)
        self.idle_s = None if idle_s is None else positive_seconds("idle_s", idle_s)
        self.owner = os.getpid()
        self._used = time.monotonic()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # atexit runs its functions last-registered first, and multiprocessing's own (imported at
        # the top of this module, so registered before this one) waits for every rank process:
        # the pool must be closed before it, or a script that ends with a warm pool never exits.
        atexit.register(self.close)

    # --- the life of the ranks -------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "WorkerPool":
        """Start the ranks now, in the background (a widget does this when it is shown, so the
        first click finds them warm); a run starts them anyway when they are not."""
        with self._lock:
            if not self.alive:
                self._start()
        return self

    def _start(self) -> None:
        from placement_edu.runtime.processes.container import check_fits

        check_fits(
            self.world_size, forkserver_running=forkserver.running()
        )  # refused before any rank starts
        method = forkserver.start_method()  # (before holding the server: it may start it again)
        forkserver.hold(self)
        import torch.distributed as dist
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import elastic_launch

        from placement_edu.runtime import worker

        run_dir = self._dir = rundir.make("pool")
        self._began = time.time() - 1  # (rundir.remove_torch_error_files)
        rundir.quiet_resource_tracker()
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        self.jobs, self.failure = 0, None
        config = launch_config(self.world_size, method, run_dir, "placement-edu-pool")

        def serve() -> None:
            # In a thread, torch's launcher installs no signal handlers: the kernel keeps its own.
            stop = threading.Event()
            threading.Thread(target=rundir.reap, args=(run_dir, stop), daemon=True).start()
            try:
                with warnings.catch_warnings(), _quiet_launcher(), ranks_start_with_sigint_held():
                    warnings.simplefilter("ignore")
                    elastic_launch(config, worker.pool_main)(
                        self.store.port, self.timeout_s, run_dir, forkserver.owner()
                    )
            except ChildFailedError as error:
                self.failure = RunFailed(explain(run_dir, error, self.world_size, self.timeout_s))
            except BaseException as error:  # e.g. the rendezvous failed
                self.failure = RunFailed(f"the pool's ranks could not start: {error}")
            finally:
                stop.set()

        self._thread = threading.Thread(target=serve, name="placement-edu-pool", daemon=True)
        self._thread.start()
        self._used = time.monotonic()
        if self.idle_s is not None:
            threading.Thread(
                target=self._close_when_idle,
                args=(self._thread,),
                name="placement-edu-pool-idle",
                daemon=True,
            ).start()

    def _close_when_idle(self, ranks: threading.Thread) -> None:
        """Close the pool once it has had no run for ``idle_s`` seconds (while ``ranks``, the set of
        ranks this watch was started for, is the pool's: a closed and restarted pool has its
        own)."""
        while True:
            time.sleep(min(self.idle_s / 4, 5.0))  # type: ignore[operator]
            with self._lock:  # never during a run
                if self._thread is not ranks or not ranks.is_alive():
                    return
                if time.monotonic() - self._used >= self.idle_s:  # type: ignore[operator]
                    self.close()
                    return

    def close(self) -> None:
        """Stop the ranks (a job in hand is cancelled first) and remove the pool's files."""
        if os.getpid() != self.owner:
            return
        if self.alive:
            if self.jobs:
                self.store.set(f"cancel/{self.jobs - 1}", b"1")  # type: ignore[arg-type]
            # (torch's stub types a value as str; the store takes bytes, as pickle makes them)
            self.store.set(f"job/{self.jobs}", pickle.dumps("stop"))  # type: ignore[arg-type]
            self._thread.join(timeout=CANCEL_S)  # type: ignore[union-attr]
            if self.alive:  # in a step longer than CANCEL_S, or still starting
                rundir.kill_ranks(self._dir)  # type: ignore[arg-type]  # (alive: it has one)
                self._thread.join(timeout=self.timeout_s)  # type: ignore[union-attr]
            rundir.remove_torch_error_files(self._began)  # a rank killed as it started
        rundir.remove(getattr(self, "_dir", None))
        self._dir = None
        self._thread = None
        forkserver.release(self)

    # --- runs ------------------------------------------------------------------------------
    def run(
        self, config: RunConfig, progress: bool | Callable[[Progress], None] = True
    ) -> RunResult:
        """One run, compared with the prediction and the single-process run (as ``run``)."""
        return self.run_many([config], progress)[0]

    def run_many(
        self,
        configs: list[RunConfig],
        progress: bool | Callable[[Progress], None] = True,
        failure: RankFailure | None = None,
    ) -> list[RunResult]:
        """Several runs one after another on the warm ranks. ``progress``: True shows a line on
        stderr after 3 s; a function is called with a ``Progress`` whenever it changes, from this
        thread (a widget's bar updates from the kernel's main thread, not from a background one).
        ``failure``: a rank told to fail (``RankFailure``), to show how a run ends."""
        if os.getpid() != self.owner:
            raise PlacementError(
                "this pool belongs to another process; make a WorkerPool of your own"
            )
        if (
            not isinstance(configs, (list, tuple))
            or not configs
            or not all(isinstance(c, RunConfig) for c in configs)
        ):
            raise PlacementError(f"run_many runs a non-empty list of RunConfig, got {configs!r}")
        for config in configs:
            config.validate()
            if config.world_size > self.world_size:
                raise PlacementError(
                    f"{config.label} needs {config.world_size} ranks; this pool has "
                    f"{self.world_size}"
                )
        with self._lock:  # one job at a time: the ranks run in step
            if not self.alive:
                self._start()
            k = self.jobs
            self.jobs += 1
            job = pickle.dumps((list(configs), failure))
            self.store.set(f"job/{k}", job)  # type: ignore[arg-type]  # bytes, as in close()
            ranks = max(c.world_size for c in configs)
            try:
                raw = self._collect(k, ranks, progress)
            except KeyboardInterrupt:  # Ctrl-C, a Jupyter interrupt: one line, not a traceback
                raise self._cancel(k, ranks) from None
            finally:
                self._used = time.monotonic()
        per_job = [[raw[r][j] for r in range(c.world_size)] for j, c in enumerate(configs)]
        return [RunResult.build(c, r) for c, r in zip(configs, per_job)]

    def _collect(
        self, k: int, ranks: int, progress: bool | Callable[[Progress], None]
    ) -> list[list[dict]]:
        """Each rank's results of job ``k``; RunFailed (and a pool to restart) if the ranks died."""
        assert self._dir is not None  # the ranks are up: so is their folder
        stop = threading.Event()
        path = os.path.join(self._dir, f"progress-{k}")
        if progress is True:
            threading.Thread(
                target=progress_file.show_on_stderr, args=(path, stop, self.world_size), daemon=True
            ).start()
        keys = [f"result/{k}/{r}" for r in range(ranks)]
        start = time.monotonic()
        shown: list[tuple[int | None, int, int] | None] = [None]  # the last (ready, run, step)

        def report(ready: int) -> None:  # call progress when something moved
            now = progress_file.read(path, time.monotonic() - start, self.world_size, ready)
            if callable(progress) and (now.ranks_ready, now.run, now.step) != shown[0]:
                shown[0] = (now.ranks_ready, now.run, now.step)
                progress(now)

        try:
            while not self.store.check(keys):
                if not self.alive:  # a rank failed: the launcher stopped them all
                    failure = self.failure or RunFailed("the pool's ranks stopped")
                    self.close()
                    raise failure
                if callable(progress):
                    report(self.store.add("ready", 0))
                time.sleep(POLL_S)
            report(self.world_size)  # the last step, however fast the run was
        finally:
            stop.set()
        return [pickle.loads(self.store.get(key)) for key in keys]

    def _cancel(self, k: int, ranks: int) -> RunInterrupted:
        """Cancel job ``k``, whose caller was interrupted: set ``cancel/k``, which the ranks check
        between steps (``worker._cancel_check``), and wait up to ``CANCEL_S`` for their (partial)
        results. Ranks still starting are left to start: they skip the cancelled job. Ranks that
        do not stop in time are stopped with the pool."""
        assert self._dir is not None
        self.store.set(f"cancel/{k}", b"1")  # type: ignore[arg-type]  # bytes, as in close()
        keys = [f"result/{k}/{r}" for r in range(ranks)]
        up = self.store.add("ready", 0) >= self.world_size
        deadline = time.monotonic() + CANCEL_S
        while up and self.alive and not self.store.check(keys) and time.monotonic() < deadline:
            time.sleep(0.01)
        now = progress_file.read(os.path.join(self._dir, f"progress-{k}"), 0.0, self.world_size)
        where = (
            f"{now.label} after step {now.step} of {now.steps}"
            if now.started
            else "before its first step"
        )
        if up and not self.store.check(keys):
            self.close()
            return RunInterrupted(
                signal.SIGINT,
                f"interrupted by SIGINT: stopped the pool's {self.world_size} ranks, still in a "
                f"step {CANCEL_S:g} s after the interruption ({where}); the next run starts them "
                "again",
            )
        return RunInterrupted(
            signal.SIGINT,
            f"interrupted by SIGINT: cancelled {where}; the pool's {self.world_size} ranks wait "
            "for the next run",
        )


_SHARED: dict[int, WorkerPool] = {}


def shared_pool(world_size: int) -> WorkerPool:
    """This process's pool for runs of ``world_size`` ranks: the one it has when that is large
    enough (a smaller run uses the first ranks), else a new one -- the old one closed first, so one
    set of ranks at a time holds memory."""
    pool = _SHARED.get(os.getpid())
    if pool is None or pool.world_size < world_size:
        if pool is not None:
            pool.close()
        pool = _SHARED[os.getpid()] = WorkerPool(world_size)
    return pool
