"""The code each rank runs: set up torch.distributed, run the jobs one after another, and return
what was measured. Started by ``launcher.py`` through torch's elastic launcher, or by ``torchrun``:

    torchrun --nproc-per-node 4 -m placement_edu.runtime.worker zero3 --steps 5 [--json]

gloo on CPU; NCCL (one GPU per rank) when CUDA is present. The same code runs across nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import itertools
import os
import select
import signal
import sys
import threading
import time
import traceback
from array import array
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, Iterator, NoReturn, Sequence

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from placement_edu.mesh import Mesh
from placement_edu.runtime.engines.adam import Adam
from placement_edu.runtime.measurement.comm import Comm
from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.axes.context_config import ContextRun
from placement_edu.runtime.axes.expert_run import ExpertRun
from placement_edu.runtime.engines.engine import Context
from placement_edu.runtime.engines import engine_for
from placement_edu.runtime.measurement.memtrack import MemoryLedger
from placement_edu.runtime.processes.failure import RankFailure
from placement_edu.runtime.processes.progress import POLL_S, write as progress_line
from placement_edu.runtime.processes import rundir
from placement_edu.runtime.engines.reference import Reference, rounding_floor

if TYPE_CHECKING:
    from placement_edu.implementations import TorchRefConfig
    from placement_edu.runtime.calibration.probes import Calibration

_GROUPS: dict[tuple[int, ...], object] = {}
_BEACON: str | None = None  # this rank's "in a collective?" file (Comm's beacon)
_OWNER: tuple[int, str] | None = (
    None  # the process that launched this rank, its folder (``_exit_with``)
)


def _axis_groups(mesh: Mesh, rank: int, timeout_s: float) -> dict[str, tuple[object, list[int]]]:
    """The process group of each mesh axis this rank belongs to. Every rank creates every group,
    in the same order (torch.distributed requires it); groups are reused across jobs."""
    out = {}
    for axis, _ in mesh:
        for r in range(mesh.world_size):  # all groups of this axis, in a fixed order
            ranks = mesh.group(r, axis)
            if r != ranks[0]:
                continue
            group = _group(ranks, timeout_s)
            if rank in ranks:
                out[axis] = (group, ranks)
    return out


def _group(ranks: list[int], timeout_s: float) -> object:
    """The process group of ``ranks``, made once and kept for later jobs (every rank must make
    every group, in the same order); the whole world is torch's own group."""
    key = tuple(ranks)
    if key not in _GROUPS:  # (a warm pool may hold more ranks than the run)
        _GROUPS[key] = (
            dist.new_group(ranks, timeout=timedelta(seconds=timeout_s))
            if len(ranks) < dist.get_world_size()
            else dist.group.WORLD
        )
    return _GROUPS[key]


def _backend() -> str:
    """NCCL when every local rank can have its own GPU, else gloo on the CPU."""
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    return (
        "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local_ranks else "gloo"
    )


def _device() -> tuple[torch.device, torch.device]:
    """(device, host): a GPU per rank when CUDA is present, else both are the CPU."""
    if torch.cuda.is_available() and dist.get_backend() == "nccl":
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        return torch.device("cuda", local), torch.device("cpu")
    return torch.device("cpu"), torch.device("cpu")


@dataclass(frozen=True)
class Watch:
    """How a run is watched while it steps: the file rank 0 writes its progress line to, with
    ``index`` (this run, runs in the job), and whether to stop between steps (``should_stop``: a
    warm pool's cancelled job, ``_cancel_check``)."""

    progress: str | None = None
    index: tuple[int, int] = (0, 1)
    should_stop: Callable[[], bool] | None = None


def run_job(
    config: RunConfig | Calibration | TorchRefConfig | ContextRun | ExpertRun,
    timeout_s: float,
    progress: str | None = None,
    index: tuple[int, int] = (0, 1),
    should_stop: Callable[[], bool] | None = None,
) -> dict | None:
    """Run one configuration on this rank; return its ledger, memory, per-step deviation from the
    single-process reference, per-step rounding floor (``reference.rounding_floor``) and
    per-step wall time (``step_s``, and ``comm_s``: the part spent inside collectives).
    A rank beyond the run's world size (in a larger warm pool) only helps form the groups and
    waits at the closing barrier, and returns None. ``index``: (this run, runs in the job), for
    the progress line. A ``Calibration`` (probes.py) times collectives instead of training."""
    if isinstance(config, RunConfig):
        return _train(config, timeout_s, Watch(progress, index, should_stop))
    return _run_other(config, timeout_s, progress, index)


def _run_other(
    config: Calibration | TorchRefConfig | ContextRun | ExpertRun,
    timeout_s: float,
    progress: str | None,
    index: tuple[int, int],
) -> dict | None:
    """A job that is not one of our engines' runs. Their modules are imported only in a rank that
    runs one."""
    from placement_edu.implementations import TorchRefConfig
    from placement_edu.runtime.calibration.probes import Calibration, run_rank

    if isinstance(config, TorchRefConfig):  # PyTorch's own DDP / ZeRO / FSDP2 (torch_reference.py)
        from placement_edu.runtime.measurement import torch_reference

        return torch_reference.run_job(config, progress, index)
    if isinstance(config, ContextRun):  # one attention layer, ring or Ulysses
        from placement_edu.runtime.axes import context_attention

        return context_attention.run_rank(config)
    if isinstance(config, ExpertRun):  # one mixture-of-experts layer on data × expert
        from placement_edu.runtime.axes import expert_layer

        return expert_layer.run_rank(config)
    if isinstance(config, Calibration):
        rank = dist.get_rank()
        group, ranks = _axis_groups(config.mesh, rank, timeout_s).get("data") or (None, None)
        # (_axis_groups holds torch's groups as plain objects)
        return run_rank(config, group, ranks, progress, index)  # type: ignore[arg-type]
    raise TypeError(
        f"a rank runs a RunConfig, a Calibration, a TorchRefConfig, a ContextRun or an "
        f"ExpertRun, got {config!r}"
    )


def _train(config: RunConfig, timeout_s: float, watch: Watch) -> dict | None:
    """One engine's run: its steps beside the single-process reference, and what it measured."""
    rank = dist.get_rank()
    strategy, mesh = config.resolved_strategy(), config.resolved_mesh()
    device, host = _device()
    groups = _axis_groups(mesh, rank, timeout_s)
    if rank >= mesh.world_size:
        dist.barrier()
        return None
    comm = Comm(groups, timeout_s, _BEACON)
    ctx = Context(
        rank,
        strategy,
        mesh,
        comm,
        MemoryLedger(),
        config.module(),
        config.torch_dtype,
        device,
        host,
        config.seed,
        config.global_batch,
        strategy.micro_batches,
        strategy.pipeline_schedule,
        config.fault,
        Adam(),
    )
    start = time.perf_counter()
    deviation, floor, step_s = _steps(config, ctx, watch)
    dist.barrier()  # no rank starts the next job early
    ledger, repeats = comm.ledger()
    return {
        "rank": rank,
        # (steps that repeat the step before are not kept: "ledger_repeats", result.expand_ledger)
        "ledger": ledger,
        "ledger_repeats": repeats,
        "memory": ctx.mem.to_dict(),
        "deviation": deviation,
        "floor": floor,
        "device": str(device),
        "host": str(host),
        "wall_s": time.perf_counter() - start,
        "step_s": step_s,
        "comm_s": comm.step_seconds(config.steps),
    }


def _steps(config: RunConfig, ctx: Context, watch: Watch) -> tuple[array, array, array]:
    """The engine's steps, each followed by the single-process run's same step and by its twin
    that sums in another order (the rounding floor, reference.py), streamed a step at a time:
    nothing is kept across steps or jobs. Per step, as 8-byte doubles (a list would hold a 32-byte
    float object for each): the deviation from one process, the rounding floor, the wall time."""
    module, adam = ctx.module, ctx.adam
    reference = Reference(module, config.global_batch, config.seed, config.torch_dtype, adam)
    twin = Reference(
        module, config.global_batch, config.seed, config.torch_dtype, adam, reversed_rows=True
    )
    engine = engine_for(ctx.strategy, ctx.mesh)(ctx)
    deviation, floor, step_s = array("d"), array("d"), array("d")
    for step in range(config.steps):
        if watch.should_stop is not None and watch.should_stop():  # a warm pool's cancelled job
            break
        began = time.perf_counter()  # wall time of the step: its compute and its collectives
        engine.step(step)
        ctx.comm.wait_sends()
        step_s.append(time.perf_counter() - began)
        reference.step(step)
        twin.step(step)
        deviation.append(engine.deviation(reference.params))
        floor.append(rounding_floor(reference, twin))
        if watch.progress and ctx.rank == 0:
            progress_line(watch.progress, *watch.index, step + 1, config.steps, config.label)
    return deviation, floor, step_s


@record
def main(
    jobs: Sequence[RunConfig | Calibration | TorchRefConfig | ContextRun | ExpertRun],
    timeout_s: float = 60.0,
    run_dir: str | None = None,
    failure: RankFailure | None = None,
    owner: tuple[int, str] | None = None,
) -> list[dict | None]:
    """Entry point of every rank (torch's launcher has set RANK, WORLD_SIZE, MASTER_ADDR...).
    ``run_dir``: where rank 0 writes its progress and any rank that fails writes its traceback
    (the launcher shows the earliest one first: the root cause). ``owner``: the process that
    launched the run (a notebook kernel) and its multiprocessing folder (``forkserver.owner``); the
    rank ends when that process ends, and removes what it left. ``failure``: a rank told to fail
    (``RankFailure``), to show how a run ends."""
    with _rank_ends(run_dir):
        _start_rank(run_dir, owner=owner)
        failure = failure or RankFailure()
        failure.inject("start", timeout_s)
        dist.init_process_group(_backend(), timeout=timedelta(seconds=timeout_s))
        failure.inject("met", timeout_s)
        progress = os.path.join(run_dir, "progress") if run_dir else None
        results = [run_job(job, timeout_s, progress, (j, len(jobs))) for j, job in enumerate(jobs)]
        if failure.kind == "hang":  # a hang test must not pass silently
            raise AssertionError("the injected hang did not end the run")
        _done(run_dir)
        return results


def _start_rank(
    run_dir: str | None, warm: bool = False, owner: tuple[int, str] | None = None
) -> None:
    """Every rank: its inherited objects frozen (``gc.freeze``: the garbage collector would
    otherwise write to every object the forkserver imported, copying its pages into this rank --
    100 MiB a rank); one thread for torch; a watchdog that ends this rank if the process that
    started it dies (``owner``, a killed kernel, or a lost torchrun agent: ``_exit_with``); and
    Ctrl-C without a traceback. A terminal's Ctrl-C or a Jupyter interrupt signals the whole
    process group: a run's rank exits at once, quietly, even inside a collective (its launcher
    reports the interruption in one line); a warm pool's rank ignores it, and the pool stays up for
    the next run. (A Ctrl-C that came while the rank still imported torch was held until here:
    ``launcher.ranks_start_with_sigint_held``.) A warm pool's rank also leaves its owner's session
    (``os.setsid``): a signal to the owner's whole process group -- a kernel's shutdown, which
    sends SIGTERM to every child in its group, or ``timeout`` and ``kill -TERM -PGID`` around a
    script -- ends the owner only, and the rank, seeing it gone, removes the pool's files
    (``_exit_with``) instead of dying with them left in TMPDIR."""
    if warm:
        os.setsid()
    gc.freeze()  # (see below)
    torch.set_num_threads(1)
    signal.signal(
        signal.SIGINT, signal.SIG_IGN if warm else signal.SIG_DFL
    )  # SIG_DFL: the OS ends it
    signal.pthread_sigmask(
        signal.SIG_UNBLOCK, {signal.SIGINT}
    )  # held since the launcher started us
    if run_dir:  # for the launcher's reaper and report
        global _BEACON
        rank = os.environ.get("RANK", "0")
        with open(os.path.join(run_dir, f"pid-{rank}"), "w") as f:
            f.write(str(os.getpid()))
        _BEACON = os.path.join(run_dir, f"at-{rank}")
        stopped = os.path.join(run_dir, f"stopped-{rank}")

        def on_sigterm(*_: object) -> None:  # the launcher stopping a rank that still ran
            open(stopped, "w").close()
            os._exit(128 + signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
    global _OWNER
    _OWNER = owner or (os.getppid(), "")
    if _OWNER[0] == 1:  # torchrun's agent died before we could watch it
        os._exit(1)
    threading.Thread(
        target=_exit_with, args=(_OWNER, run_dir), name="placement-edu-parent-watch", daemon=True
    ).start()


def _exit_with(owner: tuple[int, str], run_dir: str | None) -> None:
    """Wait for the process ``owner[0]`` to end, however it ends (SIGKILL, killed for memory), then
    leave (``_leave``). The owner is the launching process, not this rank's parent: a rank forked
    by the forkserver (``forkserver.py``) has the forkserver as its parent, and the
    forkserver outlives a killed kernel for as long as any rank it forked is alive. A pidfd
    (Linux >= 5.3) becomes readable the moment its process ends; elsewhere, poll every 0.5 s."""
    try:
        pidfd = os.pidfd_open(owner[0])
    except ProcessLookupError:  # gone already
        pidfd = None
    except (AttributeError, OSError):  # no pidfd here: poll
        while rundir.alive(owner[0]):
            time.sleep(0.5)
        pidfd = None
    if pidfd is not None:
        select.select([pidfd], [], [])
    _leave(run_dir, owner[1])


def _leave(run_dir: str | None, owner_dir: str) -> None:
    """The owner is gone: remove the run's folder and the owner's multiprocessing folder (nobody
    else is left to), and end this rank at once. The run's folder is renamed first: a rank still
    running writes its beacon and progress files under the old name, and those writes now fail
    instead of filling the folder again while it is being removed."""
    if run_dir:
        gone = f"{run_dir}-gone-{os.getpid()}"
        try:
            os.rename(run_dir, gone)  # one rank wins; the others find it gone
        except OSError:
            gone = ""
        rundir.remove(gone)
        time.sleep(0.1)  # a file opened just before the rename
        rundir.remove(gone)
    rundir.remove(owner_dir)
    os._exit(1)


def _done(run_dir: str | None) -> None:
    """This rank ends with its results: ``done-RANK`` in the run's folder, so that the launcher's
    reaper does not take its exit for a death (``rundir.died_silently``)."""
    if run_dir:
        try:
            open(os.path.join(run_dir, f"done-{os.environ.get('RANK', '0')}"), "w").close()
        except OSError:  # the folder is gone: the run has ended
            pass


@contextlib.contextmanager
def _rank_ends(run_dir: str | None) -> Iterator[None]:
    """How a rank's entry point ends, whatever happens inside: a failure leaves its traceback in
    the run folder (``_fail``), and torch's groups and process group are let go."""
    try:
        yield
    except BaseException:
        _fail(run_dir)
    finally:
        _GROUPS.clear()
        if dist.is_initialized():
            dist.destroy_process_group()


def _fail(run_dir: str | None) -> NoReturn:
    """Leave this rank's traceback, timed, where the launcher reads it (the earliest is the root
    cause), and exit 1. Launched by the package, the rank exits at once: the traceback is in the
    run folder, and torch's own error file (a pickle in TMPDIR) is never written. Under torchrun,
    the exception goes on to torch's ``record``."""
    if not run_dir:
        raise
    try:  # nothing escapes: torch would pickle it to TMPDIR
        if _OWNER is not None and not rundir.alive(
            _OWNER[0]
        ):  # it failed because the kernel was killed
            _leave(run_dir, _OWNER[1])
        rank = os.environ.get("RANK", "?")
        partial = os.path.join(
            run_dir, f".error-{rank}"
        )  # whole or absent: the launcher may read it now
        with open(partial, "w") as f:  # (the folder is gone if the run already ended)
            f.write(f"{time.time():.6f}\n{traceback.format_exc()}")
        os.replace(partial, os.path.join(run_dir, f"error-{rank}"))
        sys.stderr.flush()
    finally:
        os._exit(1)


@record
def pool_main(
    port: int, timeout_s: float, run_dir: str, owner: tuple[int, str] | None = None
) -> list:
    """Entry point of every rank of a warm ``WorkerPool`` (``pool.py``): set up torch.distributed
    once, then run job after job. Job k is the key ``job/k`` of the pool's store (a TCPStore the
    parent holds on ``port``): a pickled (configs, failure) pair, or "stop". Each rank puts its
    results under ``result/k/RANK``, also when the parent cancelled the job (``cancel/k``: its
    caller was interrupted) -- then every run stops after the same step, and the rest of the job
    is skipped. A rank whose ``owner`` died (the kernel was killed) exits."""
    import pickle

    with _rank_ends(run_dir):
        _start_rank(run_dir, warm=True, owner=owner)
        dist.init_process_group(_backend(), timeout=timedelta(seconds=timeout_s))
        store = dist.TCPStore(
            "127.0.0.1", port, is_master=False, timeout=timedelta(seconds=timeout_s)
        )
        rank = dist.get_rank()
        store.add("ready", 1)  # for the parent's progress bar
        control = Comm({}, timeout_s, _BEACON)  # (the cancel checks: _cancel_check)
        for k in itertools.count():
            while not store.check([f"job/{k}"]):  # wait for the next job
                time.sleep(POLL_S)
            job = pickle.loads(store.get(f"job/{k}"))
            if job == "stop":
                _done(run_dir)
                return []
            configs, failure = job
            (failure or RankFailure()).inject("met", timeout_s)
            progress = os.path.join(run_dir, f"progress-{k}")
            results = [
                run_job(
                    c,
                    timeout_s,
                    progress,
                    index=(j, len(configs)),
                    should_stop=_cancel_check(store, k, c.world_size, timeout_s, control),
                )
                for j, c in enumerate(configs)
            ]
            # (torch's stub types a value as str; the store takes bytes, as pickle makes them)
            store.set(f"result/{k}/{rank}", pickle.dumps(results))  # type: ignore[arg-type]
    return []


def _cancel_check(
    store: dist.TCPStore, k: int, world: int, timeout_s: float, control: Comm
) -> Callable[[], bool]:
    """``should_stop`` for a run of job ``k`` on the pool's ranks 0 .. ``world`` - 1: whether the
    parent has set ``cancel/k``. Rank 0 reads the key and sends what it read to the others
    (``Comm.control``), so every rank of the run stops after the same step: a rank that read the
    key a step earlier than its peers would stop alone and leave them waiting in a collective
    until the timeout. (Called by every rank of the pool: every rank takes part in making a
    group.)"""
    group = _group(list(range(world)), timeout_s)
    flag = torch.zeros(1, dtype=torch.int32, device=_device()[0])  # (NCCL sends GPU tensors)
    steps = itertools.count()

    def should_stop() -> bool:
        control.at(next(steps), "between steps")  # (for the message if a peer never joins)
        if dist.get_rank() == 0:
            flag.fill_(int(store.check([f"cancel/{k}"])))
        control.control(flag, group)
        return bool(flag.item())

    return should_stop


def _torchrun(argv: list[str]) -> int:
    """``torchrun ... -m placement_edu.runtime.worker STRATEGY [options]``: rank 0 prints the
    report. Bad input is refused by every rank alike before any of them connects: rank 0 says why
    in one line, the others say nothing, and each exits 2 (torchrun then prints its own summary of
    the ranks that failed)."""
    import json

    from placement_edu.errors import PlacementError
    from placement_edu.runtime.args import parser
    from placement_edu.runtime.result import RunResult

    try:
        args, config = _torchrun_config(argv)
    except PlacementError as error:
        if _torchrun_rank() == "0":
            print(f"{parser().prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return _refused()
    except SystemExit as done:  # --help (0) or argparse's one-line usage error (2)
        return _refused() if done.code else 0
    _start_rank(None)  # the watchdog: exit if torchrun's agent dies
    dist.init_process_group(_backend(), timeout=timedelta(seconds=args.timeout))
    try:
        mine = run_job(config, args.timeout)
        everyone: list[dict | None] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)  # (outside the ledger: reporting only)
    finally:
        _GROUPS.clear()
        if dist.is_initialized():
            dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        # Every rank ran (torchrun's world is the run's): none answered None.
        result = RunResult.build(config, [r for r in everyone if r is not None])
        print(json.dumps(result.to_dict(), indent=2) if args.json else result)
    return 0


#: Seconds a rank other than 0 waits after refusing bad input: torchrun's agent stops every rank
#: once one has exited, and rank 0 may not have said why yet. Where rank 0 runs on this node, the
#: agent ends the wait (SIGTERM) as soon as rank 0 has spoken and exited.
QUIET_RANK_WAIT_S = 30.0


def _refused() -> int:
    """Exit status 2 (bad input), from rank 0 at once, from the others once rank 0 has spoken."""
    if _torchrun_rank() != "0":
        time.sleep(QUIET_RANK_WAIT_S)
    return 2


def _torchrun_rank() -> str:
    """This rank, as torchrun numbers it ("0" outside torchrun)."""
    return os.environ.get("RANK", "0")


def _torchrun_config(argv: list[str]) -> tuple[argparse.Namespace, RunConfig]:
    """The options and the run they describe, checked, the same on every rank. Only rank 0 prints
    what argparse prints (a usage error, ``--help``): N ranks would print it N times."""
    from placement_edu.errors import PlacementError
    from placement_edu.runtime.args import config_from_args, parser

    if "WORLD_SIZE" not in os.environ:
        raise PlacementError(
            "the worker runs under torchrun, which sets the world size: torchrun "
            f"--nproc-per-node 2 -m {parser().prog} {' '.join(argv) or 'zero3'}"
        )
    with contextlib.ExitStack() as quiet:
        if _torchrun_rank() != "0":
            quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
            quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
        args = parser().parse_args(argv)
    config = config_from_args(args, int(os.environ["WORLD_SIZE"]))
    config.validate()
    return args, config


if __name__ == "__main__":
    sys.exit(_torchrun(sys.argv[1:]))
