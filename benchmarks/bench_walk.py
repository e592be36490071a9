r"""A learner's walk through the course: 00 -> 12, each notebook executed top to bottom in a kernel
of its own, and every earlier kernel left running (as JupyterLab leaves it when the learner opens
the next notebook) -- inside one memory cgroup, as Binder runs a learner's container.

    sudo .venv/bin/python benchmarks/bench_walk.py [--limit 2GiB] [--pace 0] [notebooks/...]
    .venv/bin/python benchmarks/bench_walk.py --no-cgroup   # kernels only, no root needed

Per notebook it prints what its kernel holds (RSS / PSS of the kernel process alone, MiB = 2^20
bytes): after its first code cell (the imports), and idle after its last cell; the first cell after
which the kernel had torch loaded (``libtorch`` mapped), if any; and the kernel with everything it
started (forkserver, pool ranks: PSS, shared pages split). With a cgroup: the cgroup's charge when
the notebook ended and its peak so far (``memory.max_usage_in_bytes`` / ``memory.peak``, page cache
included), the figure Binder's limit is about.

The course's server configuration (``placement_edu/course/jupyter_server_config.py``) shuts down
a kernel idle for ``cull_idle_timeout`` seconds (checked every ``cull_interval``). A walk at machine
speed is over before any kernel is idle that long, so by default every kernel stays: the worst case.
``--minutes-per-notebook R`` is a learner who spends R minutes on each notebook (the cells run as
they read, the last at the end): before notebook j starts, the kernels the server would have shut
down by then are shut down -- kernel i once (j - i - 1) R >= cull_idle_timeout + cull_interval.
Only the kernels are culled on that clock; the rank servers and warm pools of the kernels still
open keep their own real-time timers (``forkserver.IDLE_S``, ``pool.IDLE_S``), so they are counted
for longer than a learner's walk would hold them. ``--pace S`` waits S real seconds after each
notebook.

Needs root for the cgroup (says so in one line and exits 2 otherwise); ``--no-cgroup`` measures the
kernels without it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_binder import MemoryCgroup, parse_limit  # noqa: E402

from placement_edu.runtime.processes.container import cgroup_dirs  # noqa: E402
from placement_edu.units import GiB, MiB  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"


# --- what a process holds ----------------------------------------------------------------------
def rss_pss(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in bytes, from ``/proc/<pid>/smaps_rollup``; (0, 0) once gone."""
    found = {"Rss:": 0, "Pss:": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(" ")
                if key in found:
                    found[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return found["Rss:"], found["Pss:"]


def has_torch(pid: int) -> bool:
    """Whether the process has torch loaded: its C++ library is mapped."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any("libtorch" in line for line in f)
    except OSError:
        return False


def tree_pss(pid: int) -> int:
    """PSS of ``pid`` and every process under it, in bytes (shared pages split between sharers)."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    return sum(rss_pss(p.pid)[1] for p in procs)


# --- the walk (the runner, inside the cgroup) ----------------------------------------------------
def walk(paths: list[str], timeout_s: int, pace_s: float, kept: int | None) -> None:
    """Execute each notebook in a kernel of its own, keeping every kernel (or the ``kept`` latest
    beside the one running: the others culled, as the server would); one JSON line per notebook.
    Every kernel is shut down at the end."""
    import nbformat
    from nbclient import NotebookClient

    clients: list = []
    try:
        for path in paths:
            if kept is not None:
                for client in clients[: max(len(clients) - kept, 0)]:
                    if client.km is not None:
                        _shut_down(client)
                        client.km = None
            nb = nbformat.read(path, as_version=4)
            client = NotebookClient(
                nb,
                timeout=timeout_s,
                kernel_name="python3",
                resources={"metadata": {"path": str(Path(path).parent)}},
            )
            client.km = client.create_kernel_manager()
            client.start_new_kernel()
            client.start_new_kernel_client()
            clients.append(client)
            pid = client.km.provisioner.process.pid
            report: dict = {"notebook": Path(path).name, "error": "", "torch_cell": None}
            start, first = time.monotonic(), True
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                try:
                    client.execute_cell(cell, index)
                except Exception as error:  # noqa: BLE001 -- reported, the walk goes on
                    report["error"] = report["error"] or f"cell {index}: {type(error).__name__}"
                if first:
                    report["imports"] = rss_pss(pid)
                    first = False
                if report["torch_cell"] is None and has_torch(pid):
                    report["torch_cell"] = index
            report["seconds"] = round(time.monotonic() - start, 1)
            time.sleep(2.0)  # settled: the cell's threads done
            report["idle"] = rss_pss(pid)
            report["tree"] = tree_pss(pid)
            alive = [c for c in clients if c.km is not None]
            report["kernels"] = sum(rss_pss(c.km.provisioner.process.pid)[1] for c in alive)
            report["open"] = len(alive)
            print(json.dumps(report), flush=True)
            time.sleep(pace_s)
    finally:
        for client in clients:
            if client.km is not None:
                _shut_down(client)


def _shut_down(client) -> None:  # noqa: ANN001 -- an nbclient NotebookClient
    """Shut the kernel down as the server does when it culls it (its ranks end with it)."""
    try:
        client._cleanup_kernel()
    except Exception:  # noqa: BLE001 -- a kernel killed for memory is gone already
        pass


def kernels_kept(minutes_per_notebook: float) -> int:
    """How many earlier kernels are still open when a learner who spends ``minutes_per_notebook``
    on each starts the next, under the shipped server configuration's culling."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(
        "jupyter_server_config.py", str(ROOT / "placement_edu" / "course")
    ).load_config()
    culled_after = (
        config.MappingKernelManager.cull_idle_timeout + config.MappingKernelManager.cull_interval
    )
    return math.ceil(culled_after / (60 * minutes_per_notebook))


# --- the parent: the cgroup, the table ----------------------------------------------------------
def main(argv: list[str]) -> int:
    if argv[:1] == ["--walk"]:
        walk(argv[4:], int(argv[1]), float(argv[2]), None if argv[3] == "all" else int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook, in order")
    parser.add_argument("--limit", type=parse_limit, default=2 * GiB, help="default 2GiB")
    parser.add_argument("--pace", type=float, default=0.0, help="seconds after each notebook")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may run")
    parser.add_argument(
        "--minutes-per-notebook",
        type=float,
        help="a learner's pace: kernels idle longer than the server allows are shut down",
    )
    parser.add_argument("--no-cgroup", action="store_true", help="measure the kernels only")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cgroup is still removed
    paths = [str(p) for p in (args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb")))]
    group = None
    if not args.no_cgroup:
        if os.geteuid() != 0 or not cgroup_dirs():
            print(
                f"bench_walk: a memory cgroup needs root and cgroup v1/v2 (uid {os.geteuid()}); "
                "--no-cgroup measures the kernels without one"
            )
            return 2
        group = MemoryCgroup(f"placement-edu-walk-{os.getpid()}", args.limit)
    header = (
        f"{'notebook':36} {'imports':>11} {'idle':>11} {'torch':>8} {'+ranks':>7} "
        f"{'kernels (open)':>14} {'charge':>7} {'peak':>6}  result"
    )
    print(
        "MiB; imports, idle: the kernel's RSS / PSS after its first code cell and after its last; "
        "torch: the first cell after which the kernel held torch; +ranks: PSS of the kernel and "
        "all it started; kernels: PSS of every kernel alive; charge, peak: the cgroup's"
    )
    kept = None if args.minutes_per_notebook is None else kernels_kept(args.minutes_per_notebook)
    print(
        "every kernel left open"
        if kept is None
        else f"{args.minutes_per_notebook:g} minutes a notebook: the server has shut down all but "
        f"the {kept} latest earlier kernels when a notebook starts"
        + f" (placement_edu/course/jupyter_server_config.py); limit {args.limit / MiB:,.0f} MiB"
    )
    print(header)
    runner = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--walk",
            str(args.timeout),
            str(args.pace),
            "all" if kept is None else str(kept),
            *paths,
        ],
        preexec_fn=group.join if group else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    left = 0
    try:
        for line in runner.stdout or []:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            charge = f"{group.usage() / MiB:>7.0f} {group.peak() / MiB:>6.0f}" if group else ""
            imports, idle = r.get("imports", (0, 0)), r["idle"]
            print(
                f"{r['notebook']:36} {imports[0] / MiB:>5.0f}/{imports[1] / MiB:<5.0f} "
                f"{idle[0] / MiB:>5.0f}/{idle[1] / MiB:<5.0f} "
                f"{'-' if r['torch_cell'] is None else 'cell ' + str(r['torch_cell']):>8} "
                f"{r['tree'] / MiB:>7.0f} {r['kernels'] / MiB:>9.0f} ({r['open']:>2}) {charge}  "
                + (f"FAILED at {r['error']}" if r["error"] else f"completed in {r['seconds']} s"),
                flush=True,
            )
        runner.wait()
    finally:
        if group:
            peak, kills = group.peak(), group.oom_kills()
            left = group.remove()
            print(
                f"walk peak: {peak / MiB:,.0f} MiB of {args.limit / MiB:,.0f} "
                f"({100 * (1 - peak / args.limit):.0f} % spare); {kills} process(es) killed for "
                f"memory; {left} left after the kernels were shut down"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
