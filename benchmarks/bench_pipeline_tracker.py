"""Issue 39, item 1 (b): a pipeline rank's step, predicted from the one profile
(``peak_axes.derive_pipeline``) beside PyTorch's ``MemTracker`` on its stages in
``torch.distributed.pipelining`` on a fake group (``axis_tracker.pipeline_measure``): the first
and last ranks of 2 and 4 stages under 1F1B and interleaved for GPT-2 and the Llama-3.2-1B widths
(every rank of 4 stages), GPipe and zero bubble, and Llama-3-8B's widths with SDPA -- a superset of
the cases ``tests/test_peak_axes.py`` pins -- one row each, the peaks in bytes. Exits 1 if a state
differs or a peak is off by more than 2 %. About a minute on 2 cores.
Run: ``.venv/bin/python benchmarks/bench_pipeline_tracker.py``."""

from __future__ import annotations

import sys

from placement_edu.architectures import REFERENCE_SEQ, get_architecture
from placement_edu.peak_axes import PipelineRank, derive_pipeline
from placement_edu.runtime.axes.axis_tracker import measure_here, pipeline_measure
from placement_edu.runtime.measurement.peak_tracker import states
from placement_edu.runtime.measurement.profiles import get_profile
from placement_edu.step_case import StepCase
from tracker_row import compared

#: (model, blocks (None: all), attention, stages, rank, schedule, virtual stages)
CASES = (
    *[
        ("gpt2", None, "eager", p, rank, schedule, v)
        for p in (2, 4)
        for rank in (0, p - 1)
        for schedule, v in (("1f1b", 1), ("interleaved", 2))
    ],
    *[("llama-1b", 4, "eager", 4, rank, "1f1b", 1) for rank in range(4)],
    *[
        ("llama-1b", 4, "eager", 2, rank, s, v)
        for rank in (0, 1)
        for s, v in (("1f1b", 1), ("interleaved", 2))
    ],
    *[("llama-1b", 8, "eager", 4, rank, "interleaved", 2) for rank in (0, 3)],
    ("llama-1b", 4, "eager", 2, 0, "gpipe", 1),
    ("llama-1b", 4, "eager", 2, 0, "zero_bubble", 1),
    ("llama-1b", 4, "eager", 4, 0, "zero_bubble", 1),
    ("llama-8b", 4, "sdpa", 2, 0, "1f1b", 1),
    ("llama-8b", 4, "sdpa", 2, 1, "interleaved", 2),
)


def main() -> int:
    print(
        "| model (blocks, s, attention) | p | rank | schedule | states | fwd/bwd peak predicted "
        "| tracker | ratio | step peak ratio |"
    )
    failed = 0
    for model, blocks, attention, p, rank, schedule, v in CASES:
        arch = get_architecture(model)
        arch = arch.with_(layers=blocks) if blocks else arch
        seq = REFERENCE_SEQ[model]
        case = StepCase(arch, 1, seq, "fp32", attention)
        profile, _ = get_profile(case)
        where = PipelineRank(p, rank, schedule, v)
        ours = derive_pipeline(arch, profile, where)
        raw = measure_here(case, pipeline_measure, pipeline=where)
        theirs = states(raw, False)
        ok, cells = compared(ours, theirs)
        failed += not ok
        name = schedule + (f":{v}" if v > 1 else "")
        print(
            f"| {model} ({arch.layers}, {seq}, {attention}) | {p} | {rank} | {name} {cells}",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
