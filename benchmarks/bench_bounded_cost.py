"""Time and peak memory of issue 24's commands as the input grows: ``check pp`` on a pipeline of
P stages, ``table`` of zero3 on a transformer of L layers (every width 1, so only L is large) and
``plan`` of the same model, at 1, 10^3, 10^6 and 2^40 (and ``table`` of 2^40 layers on 2^40
devices). Cost should depend on the description, not the size: milliseconds and a flat peak.

Run: ``.venv/bin/python benchmarks/bench_bounded_cost.py`` (``--root DIR`` measures the package
in another tree, e.g. an older commit unpacked with ``git archive``; ``--timeout S`` ends a
command that runs longer, 20 s by default).

Each command runs in a fresh interpreter, so its peak is its own: VmHWM, the process's resident
high-water mark, interpreter and imports included (about 18 MB before any work). Time is the
command's own, imports excluded.

Measured on this container (2 cores), before (commit ca5dbc0) and after issue 24's item 1:

=========================================  =============================  ==================
command                                    before                         after
=========================================  =============================  ==================
check pp --mesh pipeline=10^3              163 ms                         15 ms, 19 MB
check pp --mesh pipeline=10^6 / 2^40       > 20 s (ended)                 15 / 11 ms, 19 MB
table --layers 10^3 (zero3)                143 ms                         15 ms, 19 MB
table --layers 10^6 (zero3)                > 20 s (ended; 91 s in issue)  15 ms, 19 MB
table --layers 2^40 (zero3, 8 or 2^40)     MemoryError traceback          15-16 ms, 19 MB
plan --layers 10^6                         > 20 s (ended)                 43 ms, 19 MB
plan --layers 2^40                         MemoryError traceback          26 ms, 19 MB
=========================================  =============================  ==================
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

SIZES = {"1": 1, "10^3": 10**3, "10^6": 10**6, "2^40": 2**40}
WIDTHS = ["--hidden", "1", "--heads", "1", "--seq", "1", "--vocab", "1"]

#: Runs one command in a fresh interpreter; prints its exit code, seconds and peak bytes.
MEASURE = """
import contextlib, io, re, sys, time
from placement_edu.cli import main
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
    try:
        code = main(sys.argv[1:])
    except MemoryError:
        code = "MemoryError"
seconds = time.perf_counter() - start
peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read())[1]) * 1024
line = (err.getvalue().strip().splitlines() or [""])[-1][:60]
print(code, seconds, peak, line, sep="\\t")
"""


def commands() -> list[tuple[str, list[str]]]:
    out = []
    for label, n in SIZES.items():
        # a pipeline needs one layer per stage at least: the checker's model has max(8, P)
        out.append(
            (f"check pp --mesh pipeline={label}", ["check", "pp", "--mesh", f"pipeline={n}"])
        )
    for label, n in SIZES.items():
        out.append(
            (
                f"table --layers {label} (zero3, 8 devices)",
                ["table", "--layers", str(n), *WIDTHS, "--devices", "8", "--strategies", "zero3"],
            )
        )
    big = str(2**40)
    out.append(
        (
            "table --layers 2^40 --devices 2^40 (zero3)",
            ["table", "--layers", big, *WIDTHS, "--devices", big, "--strategies", "zero3"],
        )
    )
    for label, n in SIZES.items():
        if n >= 8:  # plan tries pipelines of up to 8 stages
            out.append(
                (
                    f"plan --layers {label} (8 devices)",
                    ["plan", "--layers", str(n), *WIDTHS, "--devices", "8"],
                )
            )
    return out


def measure(root: Path, argv: list[str], timeout: float) -> str:
    env = {**os.environ, "PYTHONPATH": str(root)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=root,
        )
    except subprocess.TimeoutExpired:
        return (
            f"{'-':>11}  {'> ' + format(timeout, 'g') + ' s':>10}  {'-':>9}  (ended: still running)"
        )
    fields = done.stdout.strip().split("\t")
    if len(fields) < 3:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1][:60]
        return f"{done.returncode:>11}  {'-':>10}  {'-':>9}  {tail}"
    code, seconds, peak = fields[0], float(fields[1]), int(fields[2])
    note = fields[3] if len(fields) > 3 else ""
    return f"{code:>11}  {seconds * 1000:>8.1f} ms  {peak / 10**6:>6.1f} MB  {note}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args()
    print(f"package at {args.root}; peak = VmHWM of a fresh interpreter (about 18 MB idle)")
    print(f"{'command':<46}  {'exit':>11}  {'time':>11}  {'peak':>9}  last line of stderr")
    for label, argv in commands():
        print(f"{label:<46}  {measure(args.root, argv, args.timeout)}", flush=True)


if __name__ == "__main__":
    main()
