"""PyTorch's own accounting of one rank's step: the measured side of ``placement_edu.peak``.

- N > 1 (or FSDP2 mixed precision): ``FSDPMemTracker`` (``torch.distributed._tools``) on a *fake*
  process group of N ranks (``dist.init_process_group("fake", ...)``: collectives do nothing, every
  shape is real), ``fully_shard`` on every block and then on the root over an explicit CPU mesh;
- N = 1 in fp32: ``MemTracker`` on the plain module.

The model is built under ``FakeTensorMode``: no memory is allocated, so an 8B model on 1024 ranks
runs on a laptop CPU. One warm-up step (outside the tracker) creates Adam's state and ``zero_grad``
frees the gradients: the tracked step is a steady-state step. Returned, in bytes, by the tracker's
own categories: each state after the step, the activations after forward, the forward/backward peak
and the optimizer-step peak (the tracker's peak is reset before ``step()``: it has no public reset,
so this module sets its two peak fields).

A fake process group is made and destroyed by each ``measure``, in a process other than the
caller's: ``measure_in_subprocess`` runs one case in a process of its own, forked from the runtime's
forkserver (``forkserver.py``), which has imported torch once, so a case starts in milliseconds
instead of the ~2 s of a fresh interpreter's imports. A ``TrackerProcess`` measures case after case
in one such process, and saves each later case the first one's warm-up too.
"""

from __future__ import annotations

import json
import sys
import time
from copy import deepcopy
from multiprocessing.connection import Connection
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.runtime.measurement.hf_models import build_model
from placement_edu.runtime.measurement.reference_models import batch

if TYPE_CHECKING:  # (imported where a step is tracked)
    from torch.distributed._tools.mem_tracker import MemTracker

MP = {"fp32": None, "fsdp2_bf16": (torch.bfloat16, torch.float32)}


def _snapshot(tracker: MemTracker, kind: str = "current") -> dict[str, int]:
    dev = next(iter(tracker.get_tracker_snapshot(kind).values()), {})
    return {str(getattr(k, "value", k)): int(v) for k, v in dev.items()}


def _reset_peak(tracker: MemTracker) -> None:
    """Start a new peak from the current live set (``MemTracker`` keeps one running maximum)."""
    tracker._peak_mem_snap = deepcopy(tracker._curr_mem_snap)
    tracker._peak_mem = {dev: snap["Total"] for dev, snap in tracker._curr_mem_snap.items()}


def tracked_step(
    tracker: MemTracker,
    forward_backward: Callable[[], tuple[dict[str, dict[str, int]], object]],
    opt: torch.optim.Optimizer,
) -> dict[str, dict[str, int]]:
    """One step under ``tracker``: ``forward_backward()``, which returns the snapshots it took
    (its "after_forward") and what the training loop still holds through the step (the loss, an
    fp32 scalar: 4 bytes of the step's peak); then the optimizer's step. The live bytes after
    backward and after the step, and the peaks of both phases (the tracker's peak reset in
    between): the snapshots every tracker run of the package reports."""
    with tracker:
        snaps, held = forward_backward()
        snaps["after_backward"] = _snapshot(tracker)
        snaps["forward_backward_peak"] = _snapshot(tracker, "peak")
        _reset_peak(tracker)
        opt.step()
        snaps["step_peak"] = _snapshot(tracker, "peak")
        snaps["after_step"] = _snapshot(tracker)
        opt.zero_grad()
    del held
    return snaps


def loss_backward(
    tracker: MemTracker, net: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor
) -> Callable[[], tuple[dict[str, dict[str, int]], object]]:
    """``tracked_step``'s ``forward_backward`` for a model that returns its loss: forward of
    ``(ids, labels)``, the live bytes then ("after_forward"), backward; the loss is what the
    training loop still holds."""

    def forward_backward() -> tuple[dict[str, dict[str, int]], object]:
        loss = net(ids, labels)
        after_forward = _snapshot(tracker)
        loss.backward()
        return {"after_forward": after_forward}, loss

    return forward_backward


def _optimizer(model: torch.nn.Module, optimizer: str) -> torch.optim.Optimizer:
    # (foreach, fused) of each variant; None is Adam's own default
    variant: dict[str, tuple[bool | None, bool | None]] = {
        "adam-foreach": (True, None),
        "adam-fused": (None, True),
        "adam-for": (False, None),
    }
    foreach, fused = variant[optimizer]
    return torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach, fused=fused)


def measure(
    model: str | Architecture,
    devices: int,
    rank: int = 0,
    precision: str = "fp32",
    micro_batch: int = 1,
    seq: int = 1024,
    attention: str = "eager",
    recompute: str = "none",
    optimizer: str = "adam-foreach",
    reshard_after_forward: bool = True,
) -> dict:
    """One tracked steady-state step of rank ``rank`` of ``devices`` (bytes by tracker category).
    ``reshard_after_forward`` is ``fully_shard``'s, given to every block (False: a block's
    parameters stay gathered from its forward to its backward)."""
    arch = get_architecture(model)
    fsdp = devices > 1 or precision != "fp32"
    started = time.perf_counter()
    if fsdp:
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", rank=rank, world_size=devices, store=FakeStore())
        mesh = init_device_mesh("cpu", (devices,))
    try:
        with FakeTensorMode():
            net = build_model(arch, attention, recompute)
            if fsdp:
                dtypes = MP[precision]
                policy = MixedPrecisionPolicy(*dtypes) if dtypes else MixedPrecisionPolicy()
                for block in net.blocks:
                    fully_shard(
                        block,
                        mesh=mesh,
                        mp_policy=policy,
                        reshard_after_forward=reshard_after_forward,
                    )
                fully_shard(net, mesh=mesh, mp_policy=policy)
            opt = _optimizer(net, optimizer)
            # warm-up on 8 tokens: FSDP2's lazy initialisation done and Adam's state made, as in the
            # steady state (the same figures as a full-length warm-up, in a fraction of its time)
            net(*batch(arch, micro_batch, 8)).backward()
            opt.step()
            opt.zero_grad()
            ids, labels = batch(arch, micro_batch, seq)
            tracker: MemTracker
            if fsdp:
                tracker = FSDPMemTracker(net, opt)
                tracker.track_inputs((ids, labels))
            else:
                from torch.distributed._tools.mem_tracker import MemTracker

                tracker = MemTracker()
                tracker.track_external(net, opt, ids, labels)
            snaps = tracked_step(tracker, loss_backward(tracker, net, ids, labels), opt)
    finally:
        if fsdp:
            dist.destroy_process_group()
    return {**snaps, "seconds": round(time.perf_counter() - started, 3)}


def states(measured: dict, fsdp: bool) -> dict[str, int]:
    """The tracker's figures under the names ``placement_edu.peak`` uses (bytes)."""
    after = measured["after_step"]
    return {
        "params": after["Sharded Param" if fsdp else "Parameter"],
        "grads": after["Sharded Grad" if fsdp else "Gradient"],
        "optimizer": after["OptState" if fsdp else "Optstate"],
        "activations": measured["after_forward"]["Activation"],
        "forward_backward_peak": measured["forward_backward_peak"]["Total"],
        "step_peak": measured["step_peak"]["Total"],
    }


class TrackerProcess:
    """One process, forked from the forkserver, that measures case after case (``measure``), each
    in a fake process group of its own (``measure`` makes it and destroys it). A case after the
    first skips the first one's warm-up: the tracker's modules imported, torch's first dispatches
    under ``FakeTensorMode`` -- about 2 s of a 4 s GPT-2 case on a 2-core CPU.

    A case that raises is answered with RuntimeError, and the process goes on to the next; one that
    dies or outlives ``timeout_s`` ends the process with it, and the next case starts another."""

    def __init__(self, timeout_s: float = 600) -> None:
        self.timeout_s = timeout_s
        self._child: Any = None  # (a multiprocessing Process, from a context typeshed cannot name)
        self._pipe: Connection | None = None  # this end; the child holds the other

    def measure(self, **case: object) -> dict:
        """``measure(**case)`` in this process's child: the tracker's figures (bytes). A signal
        meanwhile, in a command, ends it with its child (``launcher.ends_as_a_run``)."""
        from placement_edu.runtime.processes.launcher import phase

        model = case.get("model")  # (a name, or an Architecture: named by its name)
        named = getattr(model, "name", None) or model
        where = f"stopped PyTorch's tracker measuring {named} on {case.get('devices')} "
        with phase(where + "fake ranks (its process ended)"):
            return self._measure(case)

    def _measure(self, case: dict) -> dict:
        if self._child is None:
            self._start()
        assert self._pipe is not None
        try:
            self._pipe.send(case)
            # ("ok", the result) or ("error", why): unpickled from the child
            answer: tuple[str, Any] = (
                self._pipe.recv()
                if self._pipe.poll(self.timeout_s)
                else ("lost", f"over {self.timeout_s} s")
            )
        except (EOFError, BrokenPipeError):  # it died without a word (killed, out of memory)
            answer = ("lost", "the process ended without an answer")
        if answer[0] == "lost":
            self.close()
        if answer[0] != "ok":
            raise RuntimeError(f"the tracker run {case} failed: {answer[1]}")
        return answer[1]

    def _start(self) -> None:
        import multiprocessing

        from placement_edu.runtime.processes import forkserver
        from placement_edu.runtime.processes.launcher import ranks_start_with_sigint_held

        context = multiprocessing.get_context(forkserver.start_method())
        self._pipe, theirs = context.Pipe()
        forkserver.hold(self)
        # (typeshed answers get_context(str) with BaseContext, which has no Process; a forkserver or
        # spawn context, which this is, has one)
        self._child = context.Process(  # type: ignore[attr-defined]
            target=_serve, args=(theirs, forkserver.owner()), daemon=True
        )
        with (
            ranks_start_with_sigint_held()
        ):  # (a Ctrl-C now: held in the child until it ignores it)
            self._child.start()
        theirs.close()  # (the child's end is the child's alone: its death reads as EOF here)

    def close(self) -> None:
        """End the child (between cases it only waits for the next) and let the forkserver go."""
        from placement_edu.runtime.processes import forkserver

        if self._child is None:
            return
        if self._child.pid is not None:  # (None: a signal came before it was forked)
            self._child.kill()
            self._child.join()
        if self._pipe is not None:
            self._pipe.close()
        self._child, self._pipe = None, None
        forkserver.release(self)

    def __enter__(self) -> TrackerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def measure_in_subprocess(timeout_s: float = 600, **case: object) -> dict:
    """``measure(**case)`` in a process of its own, forked from the forkserver; a case that fails,
    dies or outlives ``timeout_s`` raises RuntimeError."""
    with TrackerProcess(timeout_s) as process:
        return process.measure(**case)


def _serve(pipe: Connection, owner: tuple[int, str]) -> None:
    """The child's side: case after case, each answered ("ok", ``measure(**case)``) or ("error",
    why), until the parent closes its end. The parent alone ends it: a signal to the terminal's
    process group is ignored here (the parent, signalled too, kills this process); and if the
    parent is killed, this process ends at once and removes the parent's multiprocessing folder,
    as a rank does (``worker._exit_with``), instead of measuring on into a closed pipe."""
    import signal
    import threading

    from placement_edu.runtime.processes.launcher import SIGNALS
    from placement_edu.runtime.worker import _exit_with

    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # (held since it was forked)
    threading.Thread(target=_exit_with, args=(owner, None), daemon=True).start()
    while True:
        try:
            case = pipe.recv()
        except EOFError:
            return
        try:
            pipe.send(("ok", measure(**case)))
        except Exception as error:
            pipe.send(("error", f"{type(error).__name__}: {error}"))


if __name__ == "__main__":
    print(json.dumps(measure(**json.loads(sys.argv[1]))))
