"""What this container allows: the memory limit of the cgroup this process runs in, and whether a
run of N ranks fits under it. Binder gives a learner 1-2 GiB and kills a process that goes over;
a run that would not fit is refused before it starts, in one line, instead of being killed mid-cell.

Linux puts every process in a cgroup, named in ``/proc/self/cgroup``:

- cgroup v1: a line ``4:memory:/some/path``; the limit is ``memory.limit_in_bytes`` in
  ``/sys/fs/cgroup/memory/some/path`` (a huge number, 2^63 rounded to a page, means none);
- cgroup v2: a line ``0::/some/path``; the limit is ``memory.max`` in ``/sys/fs/cgroup/some/path``
  ("max" means none).

A parent's limit binds its children too, so the limit is the smallest one from this cgroup up to
the root. Torch-free: it reads text files only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from placement_edu.units import MiB
from placement_edu.shown import Shown


#: Memory one more rank adds to a run, in MiB, before its job: a rank forked from the forkserver,
#: which has imported torch already (those pages are shared, charged once), then set up gloo.
#: Measured (benchmarks/bench_binder.py's cgroup, torch 2.13 CPU, Linux x86-64): launches of dp and
#: zero3 on the toy model peak at 332, 360 and 417 MiB on 2, 4 and 8 ranks -- 14 MiB a rank; with
#: "spawn" (every rank importing torch) 454, 752 and 1,349 MiB, 150 MiB a rank. Rounded up.
RANK_MIB = 20

#: A rank running one of PyTorch's own implementations (``torch-ref``) holds, at its peak, about
#: this many times the whole model's training state (float64 P + G + Adam m and v, 32 B per
#: parameter): its own P, G and optimizer state, DDP's bucket copy of G, the single-process
#: reference run it compares against, Adam's temporaries. Measured: 347-350 MiB private per rank for
#: notebook 02's DDP run (Psi = 5,330,960; 163 MiB of state), (350 - 20) / 163 = 2.0, rounded up.
TORCH_REF_STATE_FACTOR = 2.1

#: What the launching process needs beside its ranks, in MiB: the forkserver with torch and the
#: modules of PyTorch's implementations imported (``forkserver.PRELOAD``; 217-222 MiB private,
#: measured), started on the first run and kept while runs follow.
FORKSERVER_MIB = 225

#: A limit this large means "no limit" (cgroup v1 writes 2^63 - 1 rounded down to a page).
UNLIMITED = 2**62


@dataclass(frozen=True)
class MemoryLimit(Shown):
    """The cgroup memory this process may use: ``limit`` and ``in_use`` in bytes (``in_use`` is
    the cgroup's usage less its inactive page cache, which the kernel takes back before killing
    anything: the "working set"), and the cgroup file the limit came from."""

    limit: int
    in_use: int
    source: str

    @property
    def free(self) -> int:
        return max(self.limit - self.in_use, 0)

    def __str__(self) -> str:
        return (
            f"memory limit {self.limit / MiB:,.0f} MiB, {self.in_use / MiB:,.0f} MiB in use, "
            f"{self.free / MiB:,.0f} MiB free ({self.source})"
        )


def cgroup_dirs(
    proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup"
) -> list[tuple[str, int]]:
    """(memory cgroup directory, cgroup version) of this process: the v1 memory controller's if
    the machine has one, else the v2 unified hierarchy's. Empty when neither can be read."""
    try:
        with open(proc_cgroup) as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return []
    found = []
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            found.append((os.path.join(root, "memory", path.lstrip("/")), 1))
    for hierarchy, controllers, path in lines:
        if (
            hierarchy == "0"
            and controllers == ""
            and os.path.exists(os.path.join(root, "cgroup.controllers"))
        ):
            found.append((os.path.join(root, path.lstrip("/")), 2))
    return found


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _stat(directory: str, key: str) -> int:
    """One field of ``memory.stat``, 0 if absent."""
    for line in (_read(os.path.join(directory, "memory.stat")) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def memory_limit(
    proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup"
) -> MemoryLimit | None:
    """The tightest memory limit over this process's cgroup and its parents, with what is in use
    there; None when no limit is set (or none can be read)."""
    for directory, version in cgroup_dirs(proc_cgroup, root):
        limit_file, usage_file, inactive = (
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            if version == 1
            else ("memory.max", "memory.current", "inactive_file")
        )
        best: MemoryLimit | None = None
        here = directory
        while here.startswith(root) and os.path.isdir(here):
            text = _read(os.path.join(here, limit_file))
            if text is not None and text != "max" and text.isdigit() and int(text) < UNLIMITED:
                if best is None or int(text) < best.limit:
                    usage = int(_read(os.path.join(here, usage_file)) or 0)
                    best = MemoryLimit(
                        int(text),
                        max(usage - _stat(here, inactive), 0),
                        os.path.join(here, limit_file),
                    )
            if os.path.normpath(here) == os.path.normpath(
                os.path.join(root, "memory" if version == 1 else "")
            ):
                break
            here = os.path.dirname(here)
        if best is not None:
            return best
    return None


def rank_bytes(jobs: Sequence[object]) -> int:
    """Bytes one rank of a run of ``jobs`` needs at its peak, estimated from the constants above:
    ``RANK_MIB``, plus ``TORCH_REF_STATE_FACTOR`` times the model's whole state for a job of
    PyTorch's own implementations (the engines' toy models are a few KiB)."""
    from placement_edu.implementations import TorchRefConfig, parse_model

    state = 0
    for job in jobs:
        if isinstance(job, TorchRefConfig) and parse_model(job.model):
            widths = parse_model(job.model)
            params = sum(a * b + b for a, b in zip(widths, widths[1:]))
            state = max(state, 32 * params)  # float64: 8 (P) + 8 (G) + 16 (Adam m, v) bytes
    return RANK_MIB * MiB + int(TORCH_REF_STATE_FACTOR * state)


def ranks_that_fit(free_bytes: int, per_rank: int, forkserver_running: bool = False) -> int:
    """How many ranks of ``per_rank`` bytes fit in ``free_bytes`` (bytes), after the forkserver's
    ``FORKSERVER_MIB`` if it still has to start."""
    room = free_bytes - (0 if forkserver_running else FORKSERVER_MIB * MiB)
    return max(room // per_rank, 0)


def check_fits(
    world_size: int,
    per_rank: int = RANK_MIB * MiB,
    forkserver_running: bool = False,
    limit: MemoryLimit | None = None,
) -> None:
    """Refuse, in one line that says why, a run of ``world_size`` ranks of ``per_rank`` bytes each
    that this container has no room for (a ``PlacementError``, before any rank starts). Nothing
    happens where no limit is set."""
    from placement_edu.errors import PlacementError

    limit = memory_limit() if limit is None else limit
    if limit is None:
        return
    fit = ranks_that_fit(limit.free, per_rank, forkserver_running)
    if world_size > fit:
        start = 0 if forkserver_running else FORKSERVER_MIB
        rank_mib = -(-per_rank // MiB)  # rounded up
        advice = f"run {fit} ranks or fewer" if fit >= 2 else "no run of 2 ranks or more fits"
        raise PlacementError(
            f"not enough memory for {world_size} ranks: "
            f"they need about {world_size * rank_mib + start} MiB "
            f"({rank_mib} MiB a rank"
            f"{f' + {start} MiB to start them' if start else ''}), and this container's limit is "
            f"{limit.limit / MiB:.0f} MiB with {limit.in_use / MiB:.0f} MiB in use "
            f"({limit.source}); "
            f"{advice}, or shut down other notebooks' kernels"
        )
