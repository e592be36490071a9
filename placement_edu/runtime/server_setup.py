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
"""

from __future__ import annotations

from multiprocessing import spawn
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
