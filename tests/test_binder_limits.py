"""The course inside Binder's limits (issue 28): ranks never outlive their kernel, a warm pool gives
its memory back when idle, a run that would not fit the container is refused before it starts, and
the heaviest notebook completes inside a real 2 GiB memory cgroup (where this machine lets a test
make one: root and a memory controller)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placement_edu.implementations import TorchRefConfig
from placement_edu.runtime.processes.container import FORKSERVER_MIB, cgroup_dirs, rank_bytes
from placement_edu.units import GiB, MiB

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[1]


def _descendants(pid: int) -> set[int]:
    """Every living process under ``pid`` (children, their children...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":  # a zombie has ended
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _living(pids: set[int]) -> set[int]:
    left = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


def _ranks_and_servers(pids: set[int]) -> set[int]:
    """``pids`` less Python's resource tracker (13 MiB; it lasts as long as this process)."""

    def tracker(pid: int) -> bool:
        try:
            return b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False

    return {pid for pid in pids if not tracker(pid)}


def _kill_and_watch(
    kernel: subprocess.Popen, tmp: Path, within_s: float = 5.0, group: bool = False
) -> tuple[set[int], set[int], float]:
    """SIGKILL ``kernel`` (or, with ``group``, SIGTERM its process group, as a kernel's shutdown
    does to its children and ``timeout`` to a script); return (its processes before, those still
    alive ``within_s`` later, the seconds until the last one ended)."""
    before = _descendants(kernel.pid)
    if group:
        os.killpg(kernel.pid, signal.SIGTERM)
    else:
        os.kill(kernel.pid, signal.SIGKILL)
    kernel.wait(timeout=10)
    killed = time.monotonic()
    while _living(before) and time.monotonic() - killed < within_s:
        time.sleep(0.05)
    return before, _living(before), time.monotonic() - killed


KERNEL_WITH_POOL = """
from placement_edu.runtime import RunConfig, WorkerPool
pool = WorkerPool(2)
print(pool.run(RunConfig("dp", 2, steps=1), progress=False).equivalent, flush=True)
import time
time.sleep(600)
"""

KERNEL_MID_RUN = """
from placement_edu.runtime import RunConfig
from placement_edu.runtime.processes.failure import RankFailure
from placement_edu.runtime.processes.launcher import launch
launch(
    [RunConfig("zero3", 4)], 4, timeout_s=300, progress=False, failure=RankFailure("hang", rank=1)
)
"""


def _kernel(code: str, tmp: Path) -> subprocess.Popen:
    tmp.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=dict(os.environ, TMPDIR=str(tmp)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # (as Jupyter starts a kernel: its own process group)
    )


def test_a_killed_kernel_holding_a_warm_pool_leaves_no_rank_within_5_s_and_nothing_in_tmpdir(
    run_tmpdir,
):
    tmp = run_tmpdir
    kernel = _kernel(KERNEL_WITH_POOL, tmp)
    try:
        assert kernel.stdout.readline().strip() == "True", kernel.stderr.read()[
            -3000:
        ]  # the pool ran, its ranks wait
        before, left, seconds = _kill_and_watch(kernel, tmp)
    finally:
        kernel.kill()
    assert len(before) >= 3, before  # 2 ranks and the forkserver, at least
    assert left == set(), f"{len(left)} processes outlived the kernel by 5 s"
    assert list(tmp.iterdir()) == []
    print(f"{len(before)} processes ended {seconds:.2f} s after the kernel")


def test_a_sigterm_to_a_kernels_group_holding_a_warm_pool_leaves_no_rank_and_nothing_in_tmpdir(
    run_tmpdir,
):
    """A kernel's shutdown (ipykernel sends SIGTERM to every child in its process group, then
    exits), or ``timeout`` around a script: the ranks, in a session of their own, outlive the
    signal long enough to see their owner gone and remove the pool's folder and the owner's."""
    tmp = run_tmpdir
    kernel = _kernel(KERNEL_WITH_POOL, tmp)
    try:
        assert kernel.stdout.readline().strip() == "True", kernel.stderr.read()[-3000:]
        before, left, seconds = _kill_and_watch(kernel, tmp, group=True)
    finally:
        kernel.kill()
    assert len(before) >= 3, before  # 2 ranks and the forkserver, at least
    assert left == set(), f"{len(left)} processes outlived the kernel by 5 s"
    assert list(tmp.iterdir()) == []  # (before: the pool's folder and the kernel's, 18 entries)
    assert kernel.stderr.read() == ""
    print(f"{len(before)} processes ended {seconds:.2f} s after the kernel")


def test_a_kernel_killed_mid_4_rank_run_leaves_no_rank_within_5_s_and_nothing_in_tmpdir(run_tmpdir):
    tmp = run_tmpdir
    kernel = _kernel(KERNEL_MID_RUN, tmp)
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp.glob("placement-edu-*/at-*"))) < 3:  # 3 ranks wait in a collective
            assert time.monotonic() < deadline and kernel.poll() is None, "the run never started"
            time.sleep(0.05)
        before, left, seconds = _kill_and_watch(kernel, tmp)
    finally:
        kernel.kill()
    assert len(before) >= 5, before  # 4 ranks and the forkserver, at least
    assert left == set(), f"{len(left)} processes outlived the kernel by 5 s"
    assert list(tmp.iterdir()) == []
    print(f"{len(before)} processes ended {seconds:.2f} s after the kernel")


KERNEL_WITHOUT_TORCH = (
    """
import sys
import ipykernel  # (a notebook kernel: launches go through an agent)
from placement_edu.runtime import RunConfig, run_many
from placement_edu.runtime.processes.launcher import launch
[r] = run_many([RunConfig("zero3", 2, steps=1)], progress=False)
print(r.equivalent, r.memory_matches(), "torch" in sys.modules, flush=True)
"""
    + KERNEL_MID_RUN
)


def test_a_notebook_kernel_runs_ranks_without_importing_torch_and_a_kill_leaves_nothing(
    run_tmpdir,
):
    # Issue 28: a kernel that imported torch holds ~125 MiB more for its life, and a learner
    # leaves every notebook's kernel open; torch's launcher runs in an agent forked from the rank
    # server (runtime/processes/agent.py). Killed mid-run, the kernel takes the agent and the ranks
    # along.
    tmp = run_tmpdir
    kernel = _kernel(KERNEL_WITHOUT_TORCH, tmp)
    try:
        assert kernel.stdout.readline().split() == ["True", "True", "False"], kernel.stderr.read()
        deadline = time.monotonic() + 120
        while len(list(tmp.glob("placement-edu-*/at-*"))) < 3:  # 3 ranks wait in a collective
            assert time.monotonic() < deadline and kernel.poll() is None, "the run never started"
            time.sleep(0.05)
        before, left, seconds = _kill_and_watch(kernel, tmp)
    finally:
        kernel.kill()
    assert len(before) >= 6, before  # 4 ranks, the agent and the forkserver, at least
    assert left == set(), f"{len(left)} processes outlived the kernel by 5 s"
    assert list(tmp.iterdir()) == []
    print(f"{len(before)} processes ended {seconds:.2f} s after the kernel")


def test_an_idle_pool_closes_itself_and_then_the_forkserver_stops(tmp_path, monkeypatch):
    """Memory given back: the pool's ranks after ``idle_s``, the forkserver ``IDLE_S`` after
    that."""
    from placement_edu.runtime import RunConfig, WorkerPool
    from placement_edu.runtime.processes import forkserver

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(forkserver, "IDLE_S", 1.0)
    pool = WorkerPool(2, idle_s=1.0)
    try:
        assert pool.run(RunConfig("dp", 2, steps=1), progress=False).equivalent
        ranks = _ranks_and_servers(_descendants(os.getpid()))
        assert pool.alive and forkserver.running() and len(ranks) >= 3  # 2 ranks, the server
        deadline = time.monotonic() + 15
        while (pool.alive or forkserver.running()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pool.alive, "the idle pool did not close"
        assert not forkserver.running(), "the forkserver outlived its last holder by IDLE_S + 14 s"
        assert _living(ranks) == set()
        assert pool.run(
            RunConfig("dp", 2, steps=1), progress=False
        ).equivalent  # and both start again
    finally:
        pool.close()


def test_a_cold_run_leaves_the_forkserver_for_the_next_cell_then_stops_it(tmp_path, monkeypatch):
    from placement_edu.runtime import RunConfig
    from placement_edu.runtime.processes import forkserver
    from placement_edu.runtime.processes.launcher import run

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(forkserver, "IDLE_S", 2.0)
    assert run(RunConfig("zero2", 2, steps=1), progress=False).equivalent
    assert forkserver.running()  # ready for the next cell...
    time.sleep(1.5)
    assert forkserver.running()
    deadline = time.monotonic() + 10
    while forkserver.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not forkserver.running()  # ...and gone after IDLE_S
    assert _ranks_and_servers(_descendants(os.getpid())) == set()


# --- inside a real memory cgroup ------------------------------------------------------------------
def _cgroup_or_skip() -> str:
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    dirs = [d for d, version in cgroup_dirs() if version == 1]
    if not dirs or not os.access(dirs[0], os.W_OK):
        pytest.skip("no writable cgroup v1 memory controller on this machine")
    return dirs[0]


def _in_cgroup(
    parent: str, name: str, limit: int, argv: list[str], timeout_s: float
) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``argv`` inside a new memory cgroup limited to ``limit`` bytes; (its result, the peak
    bytes the cgroup was charged). The cgroup is removed after."""
    path = os.path.join(parent, f"{name}-{os.getpid()}")
    os.mkdir(path)
    try:
        Path(path, "memory.limit_in_bytes").write_text(str(limit))
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=ROOT,
            preexec_fn=lambda: Path(path, "cgroup.procs").write_text(str(os.getpid())),
        )
        peak = int(Path(path, "memory.max_usage_in_bytes").read_text())
    finally:
        for _ in range(100):
            for pid in Path(path, "cgroup.procs").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
            if not Path(path, "cgroup.procs").read_text().split():
                break
            time.sleep(0.1)
        os.rmdir(path)
    return done, peak


REFUSED = """
from placement_edu.errors import PlacementError
from placement_edu.implementations import TorchRefConfig
from placement_edu.runtime.measurement.torch_ref_result import run_torch_refs
try:
    run_torch_refs(
        [TorchRefConfig("ddp", 4, model="mlp:64,1024,1024,1024,1024,1024,1024,16", steps=2)]
    )
except PlacementError as error:
    print(error)
"""


def test_a_run_that_would_not_fit_the_cgroup_is_refused_in_one_line_before_any_rank_starts():
    """Notebook 02's DDP run on 4 ranks of about 476 MiB inside 1 GiB: refused, nothing started."""
    parent = _cgroup_or_skip()
    done, peak = _in_cgroup(
        parent, "placement-edu-test-refuse", GiB, [sys.executable, "-c", REFUSED], timeout_s=120
    )
    line = done.stdout.strip()
    per_rank = -(
        -rank_bytes([TorchRefConfig("ddp", 4, model="mlp:64,1024,1024,1024,1024,1024,1024,16")])
        // MiB
    )
    assert line.startswith(
        f"not enough memory for 4 ranks: they need about {4 * per_rank + FORKSERVER_MIB} MiB "
        f"({per_rank} MiB a rank + {FORKSERVER_MIB} MiB to start them), and this container's "
        "limit is 1024 MiB with "
    ), done.stdout + done.stderr[-2000:]
    assert "\n" not in line and line.endswith(
        "run 2 ranks or fewer, or shut down other notebooks' kernels"  # (no torch imported yet)
    )
    assert peak < 400 * MiB, (
        f"peak {peak / MiB:.0f} MiB: something started"
    )  # the python process alone


@pytest.mark.slow
def test_notebook_02_completes_inside_a_2_gib_cgroup_with_a_quarter_to_spare():
    parent = _cgroup_or_skip()
    notebook = ROOT / "notebooks" / "02_replicated.ipynb"
    done, peak = _in_cgroup(
        parent,
        "placement-edu-test-nb02",
        2 * GiB,
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--stdout",
            "--ExecutePreprocessor.timeout=300",
            str(notebook),
        ],
        timeout_s=400,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert peak <= 0.75 * 2 * GiB, f"peak {peak / MiB:.0f} MiB of 2048"
    print(f"notebook 02 under 2 GiB: peak {peak / MiB:.0f} MiB")
