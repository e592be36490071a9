"""The warm pool: ranks started once and reused; results identical to a cold run; failures end
the run within the timeout and the next run starts the ranks again; nothing is left behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from placement_edu import PlacementError
from placement_edu.runtime import RunConfig, RunFailed, WorkerPool, run_many

RUNS = [RunConfig("zero3", 4), RunConfig("zero1_allreduce", 4), RunConfig("dp×tp", 4), RunConfig("pp", 4),
        RunConfig("zero2", 2)]                        # the last on 2 of the pool's 4 ranks


@pytest.fixture(scope="module")
def pool():
    pool = WorkerPool(4, timeout_s=10)
    yield pool
    pool.close()


def test_a_warm_pool_gives_the_results_of_a_cold_run(pool):
    warm = pool.run_many(RUNS, progress=False)
    cold = run_many(RUNS[:4], progress=False) + run_many(RUNS[4:], progress=False)
    for w, c in zip(warm, cold):
        assert w.equivalent and w.memory_matches() and w.ledger_matches(), (w.config.label, w.mismatches())
        assert w.measured == c.measured and w.deviation == c.deviation, w.config.label


def test_a_second_run_on_the_warm_pool_starts_no_process(pool):
    pool.run(RunConfig("dp", 4), progress=False)
    thread = pool._thread
    result = pool.run(RunConfig("zero3", 4), progress=False)
    assert result.equivalent and pool._thread is thread      # the same launch, the same ranks
    # (how fast a warm run is: benchmarks/bench_runtime.py prints it; not a timed unit test)


def test_a_rank_that_raises_ends_the_run_and_the_next_run_starts_the_ranks_again(pool):
    with pytest.raises(RunFailed, match="injected failure: this rank raised on purpose"):
        pool.run_many([RunConfig("zero3", 4)], progress=False, _failure={"kind": "raise", "rank": 1})
    assert not pool.alive
    assert pool.run(RunConfig("zero3", 4), progress=False).equivalent


def test_a_hung_rank_ends_the_run_near_the_timeout_and_leaves_the_pool_usable(pool):
    start = time.perf_counter()
    with pytest.raises(RunFailed, match="did not complete within 10 s"):
        pool.run_many([RunConfig("zero3", 4)], progress=False, _failure={"kind": "hang", "rank": 2})
    assert time.perf_counter() - start < 10 + 20
    assert pool.run(RunConfig("dp", 4), progress=False).equivalent


def test_closing_the_pool_leaves_no_rank_and_restores_nothing_it_did_not_change(tmp_path):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    pool = WorkerPool(2, timeout_s=10)
    pool.run_many([RunConfig("dp", 2)], progress=False, _failure={"pid_dir": str(tmp_path)})
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
