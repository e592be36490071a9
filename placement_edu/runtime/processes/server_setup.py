"""What the forkserver does once when it starts, beyond importing torch: its ranks are told of no
``__main__``.

Python's multiprocessing makes each new process import the parent's main module again (as
``__mp_main__``), so that functions defined in a script can be sent to it; that is why its guide
asks for ``if __name__ == "__main__":`` around a script's top-level code. Our ranks run package
code only (``worker.main``, ``worker.pool_main``) and are sent only package types, so they need
nothing from the script that started them -- and re-running it fails twice over: a script read
from standard input has no file to re-run (``python - < script.py``), and a script without the
guard would start the run again in every rank.

This module is imported by the forkserver alone (``forkserver.PRELOAD``), never by the learner's
process: in that server, every rank it forks prepares itself without the main module.

And a rank whose launch stopped while it was being forked ends quietly. Ctrl-C can come between the
server's fork and the launcher learning the new rank's pid: the launcher stops the ranks it knows
and lets go of the run's semaphores, and the one it did not know then fails to unpickle them
(``SemLock._rebuild``: FileNotFoundError). The server prints such a failure with
``sys.excepthook``, onto the learner's terminal; ``quiet_if_its_launch_is_gone`` prints nothing
for that one case, and every other failure as before.

Ctrl-C is the launcher's to handle, not the server's: it ignores SIGINT from its first import on
(multiprocessing's server does so only after all of them: a Ctrl-C to the terminal's process group
while it imported torch killed it with a KeyboardInterrupt traceback, and the launch that was
forking from it failed). What it forks inherits that until it chooses (``worker._start_rank``, the
agent, ``peak_tracker._serve``).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from multiprocessing import spawn
from types import TracebackType
from typing import Any, Mapping

#: The keys of multiprocessing's preparation data that make a new process re-run the parent's main
#: module, by module name (``python -m script``) or by path (``python script.py``).
MAIN_KEYS = ("init_main_from_name", "init_main_from_path")

_prepare = spawn.prepare


def prepare_without_main(data: Mapping[str, Any]) -> None:
    """multiprocessing's own preparation of a new process (its ``sys.path``, working folder, name),
    less re-running the parent's main module."""
    _prepare({key: value for key, value in data.items() if key not in MAIN_KEYS})


spawn.prepare = prepare_without_main


def quiet_if_its_launch_is_gone(
    kind: type[BaseException], error: BaseException, trace: TracebackType | None
) -> None:
    """``sys.excepthook`` of the server and its forks: silent for a new process whose launcher has
    already removed a semaphore it was sent (FileNotFoundError raised where multiprocessing rebuilds
    one, ``synchronize.SemLock.__setstate__``), the default hook otherwise."""
    innermost = traceback.extract_tb(trace)[-1:]
    if isinstance(error, FileNotFoundError) and [
        (os.path.basename(f.filename), f.name) for f in innermost
    ] == [("synchronize.py", "__setstate__")]:
        return
    sys.__excepthook__(kind, error, trace)


sys.excepthook = quiet_if_its_launch_is_gone
signal.signal(signal.SIGINT, signal.SIG_IGN)
