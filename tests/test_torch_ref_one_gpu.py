"""Issue 23 (item 4): on a machine with CUDA and fewer GPUs than ranks -- any learner's workstation
with one GPU, since PyPI serves torch's CUDA build on Linux -- the ranks run on gloo (NCCL refuses
two ranks on one GPU), and every device mesh the runtime builds must follow the backend: FSDP2's and
DTensor's meshes on CPU. Before, ``fully_shard`` built a CUDA mesh and every rank crashed with "CUDA
error: invalid device ordinal".

The machine is faked: a ``sitecustomize`` on PYTHONPATH tells every process of the run (the command,
its rank server, the ranks) that CUDA is there with one device; nothing CUDA can actually run, so a
CUDA mesh fails at once (``torch._C._cuda_setDevice`` is missing from the CPU build).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.runtime

ONE_GPU = """\
import torch

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
"""


@pytest.mark.parametrize("impl", ["fsdp2", "dtensor_tp"])
def test_a_one_gpu_cuda_machine_runs_torch_ref_on_cpu_meshes(tmp_path, impl):
    (tmp_path / "sitecustomize.py").write_text(ONE_GPU)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "placement_edu.cli",
            "torch-ref",
            impl,
            "--world-size",
            "2",
            "--json",
        ],
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        ),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["equivalent"] and result["ops_match"] and result["bytes_match"], result
