"""How ranks are entered: from a script the learner wrote however they wrote it (on standard input,
without the ``__main__`` guard), and under torchrun, where bad input is one line from rank 0."""

from __future__ import annotations

import subprocess
import sys

import pytest

from placement_edu.runtime.processes import forkserver, server_setup

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


def test_bad_input_under_the_real_torchrun_is_rank_0s_line_then_torchruns_summary(run_tmpdir):
    """Issue 43 item 7: docs/reliability.md's ending table said one line and exit 2 under
    torchrun; torchrun itself adds its ``ChildFailedError`` summary and exits 1 when any worker
    fails. The row now says so, and this is what it describes."""
    from pathlib import Path

    torchrun = Path(sys.executable).with_name("torchrun")
    done = subprocess.run(
        [str(torchrun), "--nproc-per-node", "2", "-m", "placement_edu.runtime.worker", "zero3"]
        + ["--steps", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "TMPDIR": str(run_tmpdir)},
    )
    ours = [line for line in done.stderr.splitlines() if "placement_edu.runtime.worker:" in line]
    assert done.returncode == 1, done.stderr
    assert ours == [
        "placement_edu.runtime.worker: error: argument --steps: '0' is less than 1; give a whole "
        "number of optimizer steps, at least 1 and at most 10^6"
    ]
    assert "ChildFailedError" in done.stderr and "exitcode  : 2" in done.stderr
    row = next(
        line
        for line in (Path(__file__).parent.parent / "docs" / "reliability.md")
        .read_text()
        .split("\n")
        if line.startswith("| bad input under torchrun |")
    )
    assert "rank 0's one line" in row and "| 1 (torchrun's" in row and "ChildFailedError" in row
    # nothing of ours left behind; torchrun leaves its own folder (the row says so)
    assert all(p.name.startswith("torchelastic_") for p in run_tmpdir.iterdir())
    assert "torchrun's own `torchelastic_*` folder" in row


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
    monkeypatch.setattr(forkserver, "running", lambda: False)  # (this worker's may be up)
    monkeypatch.setattr(forkserver, "_imports_reference", True)  # (put back afterwards)
    toy, ddp = RunConfig("zero3", 4), TorchRefConfig("ddp", 2)
    assert [forkserver.start_method(jobs) for jobs in ([toy], [toy, ddp], None)] == [
        "forkserver"
    ] * 3
    assert preloads == [
        ["placement_edu.runtime.processes.server_setup", "placement_edu.runtime.worker"],
        forkserver.PRELOAD,
        forkserver.PRELOAD,
    ]
    assert "torch.distributed.pipelining" in forkserver.REFERENCE_ONLY


@pytest.mark.parametrize(
    "imports_reference, jobs, held, restarted",
    [
        (False, "ddp", False, True),  # a command's toy server, then PyTorch's DDP: started again
        (False, "ddp", True, False),  # ...unless a pool holds it (its ranks import what they need)
        (False, "toy", False, False),  # toy runs need nothing more
        (True, "ddp", False, False),  # it has everything already
    ],
)
def test_a_running_server_is_started_again_only_when_it_lacks_what_a_launch_needs(
    monkeypatch, tmp_path, imports_reference, jobs, held, restarted
):
    """``cli.main`` called twice in one process: a toy command's server lacks PyTorch's
    implementations; a later torch-ref launch stops it, so it starts again with them, while
    anything else keeps it (a running server cannot import more)."""
    import multiprocessing.forkserver

    from placement_edu.implementations import TorchRefConfig
    from placement_edu.runtime import RunConfig

    stopped: list[bool] = []
    monkeypatch.setattr(multiprocessing.forkserver, "set_forkserver_preload", lambda m: None)
    monkeypatch.delenv("PLACEMENT_EDU_START_METHOD", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(forkserver, "running", lambda: True)
    monkeypatch.setattr(forkserver, "stop", lambda: stopped.append(True))
    monkeypatch.setattr(forkserver, "_imports_reference", imports_reference)
    monkeypatch.setattr(forkserver, "_holders", {1} if held else set())
    job = TorchRefConfig("ddp", 2) if jobs == "ddp" else RunConfig("zero3", 4)
    assert forkserver.start_method([job]) == "forkserver"
    assert stopped == ([True] if restarted else [])
    assert forkserver._imports_reference is (imports_reference or restarted)
