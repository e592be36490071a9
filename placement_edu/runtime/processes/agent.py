"""The launch's agent, out of the notebook kernel or the command: they run ranks without torch.

torch's elastic launcher starts, watches and stops the ranks from an "agent" -- by default the
process that calls it. In a notebook that is the kernel, and importing torch there costs ~125 MiB of
private memory for the kernel's whole life; JupyterLab keeps every notebook's kernel when a learner
moves on, so 13 of them would fill a 2 GiB Binder on their own. Here a kernel (a process under
ipykernel that has not imported torch) hands each launch to an agent process forked from the rank
server (``forkserver.py``), which has imported torch already: the fork shares those pages and adds
a few MiB, and it ends with the launch. The agent forks the ranks from the same server, so a rank
costs what it always did.

What the kernel sees is what it would have seen: the ranks' measurements, or the same ``RunFailed``
/ ``RunInterrupted`` / ``PlacementError``. A Jupyter interrupt reaches the agent with the ranks (the
kernel's process group); if it does not, the kernel passes it on. The agent ends when the kernel
does, however it ends (its watch), and the ranks watch the kernel as before (``worker._exit_with``).
The kernel's side is ``launcher._launch_from_agent``; this module is the agent's.

A command (``placement-edu run``, ``torch-ref``, ``calibrate``) launches the same way
(``for_a_command``), so ``run`` and ``torch-ref`` never import torch in their own process, and the
server it starts for its one launch imports only what the launch's jobs need
(``forkserver.start_method``): a 4-rank run costs less than half the CPU it did
(``benchmarks/bench_runtime.py``). A command's endings are the kernel's:
Ctrl-C reaches the agent with the command's process group, SIGTERM to the command is passed on,
and a killed command takes its agent and ranks along.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator

#: Whether a command's launch is under way here (``for_a_command``).
_command = False


@contextlib.contextmanager
def for_a_command() -> Iterator[None]:
    """Launches made within are a command's: they go through an agent, as a kernel's do."""
    global _command
    before, _command = _command, True
    try:
        yield
    finally:
        _command = before


def in_a_command() -> bool:
    """Whether this launch is a command's (``for_a_command``): its process runs no other."""
    return _command


def wanted() -> bool:
    """Launch from an agent: in a notebook kernel (ipykernel) that has not imported torch, or for a
    command, with the ranks forked from the rank server -- and not in the agent itself (which
    has torch)."""
    from placement_edu.runtime.processes import forkserver

    return (
        (_command or ("ipykernel" in sys.modules and "torch" not in sys.modules))
        and os.environ.get("PLACEMENT_EDU_START_METHOD") != "spawn"
        and not forkserver.borrowed()
    )


#: Where a launch was when a signal came before its agent started any rank.
BEFORE = "before its ranks started"


# --- in the agent -------------------------------------------------------------------------------
def agent_main(
    send: Any,
    address: str,
    owner: tuple[int, str],
    function: Callable[..., Any],
    args: tuple,
) -> None:
    """Forked from the rank server: use that server for the ranks, end with the kernel, run
    ``function(*args)`` and send back ("ok", result) or ("error", the exception)."""
    from placement_edu.runtime.processes import forkserver

    forkserver.borrow(address, owner)
    threading.Thread(target=_exit_with, args=(owner[0],), name="agent-watch", daemon=True).start()
    try:
        # the server started with Ctrl-C held, for its ranks (``launcher``): this launch takes it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        outcome: tuple[str, Any] = ("ok", function(*args))
    except BaseException as error:  # noqa: BLE001 -- every ending goes back to the kernel
        outcome = ("error", error)
    try:
        send.send(outcome)
    except Exception as error:  # noqa: BLE001 -- an error that does not pickle: its text
        send.send(("error", RuntimeError(f"{type(outcome[1]).__name__}: {outcome[1]} ({error})")))


def _exit_with(pid: int) -> None:
    """End this agent once the kernel ``pid`` has ended (its ranks watch the kernel themselves)."""
    from placement_edu.runtime.processes import rundir

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # gone already
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd here: poll
        fd = None
    if fd is not None:
        import select

        select.select([fd], [], [])
    else:
        import time

        while rundir.alive(pid):
            time.sleep(0.2)
    os._exit(1)
