"""How long ``placement-edu fit --model llama-8b --strategy fsdp2 --devices 1024 --json`` takes
(target: under 2 s), cold (the activation profile measured now: torch and its trackers imported, a
two-block copy run under FakeTensorMode) and warm (the profile read from the cache: no torch), and how
long ``--verify`` takes at N = 1024 (PyTorch's FSDPMemTracker on a fake group of 1024 ranks, the
whole 8B model under FakeTensorMode). Each is a fresh ``placement-edu`` process, as a user runs it.
Run: ``.venv/bin/python benchmarks/bench_fit.py [--no-verify]``."""

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
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return seconds


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        cold = [_run(ARGV, {**env, "PLACEMENT_EDU_NO_CACHE": "1"}) for _ in range(REPEATS)]
        _run(ARGV, env)                                    # fills the cache
        warm = [_run(ARGV, env) for _ in range(REPEATS)]
        print(f"{' '.join(ARGV)}")
        print(f"  cold (profile measured): median {statistics.median(cold):.2f} s "
              f"(min {min(cold):.2f}, max {max(cold):.2f}); target < 2 s")
        print(f"  warm (profile cached):   median {statistics.median(warm):.2f} s "
              f"(min {min(warm):.2f}, max {max(warm):.2f}); target < 2 s")
        if "--no-verify" not in sys.argv:
            verify = _run([*ARGV, "--verify"], env)
            print(f"  --verify (FSDPMemTracker, fake group of 1024): {verify:.1f} s")


if __name__ == "__main__":
    main()
