"""Execution time of every notebook of the course, as nbval runs them in CI (a fresh kernel each,
top to bottom); the target is the whole course under 6 minutes on 2 cores.

    python benchmarks/bench_notebooks.py [notebooks/03_sharded.ipynb ...]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(NOTEBOOKS.glob("*.ipynb"))
    total = 0.0
    for path in paths:
        start = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter",
                "nbconvert",
                "--to",
                "notebook",
                "--execute",
                "--stdout",
                "--ExecutePreprocessor.timeout=600",
                str(path),
            ],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
        total += seconds
        print(
            f"{path.name:45s} {seconds:6.1f} s" + ("" if done.returncode == 0 else "  FAILED"),
            flush=True,
        )
    print(f"{'all ' + str(len(paths)) + ' notebooks':45s} {total:6.1f} s  (target: under 360 s)")


if __name__ == "__main__":
    main()
