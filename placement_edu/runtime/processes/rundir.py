"""One folder per run for every file the run makes -- progress, each failed rank's traceback, and
torch's own logs and error files -- removed on every ending. A folder whose process died without
removing it (killed by SIGKILL, say) is removed at the next start: its name carries the process id.
Such a death prints nothing either (``quiet_resource_tracker``), and the ranks see their parent gone
and exit (the watchdog in ``worker.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where the launcher starts ranks
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

PREFIX = "placement-edu-"

#: The signals a command that starts processes ends on with one line (``launcher.ends_as_a_run``;
#: before that, ``cli.entry``): its processes ended and this module's folders removed on the way.
SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)
#: Where a command was, as that line says, when the signal came before it started any process.
BEFORE_ANY_PROCESS = "before any process started"


def signal_handlers() -> dict | None:
    """This process's handlers of ``SIGNALS``, to put back after a launch (main thread only:
    elsewhere torch installs none)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {sig: signal.getsignal(sig) for sig in SIGNALS}


def restore_handlers(handlers: dict | None) -> None:
    """Put back what ``signal_handlers`` read."""
    for sig, handler in (handlers or {}).items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def ending_line(signum: int, where: str) -> str:
    """The one line a command stopped by signal ``signum`` prints: which signal, and where."""
    return f"placement-edu: interrupted by {signal.Signals(signum).name}: {where}"


def unsafe_to_raise(frame: FrameType | None) -> bool:
    """Whether what a signal's handler raises in ``frame`` could be lost or garbled: in Python's
    import machinery (the compiler of a module's source drops it, a module lock's weakref callback
    ignores it, and one raised in a module lock leaves the lock half-taken: a KeyError traceback
    at the next import), or under a ``__set_name__`` (Python 3.11 turns it into a RuntimeError).
    The handler puts the signal off a moment (``later``)."""
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        return True
    while frame is not None:
        if frame.f_code.co_name == "__set_name__":
            return True
        frame = frame.f_back
    return False


#: Seconds after which a signal put off is sent to this process again (``later``).
RETRY_SIGNAL_S = 0.02


def later(signum: int) -> None:
    """Send ``signum`` to this process again in ``RETRY_SIGNAL_S``: its handler takes it then."""
    threading.Timer(RETRY_SIGNAL_S, os.kill, (os.getpid(), signum)).start()


def make(kind: str) -> str:
    """A new folder ``placement-edu-<pid>-<kind>-…`` in the temporary directory (stale ones
    removed)."""
    remove_stale()
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{kind}-")


def remove(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def inductor_cache() -> Iterator[None]:
    """Torch's compiler cache ("torchinductor_<user>", made when its memory tracker is imported)
    in a run folder of this process while the block runs, the folder removed after: TMPDIR is
    left as found (a killed process's folder is removed at the next start)."""
    scratch, before = make("inductor"), os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = scratch
    try:
        yield
    finally:
        remove(scratch)
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def remove_stale() -> None:
    """Remove the run folders of processes that no longer exist, and their multiprocessing
    folders (``pymp-…``, where the rank server's socket lives) that carry our mark: one whose
    process was killed before any rank existed has nobody else to remove it (``worker._leave``
    is a rank's). A ``pymp-…`` folder without the mark is another program's: never touched."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        match = re.match(rf"{PREFIX}(\d+)-", name)
        pid = int(match[1]) if match else marked_by(os.path.join(root, name))
        if pid is not None and not alive(pid):
            remove(os.path.join(root, name))


def mark(path: str) -> None:
    """Mark ``path``, this process's multiprocessing folder, as ours: ``placement-edu-<pid>``
    inside it (``forkserver.start_method``, as it starts the server). Python removes the folder as
    the process exits; if it is killed, ``remove_stale`` does at the next run."""
    open(os.path.join(path, f"{PREFIX}{os.getpid()}"), "w").close()


def marked_by(path: str) -> int | None:
    """The process id in ``path``'s mark, if ``path`` is a ``pymp-…`` folder that carries one."""
    if not os.path.basename(path).startswith("pymp-"):
        return None
    try:
        names = os.listdir(path)
    except OSError:  # not a folder, gone meanwhile, or another user's
        return None
    for name in names:
        match = re.fullmatch(rf"{PREFIX}(\d+)", name)
        if match:
            return int(match[1])
    return None


def remove_torch_error_files(since: float) -> None:
    """Remove the empty error files (``pytorch-errorfile-*.pickle``) this launch's interruption
    left in TMPDIR. torch's launcher makes one per rank it starts and deletes it at once (a rank
    writes it only to report a failure); a Ctrl-C between the two leaves it behind. Only empty ones
    made since ``since`` (the launch's start) are removed: a failed rank's report is never empty."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        if name.startswith("pytorch-errorfile-") and name.endswith(".pickle"):
            path = os.path.join(root, name)
            try:
                info = os.stat(path)
                if info.st_size == 0 and info.st_mtime >= since:
                    os.unlink(path)
            except FileNotFoundError:  # deleted meanwhile
                pass


def logs(path: str) -> DefaultLogsSpecs:
    """torch's launcher logs (and its per-rank error files) inside ``path``, not in TMPDIR, and
    each rank's stderr there too: a rank still meeting its peers when a run is stopped prints
    c10d's warning and a C++ stack as the store goes away -- noise, not the one line a stopped run
    prints. What a failed rank has to say is its traceback, which ``worker._fail`` leaves apart."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std

    return DefaultLogsSpecs(log_dir=os.path.join(path, "logs"), redirects=Std.ERR)


#: Linux's task flag "exiting" (``PF_EXITING``, the 9th field of ``/proc/PID/stat``).
PF_EXITING = 0x4


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs. A zombie (ended, not yet reaped by its parent) does not:
    a killed kernel stays one until the Jupyter server notices. Nor does a process that is
    exiting: the kernel sets ``PF_EXITING`` before it closes the process's sockets, so a rank that
    lost its connection to a dying owner already sees it gone, not still running (a warm pool's
    ranks then exited without removing its folders: 4 SIGTERMs in 30 under load)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # no /proc here (macOS): it runs
        return True
    return fields[0] != "Z" and not int(fields[6]) & PF_EXITING


def quiet_resource_tracker() -> None:
    """Start Python's resource tracker with its stderr on /dev/null, and restart it so if it dies.
    It frees the launcher's semaphores if this process is killed, and then warns about "leaked
    semaphore objects" -- the very ones it cleans up. If the tracker itself is killed (SIGKILL),
    multiprocessing starts another at its next use, which knows none of the semaphores the first
    one tracked: each one freed afterwards would be a ``KeyError`` traceback on stderr, 52 lines
    in a run that succeeded. (Nothing changes if it already runs.)"""
    from multiprocessing import resource_tracker

    # (multiprocessing's private state, as forkserver.py reads it: typeshed lists the public API)
    tracker: Any = resource_tracker._resource_tracker  # type: ignore[attr-defined]
    if not hasattr(tracker, "start_loudly"):  # once per process
        tracker.start_loudly = tracker.ensure_running

        def ensure_running() -> None:  # called before every message sent to the tracker
            if tracker._fd is not None and tracker._check_alive():
                return
            with _stderr_to_devnull():  # (re)started: with no stderr of its own
                tracker.start_loudly()

        tracker.ensure_running = ensure_running
    tracker.ensure_running()


class _stderr_to_devnull:
    """File descriptor 2 on /dev/null meanwhile: what a process started now inherits."""

    def __enter__(self) -> None:
        self.saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self.saved, 2)
        os.close(self.saved)


def reap(path: str, stop: threading.Event, grace_s: float = 2.0) -> None:
    """Once a rank has failed -- its traceback is in ``path``, or it died without a word (killed:
    ``died_silently``) -- kill every rank still alive ``grace_s`` later. torch's launcher stops the
    others with SIGTERM and waits 30 s before SIGKILL; a frozen rank ignores SIGTERM, and so does
    a rank still meeting its peers (its handler waits for torch's C++ to return), so without this
    the run would end 30 s late. (A thread of the launching process, until ``stop`` is set or the
    folder is gone.)"""
    while not stop.wait(0.1):
        try:
            names = os.listdir(path)
        except FileNotFoundError:  # removed as this process exits: nothing left to watch
            return
        if any(name.startswith("error-") for name in names) or died_silently(path, names):
            break
    if not stop.wait(grace_s):
        kill_ranks(path)


#: What a rank leaves in its run's folder as it ends, other than killed: its traceback
#: (``worker._fail``), its results (``worker._done``), stopped by the launcher (its SIGTERM
#: handler), or killed by this module (``kill_ranks``).
ENDINGS = ("error-", "done-", "stopped-", "reaped-")


def died_silently(path: str, names: list[str]) -> bool:
    """Whether a rank that wrote its process id in ``path`` has ended without leaving any of
    ``ENDINGS``: killed (SIGKILL, the kernel's OOM killer), while its peers may still wait to meet
    it inside torch, deaf to the launcher's SIGTERM."""
    for name in names:
        if name.startswith("pid-"):
            rank = name[4:]
            if any(f"{end}{rank}" in names for end in ENDINGS):
                continue
            try:
                with open(os.path.join(path, name)) as f:
                    pid = int(f.read())
            except (OSError, ValueError):  # a half-written file
                continue
            if not alive(pid):
                return True
    return False


def kill_ranks(path: str) -> None:
    """SIGKILL every rank that wrote its process id in ``path`` (``pid-RANK``), leaving
    ``reaped-RANK`` first: the report then names them as ended by the launcher, not as killed."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith("pid-"):
            try:
                with open(os.path.join(path, name)) as f:
                    pid = int(f.read())
                if alive(pid):
                    open(os.path.join(path, f"reaped-{name[4:]}"), "w").close()
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):  # gone already, or a half-written file
                pass
