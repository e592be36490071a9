"""The command's first moments: a signal before the command has handlers of its own ends it in one
line, not by the OS's default action (no word at all) or a KeyboardInterrupt traceback.

The command imports its subcommands (~0.1 s) before its handler runs, and a command that starts
processes takes the signals only there (``launcher.ends_as_a_run``). Imported first by
``placement_edu.cli`` -- and only in the command's own process (``placement-edu``, ``python -m
placement_edu.cli``), never where a program or a test imports the package -- this module takes
them from then on: one line, ``before any process started`` (true until a command starts one,
and a command that does takes the signals from its handler's first line), and the exit status
128 + the signal, as Python exits (``SystemExit``: its clean-ups run). ``main`` hands them back as
it returns. A signal that comes in Python's import machinery (these first moments are mostly
imports) is taken a moment later: raised there, the ``SystemExit`` could be lost
(``rundir.unsafe_to_raise``).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

from placement_edu.runtime.processes.rundir import (
    BEFORE_ANY_PROCESS,
    SIGNALS,
    ending_line,
    later,
    unsafe_to_raise,
)


def _is_the_command() -> bool:
    """Whether this process is the command: its script, or ``python -m placement_edu.cli``."""
    argv = sys.orig_argv
    as_module = any(
        flag == "-m" and module in ("placement_edu.cli", "placement_edu.cli.__main__")
        for flag, module in zip(argv, argv[1:])
    )
    return as_module or os.path.basename(sys.argv[0]) == "placement-edu"


def _end(signum: int, frame: FrameType | None) -> None:
    if unsafe_to_raise(frame):  # (raised there, it could be lost: taken a moment later)
        later(signum)
        return
    print(ending_line(signum, BEFORE_ANY_PROCESS), file=sys.stderr)
    raise SystemExit(128 + signum)


#: The handlers this process had before this module took the signals (None: it did not).
_before = {sig: signal.getsignal(sig) for sig in SIGNALS} if _is_the_command() else None
for _sig in _before or ():
    signal.signal(_sig, _end)


def hand_back() -> None:
    """The signals back to the handlers they had before (the command has ended)."""
    for sig, handler in (_before or {}).items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
