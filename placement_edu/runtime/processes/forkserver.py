"""Where ranks come from: a forkserver that has imported torch once.

"spawn" starts each rank as a fresh Python that imports torch again: about 150 MiB of private
memory per rank before it does anything (135 MiB more with PyTorch's DDP/FSDP modules), 600 MiB
for four ranks -- most of a Binder container.
Here ranks are forks of one server process that imported ``PRELOAD`` (torch and the worker) when it
started; a fork shares those pages with the server (copy-on-write), so a memory cgroup charges
them once and a rank adds about ``container.RANK_MIB``. The server is Python's own
(``multiprocessing.forkserver``); torch's launcher uses it when asked for ``start_method()``. It
never forks from the notebook kernel itself, which holds threads, so forking stays safe.

The server holds its ~220 MiB (``container.FORKSERVER_MIB``) for as long as it runs. It runs while
something holds it -- a launch in progress, a warm pool alive (``hold``/``release``) -- and
``IDLE_S`` seconds more, so that the next cell's run finds it ready; then it is stopped.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Literal, Sequence

#: The modules only PyTorch's own implementations need (``torch_reference.py``: DDP,
#: ZeroRedundancyOptimizer, FSDP2, DTensor, pipelining): 1.3 s of CPU to import, 75 MiB more in the
#: server, and 115 MiB less in each of those ranks. (Importing pipelining makes torch's compiler
#: cache folder: ``start_method`` puts it in ours.)
REFERENCE_ONLY = [
    "placement_edu.runtime.measurement.torch_reference",
    "torch.distributed.optim",
    "torch.nn.parallel",
    "torch.distributed.fsdp",
    "torch.distributed.tensor.parallel",
    "torch.distributed.pipelining",
]
#: What the server imports once, before it forks any rank: the worker (torch with it), then the
#: modules above.
PRELOAD = [
    # ranks re-run no script of the learner (its docstring)
    "placement_edu.runtime.processes.server_setup",
    "placement_edu.runtime.worker",
    *REFERENCE_ONLY,
]
#: Whether the server (the running one, else the next) imports ``REFERENCE_ONLY``.
_imports_reference = True

#: Seconds the server stays after its last holder let go (the next run then skips importing torch).
IDLE_S = 60.0

_holders: set[int] = set()
_lock = threading.Lock()
_timer: threading.Timer | None = None
#: In a launch's agent (``agent.py``): the kernel whose server it forks ranks from.
_borrowed_from: tuple[int, str] | None = None


def start_method(only_for: Sequence[object] | None = None) -> Literal["forkserver", "spawn"]:
    """ "forkserver", with ``PRELOAD`` to be imported when the server starts (set before it does;
    a running server keeps what it has): all that any run needs, for a process that may run
    several (a kernel, a pool). A command runs one launch: ``only_for`` its jobs, the server leaves
    out ``REFERENCE_ONLY`` unless a job is one of PyTorch's implementations. A later launch in the
    same process (``cli.main`` called again) that needs them restarts such a server if nothing
    holds it.
    PLACEMENT_EDU_START_METHOD=spawn brings back the old way, to compare."""
    from multiprocessing import forkserver

    from placement_edu.implementations import TorchRefConfig

    global _imports_reference
    if os.environ.get("PLACEMENT_EDU_START_METHOD") == "spawn":
        return "spawn"
    needed = only_for is None or any(isinstance(job, TorchRefConfig) for job in only_for)
    if running():
        if _imports_reference or not needed or borrowed() or _holders:
            return "forkserver"  # as it is (held, without them: its ranks import them)
        with _lock:  # made for a command's toy runs, and unheld: started again with everything
            _cancel_timer()
            stop()
    _imports_reference = needed
    mark_ours()
    forkserver.set_forkserver_preload([m for m in PRELOAD if needed or m not in REFERENCE_ONLY])
    # the server inherits this process's environment when it starts: its compiler cache
    # ("torchinductor_<user>", made by importing pipelining) goes in this process's own folder,
    # removed at exit (or by the ranks, if this process is killed), not left in TMPDIR
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(owner()[1], "torchinductor"))
    return "forkserver"


def mark_ours() -> None:
    """Before the server starts: mark this process's multiprocessing folder (its socket's, made
    now) as ours, and remove those of our processes that are gone (``rundir.remove_stale``). A
    process killed before any rank existed leaves its folder; the next run removes it."""
    from multiprocessing import util

    from placement_edu.runtime.processes import rundir

    rundir.mark(util.get_temp_dir())
    rundir.remove_stale()


def owner() -> tuple[int, str]:
    """What a rank watches and cleans up after: (this process's id, its multiprocessing folder in
    TMPDIR, "pymp-…", where the server's socket lives). If this process is killed, nobody else
    would remove that folder; its ranks do (``worker._exit_with``)."""
    from multiprocessing import util

    if _borrowed_from is not None:
        return _borrowed_from
    return os.getpid(), util.get_temp_dir()


def running() -> bool:
    """Whether this process's server is up (a run then skips importing torch)."""
    from multiprocessing import forkserver

    if _borrowed_from is not None:
        return True  # the kernel's, kept by the kernel while this agent runs
    # (multiprocessing's private state: typeshed's stub lists only the public API)
    return forkserver._forkserver._forkserver_pid is not None  # type: ignore[attr-defined]


def address() -> str:
    """The running server's socket (started here if it is not), for an agent to borrow."""
    from multiprocessing import forkserver

    forkserver.ensure_running()
    return forkserver._forkserver._forkserver_address  # type: ignore[attr-defined,no-any-return]


def borrow(server_address: str, kernel: tuple[int, str]) -> None:
    """In a launch's agent, itself forked from the kernel's server (``agent.py``): fork the ranks
    from that same server, which the kernel keeps running, and make them watch the kernel (its
    ``owner``). A fork of the server knows the kernel's end of the server's "alive" pipe and the
    resource tracker already (multiprocessing hands them to every child); the socket's address
    is all it lacks."""
    from multiprocessing import forkserver, resource_tracker

    global _borrowed_from
    _borrowed_from = kernel
    server: Any = forkserver._forkserver  # type: ignore[attr-defined]  # (private, as below)
    server._forkserver_address = server_address
    server.ensure_running = resource_tracker.ensure_running  # it runs: never start another


def borrowed() -> bool:
    """Whether this process is a launch's agent, forking ranks from its kernel's server."""
    return _borrowed_from is not None


def hold(who: object) -> None:
    """``who`` (a launch, a pool) needs the server: keep it."""
    if _borrowed_from is not None:
        return  # the kernel holds its server
    with _lock:
        _holders.add(id(who))
        _cancel_timer()


def _cancel_timer() -> None:
    global _timer
    if _timer is not None:
        _timer.cancel()
        _timer = None


def release(who: object) -> None:
    """``who`` no longer needs the server: stop it ``IDLE_S`` seconds after the last holder let
    go, unless something holds it again meanwhile."""
    global _timer
    if _borrowed_from is not None:
        return
    with _lock:
        _holders.discard(id(who))
        if _holders or not running():
            return
        _cancel_timer()
        _timer = threading.Timer(IDLE_S, _stop_if_unheld)
        _timer.daemon = True
        _timer.start()


def _stop_if_unheld() -> None:
    with _lock:
        if not _holders:
            stop()


def stop() -> None:
    """End the server and give its memory back. It exits once every rank it forked has (they hold
    the other end of its pipe), which is why only an unheld server is stopped."""
    from multiprocessing import forkserver

    if running():
        forkserver._forkserver._stop()  # type: ignore[attr-defined]  # private, as above
