"""A run that goes wrong ends, says why, and leaves no process behind."""

from __future__ import annotations

import time

import pytest

from placement_edu.runtime import RunConfig, RunFailed, launch
from placement_edu.runtime.processes.failure import RankFailure

pytestmark = pytest.mark.runtime


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" in f.read()
    except FileNotFoundError:
        return True


def _pids(folder) -> list[int]:
    return [int(p.read_text()) for p in folder.iterdir()]


def test_a_rank_that_raises_ends_the_run_and_its_traceback_is_shown(tmp_path):
    with pytest.raises(RunFailed) as caught:
        launch(
            [RunConfig("dp", 2)],
            2,
            timeout_s=10,
            progress=False,
            failure=RankFailure("raise", rank=1, pid_dir=str(tmp_path)),
        )
    message = str(caught.value)
    assert message.startswith("rank 1 failed first")
    assert "injected failure: this rank raised on purpose" in message and "Traceback" in message
    assert len(_pids(tmp_path)) == 2 and all(_gone(p) for p in _pids(tmp_path))


def test_a_hung_collective_ends_the_run_within_the_timeout_with_a_clear_error(tmp_path):
    start = time.monotonic()
    with pytest.raises(RunFailed) as caught:
        launch(
            [RunConfig("dp", 2)],
            2,
            timeout_s=4,
            progress=False,
            failure=RankFailure("hang", rank=1, pid_dir=str(tmp_path)),
        )
    assert time.monotonic() - start < 30  # 4 s timeout + start-up, not 40 s of sleep
    assert "did not complete within 4 s" in str(caught.value)
    assert "broadcast on the data axis" in str(caught.value)
    assert len(_pids(tmp_path)) == 2 and all(_gone(p) for p in _pids(tmp_path))


def test_no_worker_outlives_a_successful_run(tmp_path):
    launch(
        [RunConfig("zero1", 2, steps=1)],
        2,
        progress=False,
        failure=RankFailure(pid_dir=str(tmp_path)),
    )
    assert len(_pids(tmp_path)) == 2 and all(_gone(p) for p in _pids(tmp_path))
