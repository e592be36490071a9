"""Wall time of one ``placement-edu torch-ref fsdp2 --world-size 4`` call (issue 9): a cold command,
start to finish, as a user runs it -- most of it is starting 4 ranks that import torch.

    python benchmarks/bench_torch_ref.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    command = [
        sys.executable,
        "-m",
        "placement_edu.cli",
        "torch-ref",
        "fsdp2",
        "--world-size",
        "4",
        "--json",
    ]
    walls, inside = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - start)
        import json

        inside.append(json.loads(out.stdout)["wall_s"])
    print(f"placement-edu torch-ref fsdp2 --world-size 4, {args.repeats} runs on {sys.platform}:")
    print(
        f"  command wall time: median {statistics.median(walls):.2f} s (min {min(walls):.2f}, "
        f"max {max(walls):.2f})"
    )
    print(
        "  inside the ranks (model, reference, 3 steps, measurement): median "
        f"{statistics.median(inside):.3f} s"
    )


if __name__ == "__main__":
    main()
