r"""The course inside Binder's limits: each notebook executed top to bottom in a fresh kernel inside
a memory cgroup of 2 GiB (or 1 GiB), as Binder runs a learner's container, with the cgroup's peak.

    sudo .venv/bin/python benchmarks/bench_binder.py [--limit 2GiB] [--limit 1GiB] \
        [notebooks/02_replicated.ipynb ...]

For each notebook and limit the script creates a memory cgroup under its own (cgroup v1
``memory.limit_in_bytes``, or v2 ``memory.max``), starts the notebook's runner inside it (an
nbclient process, standing in for the Jupyter server: it starts the kernel, which starts any
ranks, all in the cgroup), and reads the peak the kernel charged the cgroup
(v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``). It samples the cgroup's anonymous memory
(``rss``/``anon`` of ``memory.stat``) every 100 ms as well: the part no page cache can give back.
Over the limit the kernel's OOM killer kills a process, as on Binder; the table then names the
first cell that failed. Processes left in the cgroup after the runner ends are counted (ranks that
outlived their kernel), killed, and the cgroup removed.

The Jupyter server's own share (it idles at about 80 MiB on Binder) is measured once, in a cgroup of
its own, and printed beside the table: the runner stands in for it inside the cgroup.

Needs root (creating a cgroup); says so in one line and exits 2 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from placement_edu.runtime.processes.container import cgroup_dirs  # noqa: E402
from placement_edu.units import GiB, MiB  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
LIMITS = {"2GiB": 2 * GiB, "1.5GiB": 3 * GiB // 2, "1GiB": GiB}


# --- the cgroup ---------------------------------------------------------------------------------
class MemoryCgroup:
    """A child memory cgroup of this process's own, with a limit in bytes; removed by ``remove``."""

    def __init__(self, name: str, limit: int | None) -> None:
        dirs = cgroup_dirs()
        if not dirs:
            raise SystemExit(
                "bench_binder: no memory cgroup found in /proc/self/cgroup (cgroup v1 memory or v2)"
            )
        parent, self.version = dirs[0]
        self.path = os.path.join(parent, name)
        try:
            os.mkdir(self.path)
        except PermissionError:
            raise SystemExit(
                f"bench_binder: cannot create a cgroup in {parent} (uid {os.geteuid()}; needs root)"
            )
        if limit is not None:
            self._write("memory.limit_in_bytes" if self.version == 1 else "memory.max", str(limit))

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def _read(self, name: str) -> str:
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def join(self) -> None:
        """Move the calling process into the cgroup (a child's ``preexec_fn``)."""
        self._write("cgroup.procs", str(os.getpid()))

    def pids(self) -> list[int]:
        return [int(p) for p in self._read("cgroup.procs").split()]

    def usage(self) -> int:
        return int(self._read("memory.usage_in_bytes" if self.version == 1 else "memory.current"))

    def peak(self) -> int:
        """Bytes: the most this cgroup was ever charged (page cache included)."""
        return int(self._read("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"))

    def anon(self) -> int:
        """Bytes of anonymous memory now (plus shared memory): what page-cache reclaim cannot
        free."""
        stat = dict(line.split() for line in self._read("memory.stat").splitlines())
        keys = ("total_rss", "total_shmem") if self.version == 1 else ("anon", "shmem")
        return sum(int(stat.get(k, 0)) for k in keys)

    def oom_kills(self) -> int:
        text = self._read("memory.oom_control" if self.version == 1 else "memory.events")
        return next(
            (int(line.split()[1]) for line in text.splitlines() if line.startswith("oom_kill ")), 0
        )

    def remove(self, grace_s: float = 5.0) -> int:
        """Wait ``grace_s`` for what is left inside to end by itself, kill the rest, remove the
        cgroup; return how many processes outlived the grace (ranks outliving their kernel)."""
        deadline = time.monotonic() + grace_s
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = len(self.pids())
        while self.pids():
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        os.rmdir(self.path)
        return left


# --- one notebook, inside the cgroup ------------------------------------------------------------
def run_notebook(path: str, out_dir: str, timeout_s: int) -> None:
    """The runner (in the cgroup): execute ``path`` top to bottom in a fresh kernel; print one JSON
    line {"completed", "cell", "error", "seconds"} -- ``cell``, the index of the first cell that
    failed (0-based, every cell counted, as in the notebook's JSON)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    at = {"cell": None}

    def on_cell_start(cell, cell_index: int) -> None:  # the cell running now, for the report
        at["cell"] = cell_index

    client = NotebookClient(
        nb,
        timeout=timeout_s,
        kernel_name="python3",
        on_cell_start=on_cell_start,
        resources={"metadata": {"path": str(Path(path).parent)}},
    )
    report = {"completed": True, "cell": None, "error": "", "seconds": 0.0}
    start = time.monotonic()
    try:
        client.execute()
    except (CellExecutionError, DeadKernelError, TimeoutError, RuntimeError) as error:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()  # (no terminal colours)
        last = text.splitlines()[-1][:240] if text else ""
        report.update(completed=False, cell=at["cell"], error=f"{type(error).__name__}: {last}")
    report["seconds"] = round(time.monotonic() - start, 1)
    nbformat.write(nb, os.path.join(out_dir, Path(path).name))
    print(json.dumps(report), flush=True)


def measure(path: Path, limit: int, timeout_s: int) -> dict:
    """Run one notebook in a new cgroup limited to ``limit`` bytes; its peak and ending."""
    group = MemoryCgroup(f"placement-edu-binder-{os.getpid()}-{path.stem}", limit)
    anon_peak, report = 0, None
    with tempfile.TemporaryDirectory(prefix="bench-binder-") as out:
        runner = subprocess.Popen(
            [sys.executable, __file__, "--run-one", str(path), out, str(timeout_s)],
            preexec_fn=group.join,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + timeout_s + 60
        try:
            while runner.poll() is None:
                anon_peak = max(anon_peak, group.anon())
                if time.monotonic() > deadline:
                    runner.kill()
                    break
                time.sleep(0.1)
            text = runner.stdout.read().strip().splitlines() if runner.stdout else []
            report = json.loads(text[-1]) if text and text[-1].startswith("{") else None
        finally:
            peak, kills = group.peak(), group.oom_kills()
            left = group.remove()
    if report is None:
        report = {
            "completed": False,
            "cell": None,
            "seconds": None,
            "error": "the runner was killed"
            if runner.returncode and runner.returncode < 0
            else "no report",
        }
    return {
        **report,
        "peak": peak,
        "anon_peak": anon_peak,
        "oom_kills": kills,
        "left": left,
        "limit": limit,
    }


def server_idle_share(timeout_s: float = 60.0) -> int | None:
    """Bytes the Jupyter server holds idle (no kernel), measured in a cgroup of its own."""
    group = MemoryCgroup(f"placement-edu-binder-{os.getpid()}-server", None)
    with tempfile.TemporaryDirectory(prefix="bench-binder-server-") as home:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter",
                "server",
                "--no-browser",
                "--port=0",
                "--allow-root",
                f"--ServerApp.root_dir={home}",
                "--ServerApp.token=bench",
            ],
            preexec_fn=group.join,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        usage, deadline = None, time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:  # wait for "Jupyter Server ... is running at"
                line = server.stderr.readline() if server.stderr else ""
                if not line and server.poll() is not None:
                    break
                if "is running at" in line or "http://" in line:
                    time.sleep(2.0)  # settled
                    usage = group.anon()
                    break
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
            group.remove()
    return usage


def parse_limit(text: str) -> int:
    """'2GiB', '1GiB', '1536MiB' -> bytes."""
    units = {"GiB": GiB, "MiB": MiB}
    for unit, size in units.items():
        if text.endswith(unit):
            try:
                value = float(text[: -len(unit)])
            except ValueError:
                break
            if value > 0:
                return int(value * size)
    raise argparse.ArgumentTypeError(
        f"--limit takes a size in GiB or MiB such as 2GiB, 1GiB or 1536MiB; got {text!r}"
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["--run-one"]:
        run_notebook(argv[1], argv[2], int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook, in order")
    parser.add_argument(
        "--limit",
        action="append",
        type=parse_limit,
        help="memory limit of the cgroup, e.g. 2GiB (default) or 1GiB; repeat for several",
    )
    parser.add_argument(
        "--timeout", type=int, default=600, help="seconds a notebook may run (default 600)"
    )
    parser.add_argument(
        "--no-server", action="store_true", help="skip measuring the Jupyter server's idle share"
    )
    args = parser.parse_args(argv)
    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(143)
    )  # a SIGTERM still removes the cgroup (finally)
    if os.geteuid() != 0:
        print(
            "bench_binder: creating a memory cgroup needs root; this is uid "
            f"{os.geteuid()} (run it with sudo)"
        )
        return 2
    if not cgroup_dirs():
        print(
            "bench_binder: this machine has no memory cgroup (neither v1 memory "
            "nor v2) to run inside"
        )
        return 2
    limits = args.limit or [2 * GiB]
    paths = args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    version = cgroup_dirs()[0][1]
    print(
        f"memory cgroup v{version}; peak = the cgroup's charge at its highest "
        "(memory.max_usage_in_bytes / memory.peak, page cache included); anon = anonymous + "
        "shared memory, sampled every 100 ms"
    )
    if not args.no_server:
        share = server_idle_share()
        print(
            "Jupyter server, idle, no kernel: "
            + (
                f"{share / MiB:.0f} MiB (anon); on Binder it sits in the same "
                "container, here the notebook's runner (an nbclient process) stands in for it"
                if share is not None
                else "could not be measured"
            )
        )
    print(f"{'notebook':36} {'limit':>6} {'peak MiB':>9} {'anon MiB':>9} {'spare':>6}  result")
    for path in paths:
        for limit in limits:
            r = measure(path, limit, args.timeout)
            spare = f"{100 * (1 - r['peak'] / limit):.0f} %"
            if r["completed"]:
                result = "completed"
            else:
                result = f"FAILED at cell {r['cell']}" if r["cell"] is not None else "FAILED"
                result += f" ({r['error']})" if r["error"] else ""
            if r["oom_kills"]:
                result += f"; {r['oom_kills']} process(es) killed for memory"
            if r["left"]:
                result += f"; {r['left']} process(es) outlived the kernel by 5 s"
            print(
                f"{path.name:36} {limit / GiB:>4.1f}Gi {r['peak'] / MiB:>9.0f} "
                f"{r['anon_peak'] / MiB:>9.0f} "
                f"{spare:>6}  {result}" + (f" in {r['seconds']} s" if r["completed"] else ""),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
