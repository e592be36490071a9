"""Every command that starts processes ends as ``run`` does, on every signal and at every phase
(issue 43, items 2-4): one line naming where it was, exit 128 + the signal, no process left, the
TMPDIR the test sets as empty as before. One mechanism (``launcher.ends_as_a_run``) for ``run``,
``calibrate`` and ``fit --verify``; a rank killed or frozen while the ranks start is named first,
within seconds of its death or of the timeout (not torch's 30 s grace)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placement_edu.runtime.processes.launcher import AFTER_THE_RUN
from tests.test_runtime_endings import (
    _all_gone,
    _children,
    _script,
    _session,
    _start,
    _when_all_ranks_exist,
)

pytestmark = pytest.mark.runtime

SHORT = [sys.executable, "-m", "placement_edu.cli", "run", "zero3", "--world-size", "2"]
#: A ``fit --verify`` small enough for CI: GPT-2 on 2 fake ranks, 64 tokens (~5 s of tracking).
FIT = [sys.executable, "-m", "placement_edu.cli", "fit", "--model", "gpt2", "--devices", "2"]
FIT += ["--seq", "64", "--verify"]


def _ended(command, sig: signal.Signals, code: int, tmp: Path, within_s: float = 30) -> str:
    """``command``'s one line on stderr, once it has ended with ``code`` within ``within_s``,
    leaving no process and nothing in ``tmp``."""
    sent = time.monotonic()
    out, err = command.communicate(timeout=within_s + 30)
    took = time.monotonic() - sent
    assert command.returncode == code, err[-3000:]
    assert err.splitlines() == [err.strip()], err[-3000:]  # one line
    assert err.startswith(f"placement-edu: interrupted by {sig.name}: "), err
    assert out == ""  # no report: the signal is never lost
    assert took < within_s, f"ended {took:.1f} s after the signal"
    assert _all_gone(command.pid) == [] and list(tmp.iterdir()) == []
    return err.strip()


def _progress(tmp: Path) -> list[str]:
    return [p.read_text().split() for p in tmp.glob("placement-edu-*/progress") if p.exists()]


#: A run with rank 2 killed (or frozen) before it meets the others, as ``run`` launches it.
AT_START = """
import sys
from placement_edu.runtime import RunConfig, RunFailed
from placement_edu.runtime.processes import agent
from placement_edu.runtime.processes.failure import RankFailure
from placement_edu.runtime.processes.launcher import launch
try:
    failure = RankFailure(sys.argv[1], rank=2, at="start")
    with agent.for_a_command():
        launch([RunConfig("zero3", 4)], 4, timeout_s=float(sys.argv[2]), progress=False,
               failure=failure)
except RunFailed as error:
    print(error)
"""


@pytest.mark.parametrize(
    "kind, timeout_s, first",
    [
        # killed: ended within seconds of the death, not after the 30 s timeout (nor torch's 30 s)
        ("kill", 30, "rank 2 stopped first: it was killed by SIGKILL (it wrote no error)"),
        # frozen: the others' store times out (5 s); the frozen rank is named, not rank 0
        ("freeze", 5, "rank 2 stopped first: it hung (the others timed out waiting for it)"),
    ],
)
def test_a_rank_killed_or_frozen_while_the_ranks_start_is_named_first_within_seconds(
    run_tmpdir, kind, timeout_s, first
):
    command = _start([sys.executable, "-c", AT_START, kind, str(timeout_s)], run_tmpdir)
    try:
        started = _when_all_ranks_exist(run_tmpdir, command, 4)
        out, err = command.communicate(timeout=120)
    finally:
        command.kill()
    took = time.monotonic() - started
    assert out.splitlines()[0] == first, (out[:2000], err[-2000:])
    assert took < (5 if kind == "kill" else timeout_s + 5), f"named {took:.1f} s after the start"
    assert _all_gone(command.pid) == [] and list(run_tmpdir.iterdir()) == []


def _tracker_measuring(command) -> None:
    """Until the rank server has forked the tracker's process, then one second more."""
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline and command.poll() is None, command.stderr.read()
        servers = [
            pid
            for pid in _session(command.pid)
            if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        if servers and _children(servers[0]):
            break
        time.sleep(0.02)
    time.sleep(1)


@pytest.mark.parametrize(
    "sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)]
)
def test_fit_verify_ends_with_its_tracker_on_a_signal_mid_measurement(run_tmpdir, sig, code):
    """The command died by the default action; its tracker measured on to the end, then printed a
    28-line BrokenPipe traceback, and ``pymp-*`` stayed in TMPDIR. Ctrl-C goes to the group."""
    command = _start(FIT, run_tmpdir)
    try:
        _tracker_measuring(command)
        (os.killpg if sig == signal.SIGINT else os.kill)(command.pid, sig)
        line = _ended(command, sig, code, run_tmpdir, within_s=10)
    finally:
        command.kill()
    assert line.endswith(
        "stopped PyTorch's tracker measuring gpt2 on 2 fake ranks (its process ended)"
    )


#: Ctrl-C to the process group in the narrowest window: the server has been asked to fork the
#: tracker's process and has not yet answered with its process id.
TRACKER_FORKING = """
import os, signal, sys
from multiprocessing import forkserver, get_context
from placement_edu.runtime.processes import forkserver as server
from placement_edu.runtime.processes.launcher import ends_as_a_run
from placement_edu.runtime.measurement.peak_tracker import measure_in_subprocess

context = get_context(server.start_method())
ready = context.Process(target=int)  # (the server up and past its imports)
ready.start()
ready.join()
read_signed, reads = forkserver.read_signed, []

def ctrl_c_as_the_tracker_is_forked(fd):
    reads.append(fd)
    if len(reads) == 1:  # (its process id; later reads are exit statuses)
        os.killpg(0, signal.SIGINT)
    return read_signed(fd)

forkserver.read_signed = ctrl_c_as_the_tracker_is_forked
sys.exit(ends_as_a_run(lambda: measure_in_subprocess(model="gpt2", devices=2, seq=64) and 0))
"""


def test_ctrl_c_while_the_tracker_is_forked_is_one_line(run_tmpdir):
    """79 lines, among them ``'NoneType' object has no attribute 'kill'`` from
    ``TrackerProcess.close`` and the new process's KeyboardInterrupt."""
    command = _start([sys.executable, "-c", TRACKER_FORKING], run_tmpdir)
    try:
        line = _ended(command, signal.SIGINT, 130, run_tmpdir)
    finally:
        command.kill()
    assert "PyTorch's tracker measuring gpt2" in line


def test_a_command_killed_as_its_server_starts_leaves_a_folder_the_next_run_removes(run_tmpdir):
    """SIGKILLed once the rank server's socket exists and before any rank does, the command left
    ``pymp-*/listener-*`` in TMPDIR for good: ``rundir.remove_stale`` knew only
    ``placement-edu-<pid>-*``. Now the folder carries ``placement-edu-<pid>`` and the next run
    removes it; a ``pymp-*`` folder without that mark (another program's), or with a live
    process's, is left alone."""
    others = run_tmpdir / "pymp-another-program", run_tmpdir / "pymp-a-live-one"
    for folder in others:
        folder.mkdir(parents=True)
    (others[0] / "listener-1").write_text("")
    (others[1] / f"placement-edu-{os.getpid()}").write_text("")  # (this test's process: alive)
    command = _start(SHORT + ["--steps", "2"], run_tmpdir)
    try:
        deadline = time.monotonic() + 60
        while not [p for p in run_tmpdir.glob("pymp-*/listener-*") if p.parent not in others]:
            assert time.monotonic() < deadline and command.poll() is None, command.stderr.read()
            time.sleep(0.005)
        os.kill(command.pid, signal.SIGKILL)
        command.communicate(timeout=30)
        assert _all_gone(command.pid, within_s=30) == []
    finally:
        command.kill()
    left = {p.name for p in run_tmpdir.iterdir()} - {p.name for p in others}
    assert [name[:5] for name in left] == ["pymp-"], left  # what the next run has to remove
    again = _start(SHORT + ["--steps", "1"], run_tmpdir)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err[-3000:]
    assert sorted(run_tmpdir.iterdir()) == sorted(others)
    assert sorted(p.name for p in others[0].iterdir()) == ["listener-1"]


TORCH_REF = [sys.executable, "-m", "placement_edu.cli", "torch-ref", "ddp", "--world-size", "2"]


def test_torch_ref_ends_as_run_does_on_a_sigterm_mid_run(run_tmpdir):
    """``torch-ref`` ends through the same mechanism as ``run`` (``ends_as_a_run``, from its
    handler's first line): one line, 143, no process, nothing in TMPDIR -- and, as ``run``'s
    does, the line names the step (issue 43: torch-ref's ranks wrote no progress, and its line
    ended "stopped 2 ranks while they were starting" mid-run)."""
    command = _start(TORCH_REF + ["--steps", "1000"], run_tmpdir)
    try:
        while not any(_progress(run_tmpdir)):
            assert command.poll() is None, command.stderr.read()[-2000:]
            time.sleep(0.05)
        os.kill(command.pid, signal.SIGTERM)
        line = _ended(command, signal.SIGTERM, 143, run_tmpdir)
    finally:
        command.kill()
    assert line.startswith(
        "placement-edu: interrupted by SIGTERM: stopped 2 ranks of ddp on 2 ranks, "
    ), line
    assert re.search(r" after step \d+ of 1000$", line), line


#: The command's process (its script's name) signalled as ``placement_edu.cli`` has been imported,
#: before ``main`` runs: the subcommands' imports, ~0.1 s before any handler of a command's own.
SIGNALLED_AS_IT_IMPORTS = """
import os, signal, sys, time
sys.argv[0] = "placement-edu"
import placement_edu.cli
os.kill(os.getpid(), getattr(signal, sys.argv[1]))
time.sleep(5)
"""


@pytest.mark.parametrize(
    "sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]
)
def test_a_signal_while_the_command_imports_its_subcommands_is_one_line(run_tmpdir, sig, code):
    """The command died by the default action (no line), or with a KeyboardInterrupt traceback
    from the middle of an import: its handlers came with its handler's first line (~0.15 s)."""
    ended = _script(SIGNALLED_AS_IT_IMPORTS.replace("sys.argv[1]", repr(sig.name)), run_tmpdir)
    assert ended.returncode == code, ended.stderr[-2000:]
    assert ended.stderr == f"placement-edu: interrupted by {sig.name}: before any process started\n"
    assert list(run_tmpdir.iterdir()) == []


def _when_execed(pid: int, within_s: float = 10.0) -> None:
    """Once ``pid`` runs the command's own program (its /proc cmdline is the command's), not the
    copy of this process that ``fork`` made."""
    until = time.monotonic() + within_s
    while time.monotonic() < until:
        try:
            if b"placement_edu.cli" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return
        except OSError:
            return  # (already gone: the assertions below say how it ended)
        time.sleep(0.0005)


#: The ending table's row for a signal before any code of the command runs (docs/reliability.md).
START_UP_ROW = "| Ctrl-C, SIGTERM, SIGHUP, SIGQUIT during Python's own start-up"


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGINT], ids=lambda s: s.name
)
def test_a_signal_in_pythons_own_start_up_ends_as_the_ending_table_says(run_tmpdir, sig):
    """Issue 43: a signal in the command's first ~0.03 s, while Python itself starts (before
    ``placement_edu.cli``'s first import, ``cli/entry.py``, can take it), ends with no line: no
    code of the command has run, so this window cannot be closed. The ending table says what
    happens there instead of promising the line, row by row: the status in its exit column, the
    signal's default action (no word) or, for Ctrl-C, Python's own KeyboardInterrupt traceback,
    and nothing left behind."""
    table = (Path(__file__).parent.parent / "docs" / "reliability.md").read_text()
    (row,) = [line for line in table.splitlines() if line.startswith(START_UP_ROW)]
    _, printed, exits, left, _ = (cell.strip() for cell in row.strip().strip("|").split("|"))
    assert "KeyboardInterrupt" in printed and left.startswith("nothing")
    # started as a shell starts a command: Ctrl-C at its default (a pytest-xdist worker ignores
    # SIGINT, and an ignored disposition is inherited across exec: Python would then never see it)
    command = subprocess.Popen(
        SHORT + ["--steps", "2"],
        env=dict(os.environ, TMPDIR=str(run_tmpdir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _when_execed(command.pid)  # (between fork and exec a caught SIGINT would be lost)
        os.kill(command.pid, sig)  # at once: Python takes ~10 ms to start before any import
        out, err = command.communicate(timeout=60)
    finally:
        command.kill()
    code = 128 + sig if command.returncode == -sig else command.returncode  # (as a shell says)
    if err.startswith("placement-edu: interrupted by"):  # (a loaded machine: start-up was over)
        assert (code, err.count("\n")) == (128 + sig, 1), err[-2000:]
    elif sig == signal.SIGINT and err:  # Python's own traceback from the import it stopped
        assert re.search(rf"\b{code}\b", exits), (code, exits, err[-2000:])
        assert code == 1 and err.rstrip().endswith("KeyboardInterrupt"), err[-2000:]
    else:
        assert re.search(rf"\b{code}\b", exits), (code, exits, err[-2000:])
        assert (code, err) == (128 + sig, ""), err[-2000:]
    assert out == "" and _all_gone(command.pid) == [] and list(run_tmpdir.iterdir()) == []


def test_a_program_that_imports_the_cli_keeps_its_signals_and_main_hands_them_back():
    """Only the command's own process takes the signals early: a program (this test) that imports
    ``placement_edu.cli`` keeps Python's, and so does the command once ``main`` returns."""
    code = """
import signal, sys
import placement_edu.cli
print("SIG", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
sys.argv[0] = "placement-edu"
import importlib
importlib.reload(placement_edu.cli.entry)
print("SIG", signal.getsignal(signal.SIGTERM) is placement_edu.cli.entry._end)
placement_edu.cli.main(["check", "dp"])
print("SIG", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    said = [line for line in done.stdout.splitlines() if line.startswith("SIG ")]
    assert said == ["SIG True"] * 3, done.stderr[-2000:]


def test_a_sigterm_at_the_first_moment_the_command_takes_it_is_one_line(run_tmpdir):
    """Sent as soon as the kernel shows SIGTERM caught (``SigCgt`` in /proc): the command's line,
    143, nothing left -- at every moment from there on. (The command is still importing then: a
    signal in Python's import machinery is taken once the import is safe to stop,
    ``rundir.unsafe_to_raise``, by when the command may have started its agent.)"""
    command = _start(SHORT + ["--steps", "2"], run_tmpdir)
    try:
        deadline = time.monotonic() + 30
        while not _catches(command.pid, signal.SIGTERM):
            assert time.monotonic() < deadline and command.poll() is None, command.stderr.read()
        os.kill(command.pid, signal.SIGTERM)
        line = _ended(command, signal.SIGTERM, 143, run_tmpdir)
    finally:
        command.kill()
    assert line in [
        f"placement-edu: interrupted by SIGTERM: {where}" for where in PHASES["early"][:2]
    ]


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether process ``pid`` has a handler of ``sig`` (its ``SigCgt`` mask, /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt"))
    return bool(int(caught, 16) >> (sig - 1) & 1)


#: Every signal README's ending table lists, with its exit status; SIGINT goes to the command's
#: whole process group, as a terminal's Ctrl-C does, the others to the command alone.
ENDINGS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGQUIT, 131)]
#: Where a short run can be, and what its line may then say: its first second (the command has
#: its handlers; the ranks may not have started), mid-run, and its last moments (rank 0 has
#: written the last step: the run may have ended, its report never printed).
PHASES = {
    "early": (
        "before any process started",
        "before its ranks started",
        "stopped 2 ranks while they were starting",
        "stopped 2 ranks of zero3",
    ),
    "mid-run": ("stopped 2 ranks of zero3 on data=2 after step ",),
    "last moments": (
        "stopped 2 ranks of zero3 on data=2 after step 3 of 3",
        "after the run ended, before its report was printed",
    ),
}


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("sig, code", ENDINGS, ids=lambda v: getattr(v, "name", str(v)))
def test_every_signal_at_every_phase_of_a_run_ends_it_in_one_line(run_tmpdir, phase, sig, code):
    """Issue 43: each signal, at each phase of a short run, ends it with one line naming where
    it was, 128 + the signal, no process left and TMPDIR as found. What each phase caught:

    - early (0.5 s in: the command has its handlers from its handler's first line, ~0.15 s): the
      rank server's ``pymp-*/listener-*`` stayed in TMPDIR, and the command died with no line;
    - mid-run: SIGHUP and SIGQUIT died by the default action (exit 129 or 131, no line), a
      regression since the launch moved into an agent;
    - last moments (rank 0 has written the last step; the run ends within a second): the signal
      was lost (exit 0 and the report, 3 of 4), or a ``_Stop: 15`` traceback."""
    steps = {"early": 2, "mid-run": 2000, "last moments": 3}[phase]
    command = _start(SHORT + ["--steps", str(steps)], run_tmpdir)
    try:
        if phase == "early":
            time.sleep(0.5)
        else:
            last = ["3", "3"] if phase == "last moments" else None
            while not any(last in (None, line[2:4]) for line in _progress(run_tmpdir)):
                assert command.poll() is None, command.stderr.read()[-2000:]
                time.sleep(0.005)
        (os.killpg if sig == signal.SIGINT else os.kill)(command.pid, sig)
        line = _ended(command, sig, code, run_tmpdir)
    finally:
        command.kill()
    where = line.removeprefix(f"placement-edu: interrupted by {sig.name}: ")
    assert where.startswith(PHASES[phase]), line


@pytest.mark.parametrize("when", ["its run folder exists", "its first rank exists"])
def test_a_sigterm_as_a_short_run_starts_names_where_it_came_never_after_the_run(run_tmpdir, when):
    """Issue 43: a SIGTERM to the command alone as a short run's ranks started (0.15-0.25 s in,
    on an idle machine) said "after the run ended": the command passed it on to its agent a second
    late (``launcher._after_signal`` waited for the agent to answer first, in case the signal had
    reached it too), and a run of two steps had ended meanwhile. Now it is passed on at once (a
    second signal, from the group, changes nothing in the agent), and the line names where the
    run was."""
    command = _start(SHORT + ["--steps", "2"], run_tmpdir)
    made = "placement-edu-*-run*" if when == "its run folder exists" else "placement-edu-*/pid-*"
    try:
        deadline = time.monotonic() + 60
        while not list(run_tmpdir.glob(made)):
            assert time.monotonic() < deadline and command.poll() is None, command.stderr.read()
            time.sleep(0.002)
        os.kill(command.pid, signal.SIGTERM)
        line = _ended(command, signal.SIGTERM, 143, run_tmpdir)
    finally:
        command.kill()
    assert line.removeprefix("placement-edu: interrupted by SIGTERM: ").startswith(
        PHASES["early"]
    ), line


def test_a_signal_while_the_rank_server_starts_stops_the_run_before_its_ranks(run_tmpdir):
    """Issue 43: a SIGTERM while the command waits for its agent to start (the rank server takes
    seconds to import torch) was put off until the agent was known -- which then ran the short
    run to its end, and the line said "after the run ended". Now the agent is ended as it starts,
    before any rank: the line says so, and nothing is left."""
    command = _start(SHORT + ["--steps", "2"], run_tmpdir)
    try:
        while not list(run_tmpdir.glob("pymp-*/listener-*")):  # the rank server is starting
            assert command.poll() is None, command.stderr.read()[-2000:]
            time.sleep(0.002)
        os.kill(command.pid, signal.SIGTERM)
        line = _ended(command, signal.SIGTERM, 143, run_tmpdir)
    finally:
        command.kill()
    assert line == "placement-edu: interrupted by SIGTERM: before its ranks started", line


#: The other commands that start ranks: the context and expert axes' runs, and calibrate.
LAUNCHING = {
    "context": ["run", "dp×cp_ulysses", "--world-size", "2", "--mesh", "data=1,context=2"],
    "expert": ["run", "dp", "--world-size", "2", "--mesh", "data=1,expert=2"],
    "calibrate": ["calibrate", "--world-sizes", "2", "--repeats", "1"],
}


@pytest.mark.parametrize("name", LAUNCHING)
@pytest.mark.parametrize(
    "phase, sig, code",
    [
        ("early", signal.SIGTERM, 143),
        ("ranks up", signal.SIGTERM, 143),
        ("ranks up", signal.SIGINT, 130),
    ],
)
def test_the_axes_runs_and_calibrate_end_as_run_does(run_tmpdir, name, phase, sig, code):
    """Issue 43: every command that starts processes ends as ``run`` does -- one line naming
    where, 128 + the signal, its ranks ended with it, TMPDIR as found -- early (its first half
    second) and once its ranks are up."""
    command = _start([sys.executable, "-m", "placement_edu.cli", *LAUNCHING[name]], run_tmpdir)
    try:
        if phase == "early":
            time.sleep(0.5)
        else:
            _when_all_ranks_exist(run_tmpdir, command, 2)
        (os.killpg if sig == signal.SIGINT else os.kill)(command.pid, sig)
        line = _ended(command, sig, code, run_tmpdir)
    finally:
        command.kill()
    where = line.removeprefix(f"placement-edu: interrupted by {sig.name}: ")
    # Once the ranks are up, a run this short may end in the second the command gives its agent
    # to answer a signal sent to the command alone (launcher._after_signal): then it ended, and its
    # report is not printed.
    said = PHASES["early"] + (("stopped 2 ranks", AFTER_THE_RUN) if phase == "ranks up" else ())
    assert where.startswith(said), line
