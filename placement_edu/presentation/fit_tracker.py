"""The third answer to "will one rank's step fit?": PyTorch's own tracker (issue 22).

``FSDPMemTracker`` on a fake process group of N ranks (``MemTracker`` at N = 1;
``placement_edu.runtime.measurement.peak_tracker``), run in a child process -- a fake process group
is one per process, and torch stays out of the notebook's -- whose wall time and peak resident
memory are measured too. A run this container has no room for is refused before it starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from placement_edu.errors import PlacementError
from placement_edu.peak import tracker_peak_phase
from placement_edu.presentation.fit_answers import default_seq
from placement_edu.units import MiB

if TYPE_CHECKING:
    from placement_edu.runtime.processes.container import MemoryLimit

#: Peak resident memory of a tracker run's child process, in MiB: torch imported, the model under
#: FakeTensorMode (no tensor memory). Measured by ``track`` (wait4's ru_maxrss, torch 2.13 CPU):
#: 315-317 MiB for GPT-2 at N = 8 and N = 1 (full recomputation) and Llama-3.2-1B at N = 8.
#: Rounded up.
TRACKER_MIB = 330


@dataclass(frozen=True)
class TrackerRun:
    """One tracked steady-state step (``placement_edu.runtime.measurement.peak_tracker``):
    ``states`` by the names ``peak.py`` uses (bytes: params, grads, optimizer, activations,
    forward_backward_peak, step_peak), the tracker's own ``seconds``, the child process's
    ``wall_seconds`` (start-up and torch's import included) and its ``peak_rss`` (bytes of
    resident memory; 0 where unknown)."""

    states: Mapping[str, int]
    seconds: float
    wall_seconds: float
    peak_rss: int

    @property
    def peak_bytes(self) -> int:
        return max(self.states["forward_backward_peak"], self.states["step_peak"])

    @property
    def peak_at(self) -> str:
        """The tracker names a phase, not an event."""
        return tracker_peak_phase(self.states["forward_backward_peak"], self.states["step_peak"])

    def __str__(self) -> str:
        return (
            f"tracker run: {self.seconds:.1f} s tracked, {self.wall_seconds:.1f} s with the child "
            f"process's start-up; its peak: {self.peak_rss / MiB:,.0f} MiB resident"
        )


def check_tracker_fits(limit: MemoryLimit | None = None) -> None:
    """Refuse a tracker run this container has no room for, in one line that says why (a
    ``PlacementError``, before the child starts); nothing happens where no limit is set."""
    from placement_edu.runtime.processes.container import memory_limit

    limit = memory_limit() if limit is None else limit
    if limit is not None and limit.free < TRACKER_MIB * MiB:
        raise PlacementError(
            f"not enough memory for PyTorch's tracker run: its process needs about {TRACKER_MIB} "
            "MiB (torch imported; the model under FakeTensorMode holds no tensor memory), and "
            f"{limit}; shut down other notebooks' kernels"
        )


#: What the child process runs: one case (JSON, its first argument) in, one line of JSON out.
_TRACK = (
    "import json, sys\n"
    "from placement_edu.peak import fsdp2_applies\n"
    "from placement_edu.runtime.measurement.peak_tracker import measure, states\n"
    "case = json.loads(sys.argv[1])\n"
    "raw = measure(**case)\n"
    "fsdp = fsdp2_applies(case['devices'], case['precision'])\n"
    "print(json.dumps({'states': states(raw, fsdp), 'seconds': raw['seconds']}))\n"
)


def track(
    model: str,
    devices: int,
    rank: int = 0,
    precision: str = "fp32",
    micro_batch: int = 1,
    seq: int | None = None,
    recompute: str = "none",
    timeout_s: float = 300,
) -> TrackerRun:
    """PyTorch's tracker for one rank, in a fresh interpreter (a fake process group is one per
    process; torch stays out of this one). Its wall time and peak resident memory are measured."""
    case = dict(
        model=model,
        devices=devices,
        rank=rank,
        precision=precision,
        micro_batch=micro_batch,
        seq=seq or default_seq(model),
        recompute=recompute,
    )
    check_tracker_fits()
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [sys.executable, "-c", _TRACK, json.dumps(case)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        timer = threading.Timer(timeout_s, child.kill)
        timer.start()
        try:
            out, rss = _reap(child)
        finally:
            timer.cancel()
        wall = time.perf_counter() - started
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"the tracker run {case} failed ({child.returncode}): {tail}")
    result = json.loads(lines[-1])
    return TrackerRun(result["states"], result["seconds"], round(wall, 3), rss)


def _reap(child: subprocess.Popen) -> tuple[str, int]:
    """(its stdout, its peak resident bytes): read to the end, then reaped with ``wait4``, which
    reports the child's own peak RSS (0 where the platform has no ``wait4``)."""
    assert child.stdout is not None
    out = child.stdout.read()
    if not hasattr(os, "wait4"):
        child.wait()
        return out, 0
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return out, usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # macOS: bytes; KiB
