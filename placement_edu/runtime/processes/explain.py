"""What ended a run, in words: the one line of an interrupted run (``interrupted``: the signal, the
ranks stopped, where the run was), and a failed run's report, root cause first (``explain``: the
rank that failed or was killed or hung first, then the others). Read from the files the ranks left
in the run's folder (``rundir``) and from torch's ``ChildFailedError``."""

from __future__ import annotations

import os
import re
import signal
from typing import TYPE_CHECKING

from placement_edu.runtime.processes import progress as progress_file

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError


def interrupted(signum: int, run_dir: str, world_size: int) -> str:
    """One line: which signal, how many ranks were stopped, and where the run was."""
    now = progress_file.read(os.path.join(run_dir, "progress"), 0.0, world_size)
    return f"interrupted by {signal.Signals(signum).name}: stopped {world_size} ranks {now.where}"


#: What a rank's error says when it lost a peer rather than failing itself.
LOST_PEER = (
    "lost its peer",
    "Connection closed by peer",
    "Connection reset by peer",
    "did not complete within",
    "wait timeout after",  # (torch's store, while the ranks meet: a peer never came)
)
#: What a rank's error says when a peer it waited for never came: that peer hung.
TIMED_OUT = ("did not complete within", "wait timeout after")


#: torch's store, timing out while the ranks meet, names the keys it waited for; each ends with
#: the rank that never wrote it (gloo's "/default_pg/0//cpu//0/2": rank 2 never came).
WAITED_FOR = re.compile(r"wait timeout after \d+ms, keys: (.+)")


def _waited_for(traces: list[str]) -> set[int]:
    """The ranks whose keys the reports' store timeouts name: the ranks the others waited for."""
    keys = [
        key for trace in traces for line in WAITED_FOR.findall(trace) for key in line.split(", ")
    ]
    return {int(tail) for key in keys if (tail := key.strip().rsplit("/", 1)[-1]).isdigit()}


def _beacon(run_dir: str, rank: int) -> tuple[str, float]:
    """("in" if ``rank`` was last waiting in a collective, else "out"; when it last wrote):
    ``Comm``'s beacon. ("", 0) for a rank that never reached a collective."""
    path = os.path.join(run_dir, f"at-{rank}")
    try:
        with open(path) as f:
            return f.read().strip(), os.stat(path).st_mtime
    except OSError:
        return "", 0.0


def _stopped_first(run_dir: str, silent: list[int]) -> list[int]:
    """Of the ranks that wrote no error, the ones that stopped first. A rank the launcher stopped
    while it still ran leaves a ``stopped-R`` file (its SIGTERM handler); one killed or frozen
    cannot. A rank waiting in a collective only lost the others. Failing that, the rank whose
    beacon went quiet first (a rank hung outside any collective)."""
    beacons = {r: _beacon(run_dir, r) for r in silent}
    outside = [r for r in silent if beacons[r][0] != "in"]
    dead = [r for r in outside if not os.path.exists(os.path.join(run_dir, f"stopped-{r}"))]
    if dead or not outside:
        return dead or silent
    quiet = min(beacons[r][1] for r in outside)
    return [r for r in outside if beacons[r][1] == quiet]


def explain(run_dir: str, error: ChildFailedError, world_size: int, timeout_s: float) -> str:
    """Who failed first and how, then every other failed rank. A rank killed by a signal, or
    frozen, writes no traceback: it is named first (from the exit status torch reports, or as the
    rank the others lost), before the ranks whose collectives failed because of it. It hung if a
    report says a collective timed out, or if the first rank to report had waited a whole
    ``timeout_s`` in its collective (its beacon's time): the rank that timed out may have been
    stopped before its own report was written, its peers seeing only a closed connection."""
    reports = []
    for name in os.listdir(run_dir):
        if name.startswith("error-"):
            with open(os.path.join(run_dir, name)) as f:
                when, _, trace = f.read().partition("\n")
            try:
                reports.append((float(when), int(name[6:]), trace.rstrip()))
            except ValueError:  # not a rank's report: skip it
                continue
    reports.sort()
    wrote = {rank for _, rank, _ in reports}
    reaped = {r for r in range(world_size) if os.path.exists(os.path.join(run_dir, f"reaped-{r}"))}
    killed = [
        rank
        for rank, f in sorted(error.failures.items())
        if rank not in wrote | reaped and f.exitcode is not None and f.exitcode < 0
    ]
    lines = [
        f"rank {rank} stopped first: it was killed by {error.failures[rank].signal_name()} "
        "(it wrote no error)"
        for rank in killed
    ]
    lost = bool(reports) and all(any(s in trace for s in LOST_PEER) for _, _, trace in reports)
    if not lines and lost:  # the first rank to stop wrote nothing
        quiet = [r for r in range(world_size) if r not in wrote]
        waited = sorted(_waited_for([trace for _, _, trace in reports]) & set(quiet))
        silent = waited or _stopped_first(run_dir, quiet)
        if silent:  # a collective timed out: it hung; else it died
            state, entered = _beacon(run_dir, reports[0][1])  # the first to report
            hung = any(any(s in trace for s in TIMED_OUT) for _, _, trace in reports) or (
                state == "in" and reports[0][0] - entered >= 0.9 * timeout_s
            )
            how = (
                "hung (the others timed out waiting for it)"
                if hung
                else "died without an error, killed (the others lost their connection to it)"
            )
            lines.append(f"rank {', '.join(map(str, silent))} stopped first: it {how}")
    if not reports and not lines:  # failed before reaching the worker's code
        return "\n".join(
            f"rank {rank} failed (exit code {f.exitcode}): {f.message}"
            for rank, f in error.failures.items()
            if f.exitcode >= 0
        ) or str(error)
    if not reports:  # the launcher ended the others before they noticed
        rest = [str(r) for r in range(world_size) if r not in killed]
        if rest:
            lines.append(
                f"then rank {', '.join(rest)} stopped: the launcher ended "
                f"{'it' if len(rest) == 1 else 'them'} (no error of their own)"
            )
        return "\n".join(lines)
    lines += [
        f"then rank {reports[0][1]} failed:"
        if lines
        else f"rank {reports[0][1]} failed first (the root cause):",
        reports[0][2],
    ]
    for _, rank, trace in reports[1:]:
        lines += [f"then rank {rank} failed:", trace.splitlines()[-1]]
    return "\n".join(lines)


def killed_by_sigint(error: ChildFailedError) -> bool:
    """Whether a rank died of SIGINT: a Ctrl-C to the terminal's process group reaches the ranks
    and this process at once, and on a loaded machine torch's monitor can see the ranks gone
    before this process's handler has run (CI, once: "run failed", exit 1). It is still Ctrl-C."""
    return any(failure.exitcode == -signal.SIGINT for failure in error.failures.values())
