"""The time ``placement-edu course --site OUT`` takes to build the course's website (Sphinx,
myst-nb, the saved notebooks, no execution) and ``placement-edu course --slides OUT`` its 17
reveal.js decks, each repeat into a fresh folder; the target is under a minute each on 2 cores
(both are built in CI, tests/test_site.py and tests/test_slides.py, and by a lecturer before a
course).

    python benchmarks/bench_site.py [REPEATS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from placement_edu.course import site, slides

TARGET_S = 60.0


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for name, build in (("site", site.build), ("slides", slides.build)):
        seconds = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                start = time.perf_counter()
                build(Path(folder) / "out")
                seconds.append(time.perf_counter() - start)
        print(
            f"{name} build: median {statistics.median(seconds):.1f} s, "
            f"min {min(seconds):.1f} s, max {max(seconds):.1f} s over {repeats} "
            f"(target < {TARGET_S:.0f} s)"
        )


if __name__ == "__main__":
    main()
