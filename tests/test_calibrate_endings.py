"""A signal whose exception is swallowed on its way is not lost (issue 43): ``calibrate`` imports
torch in its own process (its ``Calibration`` jobs), and ``import torch`` imports numpy from C
(``torch._C``'s init) and clears any error that import raises -- so a SIGTERM in that moment ran
the handler, its ``_Stop`` vanished, and the command calibrated to the end and exited 0 with its
report (2 of 3 full-suite runs under load, at 0.5 s; 2 of 60 delays from 0.05 to 3 s under two busy
loops, and a third a 60-line RuntimeError traceback: Python 3.11 wraps what a ``__set_name__``
raises). The command's ending mechanism (``launcher.ends_as_a_run``) now keeps the signal until its
ending takes it, and raises it again at the command's next phase, or as it ends.

Each test stops its command at that moment, found as the others are (``test_command_endings``): a
finder on the command's import path says when the moment has come (a file, outside TMPDIR) and
waits there for the signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placement_edu.cli.calibrate import CURVE
from tests.test_command_endings import _ended
from tests.test_runtime_endings import _all_gone, _start

pytestmark = pytest.mark.runtime

#: The command (``placement_edu.cli.main``, as the script ``placement-edu``: its process takes the
#: signals), with a finder that, when ``sys.argv[1]`` is imported from within ``sys.argv[2]``'s
#: import (or at all: "-"), makes the file ``sys.argv[4]`` and waits up to 20 s for a signal;
#: ``sys.argv[3]``: what the wait does with what the signal raises -- "swallow" it, as a
#: library's bare ``except`` would, "convert" it into another error, or "raise" it on.
COMMAND = """
import sys, time

module, within, how, marker = sys.argv[1:5]
del sys.argv[1:5]
sys.argv[0] = "placement-edu"


class Moment:
    def find_spec(self, name, path=None, target=None):
        if name == module and (within == "-" or within in sys.modules):
            sys.meta_path.remove(self)
            open(marker, "w").close()
            deadline = time.monotonic() + 20
            try:
                while time.monotonic() < deadline:
                    time.sleep(0.01)
            except BaseException as error:
                if how == "convert":  # as Python 3.11 wraps what a __set_name__ raises
                    raise RuntimeError(f"Error calling __set_name__: {error!r}") from error
                if how != "swallow":
                    raise
        return None


sys.meta_path.insert(0, Moment())
from placement_edu.cli import main

sys.exit(main())
"""


def _stopped_at(moment: list[str], argv: list[str], tmp: Path, marker: Path) -> str:
    """Run the command ``argv``; SIGTERM it once ``moment`` has come; its one line."""
    command = _start([sys.executable, "-c", COMMAND, *moment, str(marker), *argv], tmp)
    try:
        _when(marker, command)
        os.kill(command.pid, signal.SIGTERM)
        return _ended(command, signal.SIGTERM, 143, tmp)
    finally:
        command.kill()


def _when(marker: Path, command: subprocess.Popen) -> None:
    """Once the command's finder has made ``marker`` (the moment has come)."""
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and command.poll() is None, (
            f"the command never reached its moment: {command.communicate()[1][-2000:]}"
        )
        time.sleep(0.005)


def test_a_sigterm_while_torchs_import_imports_numpy_ends_calibrate_in_one_line(
    run_tmpdir, tmp_path
):
    """The moment calibrate's SIGTERM was lost in: torch._C's init importing numpy (exit 0 and
    the report before; now the line, before any process started, in a few seconds)."""
    moment = ["numpy", "torch", "raise"]
    argv = ["calibrate", "--world-sizes", "2", "--repeats", "1"]
    line = _stopped_at(moment, argv, run_tmpdir, tmp_path / "moment")
    assert line == "placement-edu: interrupted by SIGTERM: before any process started", line


@pytest.mark.parametrize("how", ["swallow", "convert"])
def test_a_signal_swallowed_on_its_way_still_ends_a_run_in_one_line(run_tmpdir, tmp_path, how):
    """The mechanism, for every command: here ``run``, whose stop is swallowed (exit 0 and the
    report before), or turned into another error (a traceback, exit 1: Python 3.11 wraps what a
    ``__set_name__`` raises in a RuntimeError, and calibrate's torch import hit that under load)
    as its launch's agent module is imported: the run does not start."""
    moment = ["placement_edu.runtime.processes.agent", "-", how]
    argv = ["run", "zero3", "--world-size", "2", "--steps", "2"]
    line = _stopped_at(moment, argv, run_tmpdir, tmp_path / "moment")
    assert line == "placement-edu: interrupted by SIGTERM: before any process started", line


def test_a_sigterm_as_calibrate_times_its_cpu_curve_names_that_phase(run_tmpdir, tmp_path):
    """After its run calibrate times this CPU's GEMM curve in its own process: a SIGTERM then
    said "before any process started" (the phase a finished launch leaves). Now the line names
    the curve; the run's report, printed before the signal, stays, and the curve is not printed."""
    moment = ["placement_edu.runtime.calibration.gpu_calibrate", "-", "raise"]
    two_sizes = ["--min-size", "10", "--max-size", "11"]
    argv = ["calibrate", "--world-sizes", "2", "--repeats", "1", *two_sizes]
    marker = tmp_path / "moment"
    command = _start([sys.executable, "-c", COMMAND, *moment, str(marker), *argv], run_tmpdir)
    try:
        _when(marker, command)
        os.kill(command.pid, signal.SIGTERM)
        out, err = command.communicate(timeout=60)
    finally:
        command.kill()
    assert command.returncode == 143, err[-3000:]
    assert err == f"placement-edu: interrupted by SIGTERM: {CURVE}\n", err[-3000:]
    assert "The this_machine preset" in out and "GEMM curve" not in out, out
    assert _all_gone(command.pid) == [] and list(run_tmpdir.iterdir()) == []
