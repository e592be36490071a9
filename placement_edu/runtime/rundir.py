"""One folder per run for every file the run makes -- progress, each failed rank's traceback, and
torch's own logs and error files -- removed on every ending. A folder whose process died without
removing it (killed by SIGKILL, say) is removed at the next start: its name carries the process id.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

PREFIX = "placement-edu-"


def make(kind: str) -> str:
    """A new folder ``placement-edu-<pid>-<kind>-…`` in the temporary directory (stale ones removed)."""
    remove_stale()
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{kind}-")


def remove(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def remove_stale() -> None:
    """Remove the run folders of processes that no longer exist."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        match = re.match(rf"{PREFIX}(\d+)-", name)
        if match and not _alive(int(match[1])):
            remove(os.path.join(root, name))


def logs(path: str):
    """torch's launcher logs (and its per-rank error files) inside ``path``, not in TMPDIR."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    return DefaultLogsSpecs(log_dir=os.path.join(path, "logs"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                            # another user's process
        return True
    return True
