"""What each rank times when this machine is calibrated (SPEC §9): collectives over a range of
sizes, and compute. The parent side -- launching, collecting, fitting -- is ``calibrate.py``.

A ``Calibration`` is a job like a ``RunConfig``: ``launcher.launch`` starts the ranks (torch's
elastic launcher, the same failure handling and timeouts) and each rank's ``worker.run_job`` hands
it to ``run_rank`` here. Each rank then, on its warm process group:

1. times every op in ``ops`` (``timing.fit.CALIBRATED_OPS``) at every payload size: ``warmup``
   untimed calls, then ``repeats`` timed ones, each after a barrier (so the ranks start together)
   -- wall time by ``time.perf_counter``;
2. times two compute probes, every rank at once (the way a run computes), one thread per rank:
   - a float64 matrix product of ``matmul`` x ``matmul`` (2·n³ FLOPs): what this machine's cores
     achieve on dense work -- the ``flops`` of the ``this_machine`` preset;
   - the toy MLP's forward + backward on one rank's micro-batch (6·Ψ·rows FLOPs, SPEC §9's
     6·Ψ·tokens): what the engines' own tiny steps achieve, dominated by per-operation overhead.

The payload S is SPEC §4's (all-gather: the full output; reduce-scatter: the full input; send: the
message, from the group's first rank to its second).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from placement_edu.errors import MAX_LOCAL_WORLD_SIZE, PlacementError, expect, positive_int
from placement_edu.mesh import Mesh
from placement_edu.schedule import OpKind
from placement_edu.runtime.measurement.comm import _all_gather, _reduce_scatter
from placement_edu.runtime.processes.progress import write as write_progress
from placement_edu.timing.fit import CALIBRATED_OPS

#: Payload sizes S in bytes: 1 KiB to 4 MiB, every power of two (float64 elements: 128 to 524,288).
DEFAULT_SIZES = tuple(2**k for k in range(10, 23))
ELEMENT = torch.float64


@dataclass(frozen=True)
class Calibration:
    """What to time on ``world_size`` ranks (one process group over all of them)."""

    world_size: int
    sizes: tuple[int, ...] = DEFAULT_SIZES
    repeats: int = 10
    warmup: int = 3
    ops: tuple[str, ...] = CALIBRATED_OPS
    matmul: int = 256

    @property
    def label(self) -> str:
        return f"calibration on {self.world_size} ranks"

    @property
    def mesh(self) -> Mesh:
        return Mesh.of(data=self.world_size)

    def validate(self) -> None:
        """Refuse what cannot run, before any process starts."""
        n = positive_int("world_size", self.world_size)
        expect(
            2 <= n <= MAX_LOCAL_WORLD_SIZE,
            f"a calibration needs 2 to {MAX_LOCAL_WORLD_SIZE} ranks, got {n}",
        )
        positive_int("repeats", self.repeats)
        expect(
            isinstance(self.warmup, int) and self.warmup >= 0,
            f"warmup must be a whole number >= 0, got {self.warmup!r}",
        )
        expect(bool(self.sizes), "give at least one payload size")
        for size in self.sizes:
            expect(
                positive_int("size", size) // ELEMENT.itemsize >= n,
                f"a payload of {size} B holds fewer than one float64 per rank on {n} ranks; "
                f"give sizes of at least {8 * n} B",
            )
        unknown = set(self.ops) - set(CALIBRATED_OPS)
        expect(
            not unknown,
            f"cannot calibrate {sorted(unknown)}; known ops: {', '.join(CALIBRATED_OPS)}",
        )
        positive_int("matmul", self.matmul)

    def elements(self, size: int) -> int:
        """float64 elements of a payload of ``size`` bytes, rounded down to equal chunks per
        rank."""
        return size // ELEMENT.itemsize // self.world_size * self.world_size


# --- on every rank ---------------------------------------------------------------------------
def _op_call(
    op: str, elements: int, group: dist.ProcessGroup | None, ranks: list[int]
) -> Callable[[], object]:
    """A function that issues ``op`` once on ``elements`` float64 -- the same torch calls the
    ``Comm`` ledger makes (send: non-blocking, then waited for, as a pipeline stage does; h2d: a
    copy, which on a CPU-only machine is a memory copy, on every rank at once)."""
    n, rank = len(ranks), dist.get_rank()
    full = torch.ones(elements, dtype=ELEMENT)
    part = torch.ones(elements // n, dtype=ELEMENT)
    if op == OpKind.ALL_REDUCE:
        return lambda: dist.all_reduce(full, group=group)
    if op == OpKind.ALL_GATHER:
        return lambda: _all_gather(full, part, group=group)
    if op == OpKind.REDUCE_SCATTER:
        return lambda: _reduce_scatter(part, full, group=group)
    if op == OpKind.SEND:
        if rank == ranks[0]:
            return lambda: _wait(dist.isend(full, ranks[1]))
        if rank == ranks[1]:
            return lambda: _wait(dist.irecv(full, ranks[0]))
        return lambda: None  # the other ranks wait at the barriers
    if op == OpKind.H2D:  # a host copy, as ``Comm.h2d`` makes it
        host = torch.empty_like(full)
        return lambda: host.copy_(full)
    raise PlacementError(f"cannot calibrate {op!r}")


def _wait(work: dist.Work | None) -> None:
    """Wait for a point-to-point transfer (torch answers None only to a rank outside the group)."""
    assert work is not None
    work.wait()


def _timed(
    call: Callable[[], object], repeats: int, warmup: int, group: dist.ProcessGroup | None
) -> list[float]:
    """Seconds of each of ``repeats`` calls on this rank, after ``warmup`` untimed ones; every call
    starts after a barrier."""
    out = []
    for k in range(warmup + repeats):
        dist.barrier(group=group)
        start = time.perf_counter()
        call()
        if k >= warmup:
            out.append(time.perf_counter() - start)
    return out


def toy_step(world_size: int) -> tuple[Callable[[], None], int, str]:
    """(forward + backward of the toy MLP on one rank's micro-batch, its FLOPs 6·Ψ·rows, label):
    the model ``placement-edu run dp --world-size N`` uses, and its global batch rounded up to a
    multiple of N so that every world size ``calibrate`` accepts gets whole rows per rank (16 rows
    split 4 ways as a run's; 18 split 3 ways, 64 split 64 ways)."""
    from placement_edu.runtime.config import RunConfig
    from placement_edu.runtime.engines.toy import (
        TinyMLP,
        init_params,
        loss_fn,
        make_batch,
        mlp_forward,
    )

    batch = RunConfig("dp", world_size).global_batch
    config = RunConfig("dp", world_size, global_batch=-(-batch // world_size) * world_size)
    module, rows = config.module(), config.micro_rows()
    assert isinstance(module, TinyMLP)  # dp: no tensor axis, so the MLP
    params = {n: p.requires_grad_() for n, p in init_params(module, 0, ELEMENT).items()}
    x, y = make_batch(0, module, rows, 0, ELEMENT)
    psi = sum(p.numel() for p in params.values())

    def step() -> None:
        loss_fn(mlp_forward(params, x, range(len(module.layers))), y).backward()

    return (
        step,
        6 * psi * rows,
        f"toy MLP forward+backward (Ψ = {psi}, {rows} rows; 6·Ψ·rows FLOPs)",
    )


def run_rank(
    job: Calibration,
    group: dist.ProcessGroup | None,
    ranks: list[int] | None,
    progress: str | None = None,
    index: tuple[int, int] = (0, 1),
) -> dict | None:
    """This rank's times: ``{"ops": [[op, payload_bytes, [seconds per repeat]], ...],
    "compute": [[label, flops, [seconds per repeat]], ...]}``. ``ranks``: the calibration's group
    (None on a rank beyond it, which waits at the closing barrier and returns None). Rank 0 writes
    each probe done to ``progress`` (``progress.write``; ``index``: this job, jobs in the launch),
    between the timed calls."""
    if ranks is None:
        dist.barrier()
        return None
    done = _probe_counter(job, progress if dist.get_rank() == 0 else None, index)
    ops = []
    for op in job.ops:
        for size in job.sizes:
            elements = job.elements(size)
            ops.append(
                [
                    op,
                    elements * ELEMENT.itemsize,
                    _timed(_op_call(op, elements, group, ranks), job.repeats, job.warmup, group),
                ]
            )
            done()
    a, b = (
        torch.rand(job.matmul, job.matmul, dtype=ELEMENT),
        torch.rand(job.matmul, job.matmul, dtype=ELEMENT),
    )
    toy, toy_flops, toy_label = toy_step(job.world_size)
    matmul = _timed(lambda: a @ b, job.repeats, job.warmup, group)
    done()
    compute = [
        [f"float64 matmul {job.matmul}x{job.matmul} (2·n³ FLOPs)", 2 * job.matmul**3, matmul],
        [toy_label, toy_flops, _timed(toy, job.repeats, job.warmup, group)],
    ]
    done()
    dist.barrier()  # no rank starts the next job early
    return {"rank": dist.get_rank(), "ops": ops, "compute": compute}


def _probe_counter(
    job: Calibration, path: str | None, index: tuple[int, int]
) -> Callable[[], None]:
    """A function to call after each probe (every op at every size, then the two compute probes):
    it writes how many are done to the progress file at ``path`` (None: nothing to write)."""
    total, done = len(job.ops) * len(job.sizes) + 2, 0

    def count() -> None:
        nonlocal done
        done += 1
        if path:
            write_progress(path, *index, done, total, job.label, unit="probe")

    return count
