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


def test_a_commands_rank_server_imports_only_what_its_jobs_need(monkeypatch, tmp_path):
    """A kernel's or a pool's server imports all of ``PRELOAD`` (it may run anything next); a
    command's runs one launch, and leaves PyTorch's implementations out unless a job is one."""
    import multiprocessing.forkserver

    from placement_edu.implementations import TorchRefConfig
    from placement_edu.runtime import RunConfig

    preloads: list[list[str]] = []
    monkeypatch.setattr(multiprocessing.forkserver, "set_forkserver_preload", preloads.append)
    monkeypatch.delenv("PLACEMENT_EDU_START_METHOD", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    toy, ddp = RunConfig("zero3", 4), TorchRefConfig("ddp", 2)
    assert [forkserver.start_method(jobs) for jobs in ([toy], [toy, ddp], None)] == [
        "forkserver"
    ] * 3
    assert preloads == [
        ["placement_edu.runtime.server_setup", "placement_edu.runtime.worker"],
        forkserver.PRELOAD,
        forkserver.PRELOAD,
    ]
    assert "torch.distributed.pipelining" in forkserver.REFERENCE_ONLY
