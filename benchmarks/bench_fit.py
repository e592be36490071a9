"""How long ``placement-edu fit --model llama-8b --strategy fsdp2 --devices 1024 --json`` takes
(target: under 2 s) as installed (the profile of this shape ships with the package: no torch is
imported), and with the profile measured now (``PLACEMENT_EDU_NO_CACHE=1``: torch and its trackers
imported, a two-block copy run under FakeTensorMode -- what any other shape costs once before the
cache holds it), and how long ``--verify`` takes at N = 1024 (PyTorch's FSDPMemTracker on a fake
group of 1024 ranks, the whole 8B model under FakeTensorMode). Each is a fresh ``placement-edu``
process, as a user runs it. Run: ``.venv/bin/python benchmarks/bench_fit.py [--no-verify]``."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

ARGV = ["fit", "--model", "llama-8b", "--strategy", "fsdp2", "--devices", "1024", "--json"]
REPEATS = 3


def _run(argv: list[str], env: dict[str, str]) -> float:
    code = "import sys\nfrom placement_edu.cli import main\nsys.exit(main(sys.argv[1:]))"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return seconds


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}  # an empty user cache
        shipped = [_run(ARGV, env) for _ in range(REPEATS)]
        measured = [_run(ARGV, {**env, "PLACEMENT_EDU_NO_CACHE": "1"}) for _ in range(REPEATS)]
        print(f"{' '.join(ARGV)}")
        print(
            "  as installed (shipped profile, no torch): "
            f"median {statistics.median(shipped):.2f} s "
            f"(min {min(shipped):.2f}, max {max(shipped):.2f}); target < 2 s"
        )
        print(
            "  profile measured now (torch imported):    "
            f"median {statistics.median(measured):.2f} s "
            f"(min {min(measured):.2f}, max {max(measured):.2f})"
        )
        if "--no-verify" not in sys.argv:
            verify = _run([*ARGV, "--verify"], env)
            print(f"  --verify (FSDPMemTracker, fake group of 1024): {verify:.1f} s")


if __name__ == "__main__":
    main()
