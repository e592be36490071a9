"""How ranks are entered: from a script the learner wrote however they wrote it (on standard input,
without the ``__main__`` guard), and under torchrun, where bad input is one line from rank 0."""

from __future__ import annotations

import subprocess
import sys

import pytest

from placement_edu.runtime import forkserver, server_setup

pytestmark = pytest.mark.runtime

#: A script on standard input, without the guard, that starts a rank from the forkserver as the
#: runtime does. multiprocessing would re-run the script in the rank: from stdin there is no file
#: to re-run (FileNotFoundError: '<stdin>', exit 1), and a file would start itself again.
STDIN_SCRIPT = f"""
import multiprocessing
print("script ran")
context = multiprocessing.get_context("forkserver")
context.set_forkserver_preload([{server_setup.__name__!r}])
rank = context.Process(target=print, args=("rank ran",))
rank.start()
rank.join()
print("rank exit", rank.exitcode)
"""


def test_a_script_on_stdin_without_the_guard_starts_ranks_that_run_package_code_only(run_tmpdir):
    assert server_setup.__name__ in forkserver.PRELOAD  # what every run's server imports
    done = subprocess.run(
        [sys.executable, "-"],
        input=STDIN_SCRIPT,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=run_tmpdir,
    )
    assert done.stdout.splitlines() == ["script ran", "rank ran", "rank exit 0"], done.stderr
    assert done.stderr == ""


@pytest.fixture
def torchrun_rank(monkeypatch):
    """Be rank ``r`` of a 2-rank torchrun (``QUIET_RANK_WAIT_S`` short: no agent ends the wait)."""
    from placement_edu.runtime import worker

    monkeypatch.setattr(worker, "QUIET_RANK_WAIT_S", 0.01)

    def become(rank: int):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        return worker._torchrun

    return become


@pytest.mark.parametrize(
    "argv, says",
    [
        (["zero9"], "error: unknown strategy 'zero9'; known strategies: dp,"),
        (["zero3", "--steps", "0"], "error: argument --steps: '0' is less than 1"),
    ],
)
def test_bad_input_under_torchrun_is_one_line_from_rank_0_and_exit_2(
    torchrun_rank, capsys, argv, says
):
    assert torchrun_rank(0)(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and says in err
    assert err.startswith("placement_edu.runtime.worker: ")
    assert torchrun_rank(1)(argv) == 2
    assert capsys.readouterr() == ("", "")  # the other ranks say nothing


def test_the_worker_outside_torchrun_says_how_to_start_it(monkeypatch, capsys):
    from placement_edu.runtime import worker

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert worker._torchrun(["zero3"]) == 2
    assert capsys.readouterr().err == (
        "placement_edu.runtime.worker: error: the worker runs under torchrun, which sets the world "
        "size: torchrun --nproc-per-node 2 -m placement_edu.runtime.worker zero3\n"
    )
