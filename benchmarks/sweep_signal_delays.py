"""Send SIGTERM to a command at many delays after its start, on a loaded machine, and count how
each ended (issue 43: a signal must never be lost).

    .venv/bin/python benchmarks/sweep_signal_delays.py                  # calibrate, 0.05-3 s
    .venv/bin/python benchmarks/sweep_signal_delays.py --busy 0 --step 0.1 -- run zero3
    .venv/bin/python benchmarks/sweep_signal_delays.py --fresh --first 0.08 --last 0.4 --step 0.01

Each delay runs the command once with an empty TMPDIR of its own, while ``--busy`` loops keep the
cores busy (as a full test suite on 2 cores does), and prints its exit status and its verdict:

- one line: exit 143, stderr the one line ``placement-edu: interrupted by SIGTERM: ...``, nothing on
  stdout, nothing left in TMPDIR;
- LOST: exit 0 (the command ran on as if no signal had come);
- default: killed by the signal's default action (-15: it came before the interpreter had
  imported ``placement_edu.cli.entry``, which takes the signals);
- other: anything else (a traceback, something left in TMPDIR), with stderr's last line.

``--fresh``: the package copied without its ``__pycache__`` and run with PYTHONDONTWRITEBYTECODE=1,
so that every run compiles its modules' sources, as a fresh install's first run does.

Issue 43, calibrate --world-sizes 2 --repeats 1 under two busy loops (2-core machine, 2026-12-07):
60 delays from 0.05 to 3 s, before the fix 55 one line, 2 LOST, 2 default, 1 other (a 60-line
RuntimeError traceback), after it 60 one line; ``--fresh`` 0.08 to 0.4 s by 0.01 three times over,
before 92 one line, 3 LOST, 4 default, after 95 one line, 4 default.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

DEFAULT = ["calibrate", "--world-sizes", "2", "--repeats", "1"]


def _one(argv: list[str], delay: float, fresh: str | None) -> tuple[str, str]:
    """(verdict, what it printed last) of the command ``argv`` sent SIGTERM ``delay`` s in (run
    from the copy ``fresh``, compiling its sources, if given)."""
    tmp = tempfile.mkdtemp(prefix="pe-sweep-")
    compiled = {"PYTHONDONTWRITEBYTECODE": "1"} if fresh else {}
    command = subprocess.Popen(
        [sys.executable, "-m", "placement_edu.cli", *argv],
        cwd=fresh,
        env=dict(os.environ, TMPDIR=tmp, **compiled),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(delay)
    os.kill(command.pid, signal.SIGTERM)
    try:
        out, err = command.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(command.pid, signal.SIGKILL)
        out, err = command.communicate()
        err += "\n(no end in 120 s)"
    time.sleep(0.3)  # (the command's processes end after it)
    left, lines = os.listdir(tmp), err.strip().splitlines()
    shutil.rmtree(tmp, ignore_errors=True)
    line = lines[-1] if lines else ""
    if command.returncode == 0:
        return "LOST", line
    if command.returncode == -signal.SIGTERM:
        return "default", line
    one = len(lines) == 1 and line.startswith("placement-edu: interrupted by SIGTERM: ")
    if command.returncode == 143 and one and not out and not left:
        return "one line", line
    return "other", f"exit {command.returncode}, {len(lines)} lines, left {left}: {line}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first", type=float, default=0.05, help="first delay, s (0.05)")
    parser.add_argument("--last", type=float, default=3.0, help="last delay, s (3)")
    parser.add_argument("--step", type=float, default=0.05, help="between delays, s (0.05)")
    parser.add_argument("--busy", type=int, default=2, help="busy loops meanwhile (2)")
    parser.add_argument("--fresh", action="store_true", help="compile the sources every run")
    parser.add_argument("argv", nargs="*", help=f"the command (default: {' '.join(DEFAULT)})")
    args = parser.parse_args()
    count = round((args.last - args.first) / args.step) + 1
    delays = [round(args.first + k * args.step, 3) for k in range(count)]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    verdicts: collections.Counter[str] = collections.Counter()
    fresh = tempfile.mkdtemp(prefix="pe-fresh-") if args.fresh else None
    if fresh:
        package = os.path.join(os.path.dirname(__file__), "..", "placement_edu")
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(package, os.path.join(fresh, "placement_edu"), ignore=ignore)
    try:
        for delay in delays:
            verdict, line = _one(args.argv or DEFAULT, delay, fresh)
            verdicts[verdict] += 1
            print(f"{delay:5.2f} s  {verdict:8}  {line}", flush=True)
    finally:
        for loop in busy:
            loop.kill()
        if fresh:
            shutil.rmtree(fresh)
    print(", ".join(f"{n} {verdict}" for verdict, n in verdicts.most_common()))


if __name__ == "__main__":
    main()
