"""The warm pool: ranks started once and reused; results identical to a cold run; failures end
the run within the timeout and the next run starts the ranks again; nothing is left behind."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from placement_edu import PlacementError
from placement_edu.runtime import RunConfig, RunFailed, WorkerPool, run_many
from placement_edu.runtime.processes import progress as progress_file
from placement_edu.runtime.processes.failure import RankFailure
from placement_edu.runtime.processes.pool import CANCEL_S

pytestmark = pytest.mark.runtime

RUNS = [
    RunConfig("zero3", 4),
    RunConfig("zero1_allreduce", 4),
    RunConfig("dp×tp", 4),
    RunConfig("pp", 4),
    RunConfig("zero2", 2),
]  # the last on 2 of the pool's 4 ranks


@pytest.fixture(scope="module")
def pool():
    pool = WorkerPool(4, timeout_s=10)
    yield pool
    pool.close()


def test_a_warm_pool_gives_the_results_of_a_cold_run(pool):
    warm = pool.run_many(RUNS, progress=False)
    cold = run_many(RUNS[:4], progress=False) + run_many(RUNS[4:], progress=False)
    for w, c in zip(warm, cold):
        assert w.equivalent and w.memory_matches() and w.ledger_matches(), (
            w.config.label,
            w.mismatches(),
        )
        assert w.measured == c.measured and w.deviation == c.deviation, w.config.label


def test_a_second_run_on_the_warm_pool_starts_no_process(pool):
    pool.run(RunConfig("dp", 4), progress=False)
    thread = pool._thread
    result = pool.run(RunConfig("zero3", 4), progress=False)
    assert result.equivalent and pool._thread is thread  # the same launch, the same ranks
    # (how fast a warm run is: benchmarks/bench_runtime.py prints it; not a timed unit test)


def test_a_rank_that_raises_ends_the_run_and_the_next_run_starts_the_ranks_again(pool):
    with pytest.raises(RunFailed, match="injected failure: this rank raised on purpose"):
        pool.run_many([RunConfig("zero3", 4)], progress=False, failure=RankFailure("raise", rank=1))
    assert not pool.alive
    assert pool.run(RunConfig("zero3", 4), progress=False).equivalent


def test_a_hung_rank_ends_the_run_near_the_timeout_and_leaves_the_pool_usable(pool):
    start = time.perf_counter()
    with pytest.raises(RunFailed) as caught:
        pool.run_many([RunConfig("zero3", 4)], progress=False, failure=RankFailure("hang", rank=2))
    assert time.perf_counter() - start < 10 + 20
    # The rank whose collective timed out ("did not complete within 10 s") may be stopped before
    # its report is written, its peers then reporting a closed connection: the hung rank is named
    # first either way (explain.explain).
    first = str(caught.value).splitlines()[0]
    assert first == "rank 2 stopped first: it hung (the others timed out waiting for it)", str(
        caught.value
    )[:2000]
    assert pool.run(RunConfig("dp", 4), progress=False).equivalent


@pytest.mark.parametrize(
    "kind, first",
    [
        (
            "freeze",
            "rank 2 stopped first: it hung (the others timed out waiting for it)",
        ),  # SIGSTOP
        (
            "kill",
            "rank 2 stopped first: it ",
        ),  # SIGKILL: from torch's exit status, or what the others saw
    ],
)
def test_a_frozen_or_killed_rank_is_named_first_and_the_run_ends_within_the_timeout_plus_5_s(
    pool, kind, first
):
    pool.run(RunConfig("dp", 4), progress=False)  # warm: the clock below counts no start-up
    start = time.perf_counter()
    with pytest.raises(RunFailed) as caught:
        pool.run_many([RunConfig("zero3", 4)], progress=False, failure=RankFailure(kind, rank=2))
    seconds = time.perf_counter() - start
    assert str(caught.value).splitlines()[0].startswith(first), str(caught.value)[:2000]
    assert seconds < 10 + 5, seconds  # the pool's timeout_s is 10
    assert pool.run(RunConfig("dp", 4), progress=False).equivalent


def test_closing_the_pool_leaves_no_rank_and_restores_nothing_it_did_not_change(tmp_path):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    pool = WorkerPool(2, timeout_s=10)
    pool.run_many([RunConfig("dp", 2)], progress=False, failure=RankFailure(pid_dir=str(tmp_path)))
    pids = [int((tmp_path / name).read_text()) for name in os.listdir(tmp_path)]
    assert len(pids) == 2
    pool.close()
    time.sleep(0.5)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_run_larger_than_the_pool_is_refused_before_it_is_sent(pool):
    with pytest.raises(PlacementError, match="needs 8 ranks; this pool has 4"):
        pool.run(RunConfig("dp", 8))


def test_a_fresh_pool_reports_its_ranks_starting_then_every_run_to_the_last_step():
    seen = []
    pool = WorkerPool(2, timeout_s=10)
    try:
        pool.run_many(
            [RunConfig("dp", 2, steps=3), RunConfig("zero2", 2, steps=3)], progress=seen.append
        )
    finally:
        pool.close()
    assert seen[0].text.startswith("starting 2 ranks") and seen[0].fraction == 0
    assert [p.fraction for p in seen] == sorted(p.fraction for p in seen)  # the bar never goes back
    assert (seen[-1].text, seen[-1].fraction) == ("zero2 on data=2: step 3/3 (run 2 of 2)", 1.0)


def test_the_runtime_widget_shows_progress_then_the_chart_and_disables_run_meanwhile(
    pool, monkeypatch
):
    from placement_edu.presentation import runtime_explorer as explore
    from placement_edu.runtime.processes import pool as pool_module

    monkeypatch.setattr(pool_module, "shared_pool", lambda world_size: pool)
    explorer = explore.RuntimeExplorer()
    assert explorer.chart.layout.display == "none"  # no chart yet: no broken-image icon
    explorer.strategy.value, explorer.world.value, explorer.fault.value = "zero3", 4, "stale-gather"
    drawn = []  # whether Run was disabled when the chart was drawn (or cleared)
    explorer.chart.observe(lambda _change: drawn.append(explorer.button.disabled), names="value")
    seen = []
    show = explorer._progress
    explorer._progress = lambda now: (
        show(now),
        seen.append(
            (
                explorer.button.disabled,
                explorer.bar.layout.visibility,
                explorer.bar.value,
                explorer.status.value,
            )
        ),
    )
    results = explorer.run()
    assert [r.config.label for r in results] == [
        "zero3 on data=4",
        "zero3 on data=4 [stale-gather]",
    ]
    assert all(disabled and shown == "visible" for disabled, shown, _, _ in seen)
    assert seen[-1][2] == 1.0 and seen[-1][3].endswith("[stale-gather]: step 5/5 (run 2 of 2)")
    assert explorer.bar.layout.visibility == "hidden" and not explorer.button.disabled
    assert explorer.chart.value[:4] == b"\x89PNG" and "stale-gather" in explorer.report.value
    assert explorer.chart.layout.display is None and drawn == [True]  # Run waited for the chart
    assert explorer.status.value.startswith("done: 2 runs in ")

    def refused(configs, progress):
        raise RunFailed("rank 1 failed: boom")

    monkeypatch.setattr(pool, "run_many", refused)
    assert explorer.run() == []
    assert (
        explorer.status.value == "<b>error</b>: rank 1 failed: boom" and explorer.chart.value == b""
    )
    assert explorer.chart.layout.display == "none" and drawn == [True, True]
    assert not explorer.button.disabled


INTERRUPTED_SCRIPT = """
import faulthandler, signal, time
# Ctrl-C raises KeyboardInterrupt, as in a script started from a terminal. (A suite run in the
# background of a shell without job control -- `bash .ci/run &` -- starts every process with
# Ctrl-C ignored, and Python then leaves it ignored.)
signal.signal(signal.SIGINT, signal.default_int_handler)
from placement_edu.runtime import RunConfig, WorkerPool
faulthandler.register(signal.SIGUSR1, all_threads=True)  # (the test's report, if it hangs)
pool = WorkerPool(2, timeout_s=10)
try:
    pool.run(RunConfig("zero3", 2, steps=5_000), progress=False)
except BaseException as stopped:  # RunInterrupted: Ctrl-C cancels the run
    print(type(stopped).__name__, stopped, flush=True)
start = time.monotonic()
again = pool.run(RunConfig("dp", 2, steps=1), progress=False)
print(again.equivalent, f"{time.monotonic() - start:.2f}", flush=True)
"""


def _lines(stream: IO[str]) -> queue.Queue:
    """The lines of ``stream`` as they come, then None (``get(timeout=...)``: never blocks)."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)  # the end

    threading.Thread(target=read, daemon=True).start()
    return lines


def _interrupt_a_long_pool_run(run_tmpdir: Path) -> tuple[str, float, list[str], int, str]:
    """Start INTERRUPTED_SCRIPT, Ctrl-C it once its run is 20 steps in (past the first steps'
    warm-up), and return what it printed: the interruption, the seconds it took, the next run's
    line, the exit code and stderr."""
    script = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_SCRIPT],
        env=dict(os.environ, TMPDIR=str(run_tmpdir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, err = _lines(script.stdout), _lines(script.stderr)  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 60
        while _step(run_tmpdir) < 20:
            assert time.monotonic() < deadline and script.poll() is None, "no 20 steps in 60 s"
            time.sleep(0.05)
        os.killpg(script.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
        sent = time.monotonic()
        # (the stated slow path takes CANCEL_S for the ranks, CANCEL_S for the pool's thread, then
        # up to the pool's 10 s timeout to end the ranks it kills)
        try:
            stopped = out.get(timeout=2 * CANCEL_S + 10 + 10).strip()
        except queue.Empty:  # where it waits: every thread's stack, on stderr, and its signals
            masks = [
                line
                for task in Path(f"/proc/{script.pid}/task").iterdir()
                for line in (task / "status").read_text().splitlines()
                if line.startswith(("Name", "SigBlk", "SigIgn", "SigCgt"))
            ]
            os.kill(script.pid, signal.SIGUSR1)
            time.sleep(2)
            script.kill()
            pytest.fail(
                "no line 24 s after the Ctrl-C:\n"
                + "\n".join(masks)
                + "\n"
                + "".join(iter(err.get, None))
            )
        seconds = time.monotonic() - sent
        again = out.get(timeout=10).split()
        script.wait(timeout=10)
    finally:
        script.kill()
    return (
        stopped,
        seconds,
        again,
        script.returncode,
        "".join(iter(lambda: err.get(timeout=5), None)),
    )


def _step(run_tmpdir: Path) -> int:
    """The step rank 0 last reported in the pool's progress file (the launcher's own reader)."""
    paths = [str(p) for p in run_tmpdir.glob("placement-edu-*/progress-0")]
    return max((progress_file.read(p, 0.0, 2).step for p in paths), default=0)


def test_a_ctrl_c_cancels_a_pool_run_within_2_s_and_the_next_run_starts_at_once(run_tmpdir):
    """The ranks stop after the step in hand (they all check ``cancel/k`` at the same step); before,
    they finished the abandoned 5,000 steps and the next run waited for them. A step that a loaded
    machine stalls past ``CANCEL_S`` takes the other, stated path (the pool stopped and restarted):
    that is tried once more, and the cancellation must then be the one observed."""
    for _ in range(2):
        stopped, seconds, again, returncode, err = _interrupt_a_long_pool_run(run_tmpdir)
        if "still in a step" not in stopped:
            break
        assert re.fullmatch(
            r"RunInterrupted interrupted by SIGINT: stopped the pool's 2 ranks, still in a step "
            r"2 s after the interruption \(zero3 on data=2 after step \d+ of 5000\); the next run "
            r"starts them again",
            stopped,
        ), stopped
    assert re.fullmatch(
        r"RunInterrupted interrupted by SIGINT: cancelled zero3 on data=2 after step \d+ of "
        r"5000; the pool's 2 ranks wait for the next run",
        stopped,
    ), stopped
    assert seconds < 2.5, seconds
    assert again[0] == "True" and float(again[1]) < 3, again  # the same ranks, free at once
    assert returncode == 0
    assert err == ""  # no traceback: nothing at all
    assert list(run_tmpdir.iterdir()) == []  # (closed at exit: nothing left in TMPDIR)
