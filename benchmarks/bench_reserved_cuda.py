"""On a GPU: what CUDA's caching allocator really reserves, beside the replay's estimate (issue 39,
items 4 and 8). The one measurement ``placement_edu.reserved`` cannot make on a CPU: the
fragmentation margin of a real step's trace, measured reserved / estimated reserved.

Run (one command, on a machine with a CUDA device): ``python benchmarks/bench_reserved_cuda.py``.

For each case (one device, fp32: ``fit --verify --device cuda``'s step, ``cuda_peak.measure_cuda``:
a warm-up step that makes Adam's state, then a measured one) and each allocator setting
(``PYTORCH_CUDA_ALLOC_CONF`` unset, PyTorch's default, and ``expandable_segments:True``,
torchtitan's launch), a fresh Python measures ``max_memory_allocated`` and
``max_memory_reserved`` (the setting is read when CUDA starts, so each runs in its own process).
Printed beside them: the allocated peak ``derive`` predicts and the reserved peak the replay
estimates (``reserved.estimate``, the same setting), and their ratio, the margin. Bytes; GiB =
2^30 B. Without a CUDA device it says so and exits 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from placement_edu.peak import derive  # noqa: E402
from placement_edu.reserved import estimate  # noqa: E402
from placement_edu.units import GiB  # noqa: E402

#: (model, micro-batch, sequence, attention): shipped profiles' shapes that fit one GPU in fp32
#: (Llama-3.2-1B: 1,235,814,400 parameters x 16 B of states = 19.8 GB, and its activations).
CASES = (("gpt2", 1, 1024, "sdpa"), ("llama-1b", 1, 2048, "sdpa"))
SETTINGS = {"default": "", "expandable": "expandable_segments:True"}

MEASURE = """
import json, sys
from placement_edu.runtime.measurement.cuda_peak import measure_cuda
from placement_edu.step_case import StepCase
model, b, s, attention = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print(json.dumps(measure_cuda(StepCase.of(model, b, s, "fp32", attention))))
"""


def measure(case: tuple, conf: str) -> dict:
    """One case measured on cuda:0 in a fresh Python with ``PYTORCH_CUDA_ALLOC_CONF=conf``."""
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf}
    argv = [sys.executable, "-c", MEASURE, *map(str, case)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(f"{case[0]}: the CUDA step failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here: this measures CUDA's allocator (run it where a GPU is lent)")
        return 2
    from placement_edu.runtime.measurement.profiles import StepCase, get_profile

    print(
        f"{'case':24} {'allocator':11} {'allocated: measured':>20} {'derive':>10} "
        f"{'reserved: measured':>19} {'estimate':>10} {'margin':>7}"
    )
    for case in CASES:
        model, b, s, attention = case
        profile, _ = get_profile(StepCase.of(model, b, s, "fp32", attention))
        peak = derive(model, profile, 1, 0, "fp32").peak.total
        for setting, conf in SETTINGS.items():
            gpu = measure(case, conf)
            allocated = max(gpu["forward_backward_peak"], gpu["step_peak"])
            est = estimate(model, profile, 1, 0, "fp32", expandable=bool(conf)).reserved
            print(
                f"{model + f' b={b} s={s}':24} {setting:11} {allocated / GiB:>16.3f} GiB "
                f"{peak / GiB:>6.3f} GiB {gpu['reserved_peak'] / GiB:>15.3f} GiB "
                f"{est / GiB:>6.3f} GiB {gpu['reserved_peak'] / est:>7.3f}"
            )
    print(f"device: {torch.cuda.get_device_name(0)}; margin = measured reserved / estimate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
