"""Issue 39, item 1 (combined meshes): one rank's step on a data axis with more to it, predicted
from the one profile (``peak_axes.derive_on_mesh``, ``peak.accumulated``) beside
``FSDPMemTracker`` on a fake group (``runtime/axes/mesh_tracker.py``): TP then FSDP2 on
data=2,tensor=2 and data=4,tensor=2 (ranks 0 and the last, fp32 and FSDP2's bf16, with and
without sequence parallelism), and m = 2, 4 accumulated micro-batches under FSDP2 on 4 ranks --
the cases ``tests/test_mesh_tracker.py`` pins and their neighbours -- on GPT-2's shape at small
widths (4 blocks of 256, 8 heads, s = 256) and Llama-3.2-1B's. One row each, bytes. Exits 1 if a
state differs or a peak is off by more than 2 %. About a minute on 2 cores.
Run: ``.venv/bin/python benchmarks/bench_mesh_tracker.py``."""

from __future__ import annotations

import sys

from placement_edu.architectures import get_architecture
from placement_edu.mesh import Mesh
from placement_edu.peak import PRECISIONS, accumulated
from placement_edu.peak_axes import derive_on_mesh
from placement_edu.runtime.axes.axis_tracker import measure_here
from placement_edu.runtime.axes.mesh_tracker import measure
from placement_edu.runtime.measurement.peak_tracker import states
from placement_edu.runtime.measurement.profiles import get_profile
from placement_edu.step_case import StepCase
from tracker_row import compared

SMALL = {
    "gpt2": get_architecture("gpt2").with_(layers=4, hidden=256, heads=8, kv_heads=8, ffn=1024),
    "llama-1b": get_architecture("llama-1b").with_(
        layers=4, hidden=256, heads=8, kv_heads=4, ffn=704
    ),
}
SEQ = 256
#: (model, data, tensor, rank, precision, sequence parallel, micro-batches)
CASES = (
    *[
        ("gpt2", d, 2, rank, precision, sp, 1)
        for d in (2, 4)
        for rank in (0, 2 * d - 1)
        for precision, sp in (("fp32", False), ("fsdp2_bf16", True))
    ],
    ("llama-1b", 2, 2, 0, "fp32", False, 1),
    ("llama-1b", 4, 2, 7, "fsdp2_bf16", True, 1),
    *[
        ("gpt2", 4, 1, rank, p, False, m)
        for m in (2, 4)
        for rank, p in ((0, "fp32"), (3, "fsdp2_bf16"))
    ],
    ("llama-1b", 4, 1, 3, "fsdp2_bf16", False, 4),
)


def main() -> int:
    print(
        "| model | mesh | rank | precision | SP | m | states | fwd/bwd peak predicted | tracker "
        "| ratio | step peak ratio |"
    )
    failed = 0
    for model, d, t, rank, precision, sp, m in CASES:
        arch = SMALL[model]
        case = StepCase(arch, 1, SEQ, PRECISIONS[precision].compute_name)
        profile, _ = get_profile(case)
        mesh = Mesh.of(data=d, tensor=t)
        step = derive_on_mesh(arch, profile, mesh, rank, precision, sequence_parallel=sp)
        ours = accumulated(step, m)
        axes = dict(data=d, tensor=t, rank=rank, precision=precision)
        raw = measure_here(case, measure, **axes, sequence_parallel=sp, micro_batches=m)
        theirs = states(raw, True)
        ok, cells = compared(ours, theirs)
        failed += not ok
        print(
            f"| {model} | {mesh} | {rank} | {precision} | {'yes' if sp else 'no'} | {m} {cells}",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
