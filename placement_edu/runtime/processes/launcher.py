"""Starting the ranks: torch's elastic launcher (``torch.distributed.launcher.api.elastic_launch``)
on this machine, from Python or a notebook. The workers are package code (``worker.main``), a free
port is picked by the rendezvous ("localhost:0"), and every launch has its own run id, so runs
started at the same time do not collide.

Failures end the whole run: a rank that raises makes the launcher stop every other rank, and its
traceback is re-raised here as ``RunFailed``; a rank that hangs makes the others' collectives time
out (``timeout_s``, default 60 s), which then fail the same way. No worker outlives ``launch``.

The ranks are forked from a server that has imported torch and the worker once (``forkserver.py``):
torch's ~150 MiB of imported modules are then shared by every rank instead of held by each, which
is what lets 4 ranks run inside a 1-2 GiB Binder container. A run that would not fit in what the
container has left is refused before it starts (``container.check_fits``).

Ctrl-C (SIGINT) or SIGTERM during a launch stops every rank and raises ``RunInterrupted`` (one line:
where the run was); the signal handlers torch's launcher installs are put back as they were. Every
file of a run lives in one folder (``rundir``), removed however the run ends.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import uuid
import warnings
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Sequence

from placement_edu.errors import PlacementError, positive_seconds
from placement_edu.implementations import TorchRefConfig
from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.axes.context_config import ContextRun
from placement_edu.runtime.axes.expert_run import ExpertRun
from placement_edu.runtime.processes.container import check_fits, rank_bytes
from placement_edu.runtime.processes import forkserver, rundir
from placement_edu.runtime.processes import progress as progress_file
from placement_edu.runtime.processes.explain import explain, interrupted, killed_by_sigint
from placement_edu.runtime.processes.failure import RankFailure
from placement_edu.runtime.result import RunResult

if TYPE_CHECKING:
    from placement_edu.runtime.calibration.probes import Calibration


class RunFailed(RuntimeError):
    """A distributed run ended because a rank failed; the message carries its traceback."""


class RunInterrupted(RunFailed):
    """A run stopped by a signal to this process (Ctrl-C, SIGTERM); every rank was stopped."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum

    def __reduce__(self) -> tuple:
        return RunInterrupted, (self.signum, str(self))  # (sent back by a launch's agent)

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + self.signum


def launch(
    jobs: Sequence[RunConfig | Calibration | TorchRefConfig | ContextRun | ExpertRun],
    world_size: int,
    timeout_s: float = 60.0,
    progress: bool = True,
    failure: RankFailure | None = None,
) -> list[list[dict]]:
    """Run ``jobs`` one after another on ``world_size`` fresh processes; return, per job, each
    rank's raw measurements. ``failure``: a rank told to fail (``RankFailure``), to show how a run
    ends. From a notebook kernel or a command, torch's launcher runs in an
    agent process (``agent.py``): the kernel or command never imports torch."""
    from placement_edu.runtime.processes import agent

    timeout_s = positive_seconds("timeout_s", timeout_s)
    if not jobs or not all(_is_job(job) for job in jobs):
        raise PlacementError(
            f"launch runs a non-empty list of RunConfig (or Calibration), got {jobs!r}"
        )
    for job in jobs:
        job.validate()
    check_fits(world_size, rank_bytes(jobs), forkserver.running())  # refused before any rank starts
    if agent.wanted():
        return _launch_from_agent(jobs, world_size, timeout_s, progress, failure)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from placement_edu.runtime import worker

    method = forkserver.start_method()  # (before holding the server: it may start it again)
    forkserver.hold(jobs)
    run_dir, stop, handlers = "", threading.Event(), rundir.signal_handlers()
    try:  # (an agent's signal before the launch takes them: the folder is removed all the same)
        run_dir = rundir.make("run")
        rundir.quiet_resource_tracker()
        config = launch_config(world_size, method, run_dir)
        _watch(run_dir, stop, world_size if progress else 0)
        before, started = set(multiprocessing.active_children()), time.time() - 1
        with (
            warnings.catch_warnings(),
            _quiet_launcher(),
            ranks_start_with_sigint_held(),
            _stop_on_signals(_as_torch_would),
        ):
            warnings.simplefilter("ignore")
            per_rank = elastic_launch(config, worker.main)(
                jobs, timeout_s, run_dir, failure, forkserver.owner()
            )
    except SignalException as error:  # Ctrl-C or SIGTERM (_as_torch_would): stop every rank
        if _once:  # an agent, stopping: a later signal changes nothing (``_after_signal``)
            _first_signal()
            for sig in SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        signum = error.sigval
        for child in set(multiprocessing.active_children()) - before:  # this launch's ranks
            child.kill()
            child.join()
        rundir.remove_torch_error_files(started)  # one may be left if it came as ranks started
        raise RunInterrupted(signum, interrupted(signum, run_dir, world_size)) from None
    except ChildFailedError as error:
        ctrl_c = killed_by_sigint(error)
        try:
            if ctrl_c:  # the same Ctrl-C's handler, if still on its way here, runs now
                time.sleep(0.2)
        except SignalException:
            pass
        if not ctrl_c:
            raise RunFailed(explain(run_dir, error, world_size, timeout_s)) from None
        rundir.remove_torch_error_files(started)
        raise RunInterrupted(
            signal.SIGINT, interrupted(signal.SIGINT, run_dir, world_size)
        ) from None
    finally:
        stop.set()
        rundir.restore_handlers(handlers)
        rundir.remove(run_dir)
        forkserver.release(jobs)
    return [[per_rank[r][j] for r in range(world_size)] for j in range(len(jobs))]


def launch_config(world_size: int, method: str, run_dir: str, name: str = "placement-edu") -> Any:
    """torch's ``LaunchConfig`` for one launch on this machine (a run here, a warm pool's ranks in
    ``pool.py``): ``world_size`` ranks, a free port picked by the rendezvous, a run id of its own
    (``name``-…), no restarts, torch's logs in ``run_dir``."""
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=world_size,
        run_id=f"{name}-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        start_method=method,
        logs_specs=rundir.logs(run_dir),
        **torch_handles_only(LaunchConfig),  # (torch writes it into this process's environment)
    )


def _watch(run_dir: str, stop: threading.Event, progress_ranks: int) -> None:
    """Until ``stop``: the reaper of ranks that died silently (``rundir.reap``), and, for a run of
    ``progress_ranks`` > 0 ranks, its progress line on stderr."""
    threading.Thread(target=rundir.reap, args=(run_dir, stop), daemon=True).start()
    if progress_ranks:
        threading.Thread(
            target=progress_file.show_on_stderr,
            args=(os.path.join(run_dir, "progress"), stop, progress_ranks),
            daemon=True,
        ).start()


#: Seconds a kernel waits for its interrupted agent to say where the run stopped before it ends the
#: agent itself.
INTERRUPT_WAIT_S = 15.0
#: Seconds after which a kernel sends its interrupted agent the signal again, if it has not
#: answered: a signal that came as the ranks met was swallowed by torch's rendezvous.
RESEND_S = 1.0


def _launch_from_agent(
    jobs: Sequence[RunConfig | Calibration | TorchRefConfig | ContextRun | ExpertRun],
    world_size: int,
    timeout_s: float,
    progress: bool,
    failure: RankFailure | None,
) -> list[list[dict]]:
    """``launch`` in an agent forked from the rank server (``agent.py``), from a notebook kernel or
    a command, which then need not import torch: its result, or its error raised here. Ctrl-C or
    SIGTERM here (a Jupyter interrupt, a kernel's shutdown) reaches the agent too, which stops its
    ranks and says where; this process then ends as it would have (``RunInterrupted``)."""
    import multiprocessing

    from placement_edu.runtime.processes import agent

    _raise_if_swallowed()  # (one that came before: raised where it came, before any process)
    rundir.quiet_resource_tracker()  # (started with the server, as by launch)
    # the server imports torch and the worker when it starts (a command's: what its jobs need)
    forkserver.start_method(jobs if agent.in_a_command() else None)
    with ranks_start_with_sigint_held():  # as a launch starts it: its forks start with it held
        server = forkserver.address()
    context = multiprocessing.get_context("forkserver")
    receive, send = context.Pipe(duplex=False)
    args = (jobs, world_size, timeout_s, progress, failure)
    helper = context.Process(  # (not a daemon: it starts the ranks)
        target=agent.agent_main,
        args=(send, server, forkserver.owner(), _launch_in_the_agent, args),
        name="placement-edu-agent",
    )
    forkserver.hold(helper)
    handlers, stopped = rundir.signal_handlers(), None
    outcome: tuple[str, Any] | None = None
    try:
        with _stop_on_signals():  # from the agent's start to its end: no signal is lost
            try:
                global _deferred
                _deferred = None
                helper.start()  # (a signal while it forks is taken once it is known: _raise_stop)
                send.close()
                try:
                    outcome = receive.recv()
                except EOFError:  # it died without a word (killed for memory)
                    outcome = ("error", _agent_died(helper))
                helper.join()
            except (KeyboardInterrupt, _Stop) as stop:
                stopped = getattr(stop, "signum", signal.SIGINT)
        if stopped is None and _raised is not None:  # (its stop cleared on the way)
            stopped = _raised[0]
        _taken()
        if stopped is not None:
            early = _deferred is not None  # it came while the agent was being started
            outcome = _after_signal(helper, receive, stopped, outcome, early)
            helper.join()
    finally:
        rundir.restore_handlers(handlers)
        forkserver.release(helper)
    assert outcome is not None  # (answered, or made by _after_signal)
    kind, value = outcome
    if isinstance(value, KeyboardInterrupt):  # a Ctrl-C before the agent's launch took the signals
        value = RunInterrupted(signal.SIGINT, f"interrupted by SIGINT: {agent.BEFORE}")
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


def _launch_in_the_agent(*args: Any) -> list[list[dict]]:
    """``launch`` in a launch's agent: a signal before the launch takes the signals ends it as
    "before its ranks started"; once it has answered, the kernel or command takes them."""
    from placement_edu.runtime.processes import agent

    global _once
    _once = True  # (this process is an agent: its command may pass on a signal it got too)
    for sig in SIGNALS:
        signal.signal(sig, _raise_stop)
    try:
        return launch(*args)
    except _Stop as stop:
        _taken()
        name = signal.Signals(stop.signum).name
        raise RunInterrupted(stop.signum, f"interrupted by {name}: {agent.BEFORE}") from None
    finally:
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _after_signal(
    helper: BaseProcess,
    receive: Any,
    signum: int,
    outcome: tuple[str, Any] | None,
    early: bool = False,
) -> tuple[str, Any]:
    """The agent stops its ranks and says where: the signal is passed on to it at once (this
    process cannot tell whether the agent got it too, as a Ctrl-C reaches the whole group: the
    agent takes a second one as the same, ``_once``), so the line names where the run was when
    the signal came -- waiting a second first, a short run could end meanwhile and the line say
    "after the run ended" of a signal sent as its ranks started. It is sent again each
    ``RESEND_S`` the agent has not answered (torch's rendezvous swallows a signal that comes as
    the ranks meet), and the agent is ended if it says nothing in ``INTERRUPT_WAIT_S``. A signal
    that came once the agent had answered (the run's last moments) is not lost: the run ended,
    its report is not printed. One that came while the agent was being started
    (``early``: the rank server may take seconds to answer, as it imports torch) ends the agent at
    once, before it starts any rank."""
    from placement_edu.runtime.processes import agent

    name = signal.Signals(signum).name
    if early and outcome is None:
        helper.kill()
        helper.join()
        rundir.remove_stale()  # the agent's run folder, if it had made one
        return "error", RunInterrupted(signum, f"interrupted by {name}: {agent.BEFORE}")
    deadline = time.monotonic() + INTERRUPT_WAIT_S
    while outcome is None and helper.pid is not None and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):  # (it may have answered and ended)
            os.kill(helper.pid, signum)
        if receive.poll(min(RESEND_S, max(0.0, deadline - time.monotonic()))):
            try:
                outcome = receive.recv()
            except EOFError:
                break
    if outcome is None:
        helper.kill()
        return "error", RunInterrupted(signum, f"interrupted by {name}: stopped the run's agent")
    if outcome[0] == "ok":
        return "error", RunInterrupted(signum, f"interrupted by {name}: {AFTER_THE_RUN}")
    return outcome


def _agent_died(helper: BaseProcess) -> RunFailed:
    helper.join()
    code = helper.exitcode
    how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else "ended"
    return RunFailed(
        f"the launch's agent {how} before the run ended (exit code {code}); a process killed "
        "for memory is the usual cause: see memory_limit()"
    )


def _is_job(job: object) -> bool:
    """A job ``launch`` runs. (Calibration's module imports torch: looked at only when needed.)"""
    if isinstance(job, (RunConfig, TorchRefConfig, ContextRun, ExpertRun)):
        return True
    from placement_edu.runtime.calibration.probes import Calibration

    return isinstance(job, Calibration)


def run(config: RunConfig, timeout_s: float = 60.0, progress: bool = True) -> RunResult:
    """Run one configuration and compare it with the prediction and the single-process run."""
    return run_many([config], timeout_s, progress)[0]


def run_many(
    configs: list[RunConfig], timeout_s: float = 60.0, progress: bool = True
) -> list[RunResult]:
    """Several configurations of one world size in one launch (processes start once: 4 ranks take
    several seconds to start on a small machine)."""
    if (
        not isinstance(configs, (list, tuple))
        or not configs
        or not all(isinstance(c, RunConfig) for c in configs)
    ):
        raise PlacementError(f"run_many runs a non-empty list of RunConfig, got {configs!r}")
    sizes = {c.world_size for c in configs}
    if len(sizes) != 1:
        raise PlacementError(
            f"run_many needs one world size per launch, got {sorted(sizes, key=str)}"
        )
    raw = launch(list(configs), sizes.pop(), timeout_s, progress)
    return [RunResult.build(c, r) for c, r in zip(configs, raw)]


#: The signals torch's launcher takes over in the main thread (TORCHELASTIC_SIGNALS_TO_HANDLE).
SIGNALS = rundir.SIGNALS


class _Stop(BaseException):
    """Raised by this module's handler of ``SIGNALS`` in a kernel or a command while its agent
    launches (``_launch_from_agent``: no torch there), and in a command that starts processes from
    its first line to its last (``ends_as_a_run``). Not an ``Exception``: nothing on the way may
    catch it. ``where``: the command's phase when it came (``phase``). The launching process itself
    raises torch's ``SignalException`` (``_as_torch_would``), as torch's own handler would: its
    launcher then stops the ranks with the signal."""

    def __init__(self, signum: int, where: str = "") -> None:
        super().__init__(signum)
        self.signum, self.where = signum, where


#: Where a command is, named by the line a signal prints outside a launch (``phase``).
_where = rundir.BEFORE_ANY_PROCESS
#: The signal ``_raise_stop`` raised its ``_Stop`` for, and where the command was, until an ending
#: takes it (``_taken``). C code the ``_Stop`` passes on its way may clear it, and the command
#: would run on as if no signal had come: torch's import does, when the signal comes while it
#: imports numpy from ``torch._C`` (a SIGTERM half a second into ``calibrate`` on a loaded
#: machine). So the command's next phase, and its end, raise it again (``_raise_if_swallowed``).
_raised: tuple[int, str] | None = None
#: The line's ending for a signal that came once a run had ended (the ranks and the agent gone).
AFTER_THE_RUN = "after the run ended, before its report was printed"


@contextlib.contextmanager
def phase(where: str) -> Iterator[None]:
    """Meanwhile, a signal to the command says it came ``where`` (``ends_as_a_run``). A signal
    whose stop was swallowed before ends the command here, saying where it came."""
    global _where
    _raise_if_swallowed()
    before, _where = _where, where
    try:
        yield
    finally:
        _where = before


def ends_as_a_run(body: Callable[[], int]) -> int:
    """Run a command that starts processes (``run``, ``calibrate``, ``fit --verify``...) so that
    it ends as ``run`` does at every phase: SIGINT, SIGTERM, SIGHUP or SIGQUIT (to the command or
    its process group) ends it with one line naming where it was, and exit status 128 + the
    signal (130, 143, 129, 131). Its processes were ended on the way (``_launch_from_agent``, a
    ``TrackerProcess``'s ``close``), and it exits as Python does, which removes its
    multiprocessing folder. The exit status of ``body`` otherwise."""
    handlers = rundir.signal_handlers()
    try:
        with _stop_on_signals():
            try:
                return body()
            finally:  # a stop swallowed on its way wins over what the body did since
                _raise_if_swallowed()
    except _Stop as stop:
        for sig in SIGNALS:  # ending now: a second signal changes nothing
            signal.signal(sig, signal.SIG_IGN)
        _taken()
        print(rundir.ending_line(stop.signum, stop.where), file=sys.stderr)
        return 128 + stop.signum
    finally:
        rundir.restore_handlers(handlers)


#: The signals torch's launcher is to handle itself: the others (SIGINT, SIGTERM) are ours.
TORCH_HANDLES = "SIGHUP,SIGQUIT"


def torch_handles_only(launch_config: type) -> dict[str, Any]:
    """The ``LaunchConfig`` argument that leaves SIGINT and SIGTERM to us. A torch whose
    ``LaunchConfig`` has ``signals_to_handle`` writes it into TORCHELASTIC_SIGNALS_TO_HANDLE as its
    launch starts -- over what ``_stop_on_signals`` put there, SIGINT and SIGTERM included unless
    told otherwise (torch 2.13); an older one reads only the environment."""
    from dataclasses import fields

    wanted = "signals_to_handle" in {field.name for field in fields(launch_config)}
    return {"signals_to_handle": TORCH_HANDLES} if wanted else {}


#: The last signal ``_raise_stop`` put off because a process was being started (a launch's agent:
#: ``_launch_from_agent`` reads it), or None.
_deferred: int | None = None
#: In a launch's agent: once a signal stops the launch, a later one changes nothing (its command
#: passes on every signal it gets, again until the agent answers, and a Ctrl-C reaches the agent
#: from its group too). Until then each is taken: one torch swallowed (its rendezvous catches
#: what is raised in it) is sent again.
_once = False
#: In a launch's agent: whether a signal has stopped (is stopping) the launch.
_stopped = False


def _first_signal() -> bool:
    """Whether to take this signal, and it stops the launch from now on: always, but in an agent
    that a signal stops already."""
    global _stopped
    taken, _stopped = not (_once and _stopped), True
    return taken


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    """``_Stop``, where the command is -- but not while a process is being started (taken again a
    moment later, once it is known and can be ended: ``_as_torch_would``), nor where what it
    raises could be lost (taken a moment later: ``rundir.unsafe_to_raise``)."""
    global _deferred
    if _starting_a_process(frame):
        _deferred = signum
        rundir.later(signum)
        return
    if rundir.unsafe_to_raise(frame):
        rundir.later(signum)
        return
    if _first_signal():
        global _raised
        _raised = signum, _where
        raise _Stop(signum, _where)


def _raise_if_swallowed() -> None:
    """The ``_Stop`` again, if the one ``_raise_stop`` raised was cleared on its way."""
    if _raised is not None:
        raise _Stop(*_raised)


def _taken() -> None:
    """The ``_Stop`` raised is being handled: nothing to raise again."""
    global _raised
    _raised = None


class _stop_on_signals:
    """In the main thread, during a launch or a command: ``SIGNALS`` go to ``handler`` (``_Stop``
    raised, unless told otherwise), and torch's launcher is told to leave SIGINT and SIGTERM to us
    (``TORCHELASTIC_SIGNALS_TO_HANDLE``, and ``torch_handles_only``: from its start it handles
    SIGHUP and SIGQUIT itself, as ``_as_torch_would`` does). Elsewhere a thread cannot take
    signals: nothing changes."""

    def __init__(self, handler: Callable[[int, FrameType | None], None] = _raise_stop) -> None:
        self.handler = handler

    def __enter__(self) -> _stop_on_signals:
        self.active = threading.current_thread() is threading.main_thread()
        if self.active:
            self.env = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE")
            os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = TORCH_HANDLES
            for sig in SIGNALS:
                signal.signal(sig, self.handler)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if self.active:
            if self.env is None:
                os.environ.pop("TORCHELASTIC_SIGNALS_TO_HANDLE", None)
            else:
                os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = self.env
        return False  # (the handlers: put back by rundir.restore_handlers)


def _as_torch_would(signum: int, frame: FrameType | None) -> None:
    """In the launching process: what torch's own handler does (``SignalException``: its launcher
    stops the ranks with the signal and raises it on) -- but not in the middle of starting a rank:
    between the server's fork and the end of ``Process.start`` the new rank is not yet among this
    process's children, so the launch would stop the others and not it, and it would start alone
    once the run's folder is gone (its failure left in TMPDIR as torch's error file). Then the
    signal is sent again a moment later, when that rank is known."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    if _starting_a_process(frame) or rundir.unsafe_to_raise(frame):
        rundir.later(signum)
        return
    raise SignalException(f"Process {os.getpid()} got signal: {signum}", signal.Signals(signum))


def _starting_a_process(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is BaseProcess.start.__code__:
            return True
        frame = frame.f_back
    return False


class ranks_start_with_sigint_held:
    """Start the ranks with SIGINT blocked (a signal mask survives fork and exec), so a Ctrl-C
    while they still import torch waits until ``worker._start_rank`` has chosen what it does (end
    the rank quietly, or be ignored by a warm pool's rank) -- never a KeyboardInterrupt traceback
    from the middle of an import. Only this thread blocks it; in the main thread, a helper thread
    that does not block it keeps this process receiving Ctrl-C meanwhile (Python runs the
    handler in the main thread all the same)."""

    def __enter__(self) -> ranks_start_with_sigint_held:
        self.helper = threading.Event()
        if threading.current_thread() is threading.main_thread():
            threading.Thread(
                target=self.helper.wait, name="placement-edu-sigint", daemon=True
            ).start()
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        self.helper.set()
        return False


class _quiet_launcher:
    """Silence the elastic agent's logs: a failure reaches the caller as RunFailed, root cause
    first."""

    def __enter__(self) -> _quiet_launcher:
        import logging

        prefixes = (
            "torch.distributed.elastic",
            "torch.distributed.launcher",
            "torch.multiprocessing",
        )
        names = [n for n in list(logging.root.manager.loggerDict) if n.startswith(prefixes)]
        self.loggers = [logging.getLogger(n) for n in {*prefixes, *names}]  # each has its own level
        self.levels = [lg.level for lg in self.loggers]
        for lg in self.loggers:
            lg.setLevel(logging.CRITICAL)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        for lg, level in zip(self.loggers, self.levels):
            lg.setLevel(level)
        return False
