"""A signal is never lost, wherever it comes (issue 43). ``calibrate`` imports torch in its own
process (its ``Calibration`` jobs), and ``import torch`` imports numpy from C (``torch._C``'s init)
and clears any error that import raises: a SIGTERM in that moment ran the handler, its ``_Stop``
vanished, and the command calibrated to the end and exited 0 with its report (2 of 3 full-suite runs
under load, at 0.5 s). Imports lose a handler's exception in other ways too: the compiler of a
module's source drops it, a module lock's weakref callback ignores it, Python 3.11 wraps what a
``__set_name__`` raises in a RuntimeError, and one raised inside a module lock leaves it half-taken
(a KeyError traceback): a SIGTERM as the command imported its subcommands printed the line and ran
on to exit 0 in 4 of 198 delays from 0.08 to 0.4 s under two busy loops, and was a KeyError
traceback in 1. Both handlers (``cli.entry``'s, ``launcher.ends_as_a_run``'s) now put a signal that
comes there off a moment (``rundir.unsafe_to_raise``), and ``ends_as_a_run`` keeps a stop until its
ending takes it, raising it again at the command's next phase or as it ends, should anything else
(C code: torch's) swallow it.

Each test signals its command at one moment, found as the others are (``test_command_endings``): the
command, given a hook, makes a file (outside TMPDIR) when the moment has come and waits there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placement_edu.cli.calibrate import CURVE
from placement_edu.runtime.processes.rundir import unsafe_to_raise
from tests.test_command_endings import _ended
from tests.test_runtime_endings import _all_gone, _start

pytestmark = pytest.mark.runtime

#: The line of a signal taken before any rank started (one swallowed in torch's import is taken at
#: the command's next phase: by then its rank server and agent may be on their way).
EARLY = tuple(
    f"placement-edu: interrupted by SIGTERM: {where}"
    for where in ("before any process started", "before its ranks started")
)

#: The command (``placement_edu.cli.main``, as the script ``placement-edu``: its process takes the
#: signals) with a hook at the moment ``sys.argv[1:3]`` names: ("import", module) -- the module is
#: imported ("numpy@torch": while torch is); or ("call", "module:function") -- the function is
#: called. There it makes
#: the file ``sys.argv[4]`` and waits for the file ``sys.argv[4]`` + ".sent" (the signal was sent),
#: and a moment more. ``sys.argv[3]``: what the wait does with what a handler raises meanwhile --
#: "raise" it on, "swallow" it (as a library's bare ``except`` would), or "convert" it into another
#: error (as Python 3.11 does with what a ``__set_name__`` raises).
COMMAND = """
import importlib, os, sys, time

kind, name, how, marker = sys.argv[1:5]
del sys.argv[1:5]
sys.argv[0] = "placement-edu"


def wait_for_the_signal():
    open(marker, "w").close()
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(marker + ".sent") and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # (the handler has run)
    except BaseException as error:
        if how == "convert":
            raise RuntimeError(f"Error calling __set_name__: {error!r}") from error
        if how != "swallow":
            raise


class Moment:
    def find_spec(self, module, path=None, target=None):
        wanted, _, within = name.partition("@")
        if module == wanted and (not within or within in sys.modules):
            sys.meta_path.remove(self)
            wait_for_the_signal()
        return None


if kind == "import":
    sys.meta_path.insert(0, Moment())
else:
    module, function = name.split(":")
    module = importlib.import_module(module)
    called = getattr(module, function)

    def at_the_moment(*args, **kwargs):
        wait_for_the_signal()
        return called(*args, **kwargs)

    setattr(module, function, at_the_moment)
from placement_edu.cli import main

sys.exit(main())
"""


def _signalled(moment: list[str], argv: list[str], tmp: Path, marker: Path) -> subprocess.Popen:
    """The command ``argv``, sent SIGTERM once ``moment`` (kind, name, how) has come."""
    command = _start([sys.executable, "-c", COMMAND, *moment, str(marker), *argv], tmp)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and command.poll() is None, (
            f"the command never reached {moment}: {command.communicate()[1][-2000:]}"
        )
        time.sleep(0.005)
    os.kill(command.pid, signal.SIGTERM)
    marker.with_name(marker.name + ".sent").touch()
    return command


def _line(moment: list[str], argv: list[str], tmp: Path, marker: Path) -> str:
    """The one line the command ``argv`` ends with, signalled at ``moment``."""
    command = _signalled(moment, argv, tmp, marker)
    try:
        return _ended(command, signal.SIGTERM, 143, tmp)
    finally:
        command.kill()


def test_a_sigterm_while_torchs_import_imports_numpy_ends_calibrate_in_one_line(
    run_tmpdir, tmp_path
):
    """The moment calibrate's SIGTERM was lost in: torch._C's init importing numpy (exit 0 and
    the report before; now the line, once the import has ended)."""
    argv = ["calibrate", "--world-sizes", "2", "--repeats", "1"]
    line = _line(["import", "numpy@torch", "raise"], argv, run_tmpdir, tmp_path / "moment")
    assert line in EARLY, line


@pytest.mark.parametrize("how", ["swallow", "convert"])
def test_a_stop_swallowed_on_its_way_still_ends_a_run_in_one_line(run_tmpdir, tmp_path, how):
    """The mechanism, for every command: here ``run``, whose stop is swallowed (exit 0 and the
    report before) or turned into another error (a traceback, exit 1) as it enters its launch:
    the run does not start."""
    moment = ["call", "placement_edu.runtime.processes.agent:for_a_command", how]
    argv = ["run", "zero3", "--world-size", "2", "--steps", "2"]
    line = _line(moment, argv, run_tmpdir, tmp_path / "moment")
    assert line == "placement-edu: interrupted by SIGTERM: before any process started", line


def test_a_sigterm_as_calibrate_times_its_cpu_curve_names_that_phase(run_tmpdir, tmp_path):
    """After its run calibrate times this CPU's GEMM curve in its own process: a SIGTERM then
    said "before any process started" (the phase a finished launch leaves). Now the line names
    the curve; the run's report, printed before the signal, stays, and the curve is not printed."""
    moment = ["call", "placement_edu.cli.calibrate:_cpu_curve", "raise"]
    two_sizes = ["--min-size", "10", "--max-size", "11"]
    argv = ["calibrate", "--world-sizes", "2", "--repeats", "1", *two_sizes]
    command = _signalled(moment, argv, run_tmpdir, tmp_path / "moment")
    try:
        out, err = command.communicate(timeout=60)
    finally:
        command.kill()
    assert command.returncode == 143, err[-3000:]
    assert err == f"placement-edu: interrupted by SIGTERM: {CURVE}\n", err[-3000:]
    assert "The this_machine preset" in out and "GEMM curve" not in out, out
    assert _all_gone(command.pid) == [] and list(run_tmpdir.iterdir()) == []


class _Named:
    def __set_name__(self, owner: type, name: str) -> None:
        self.unsafe = unsafe_to_raise(sys._getframe())


class _Moment:
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "placement_edu_no_such_module":
            self.here = unsafe_to_raise(sys._getframe())
            self.machinery = unsafe_to_raise(sys._getframe(1))


def test_what_a_handler_raises_is_unsafe_in_the_import_machinery_and_under_a_set_name():
    """Where the handlers put a signal off: the import machinery's own frames (where the loaded
    sweep lost it: the compiler, a module lock's callback, a lock's acquire), and under a
    ``__set_name__``; not in a module's own code, such as a finder's or this test's."""
    moment = _Moment()
    sys.meta_path.insert(0, moment)
    try:
        with pytest.raises(ModuleNotFoundError):
            import placement_edu_no_such_module  # noqa: F401
    finally:
        sys.meta_path.remove(moment)
    assert (moment.here, moment.machinery) == (False, True)
    assert type("Owner", (), {"named": _Named()}).named.unsafe is True
    assert unsafe_to_raise(sys._getframe()) is False
