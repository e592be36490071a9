"""``placement-edu fit --verify``: PyTorch's own measurement of the step ``fit`` derived, for the
rank it was asked about -- ``FSDPMemTracker`` or ``MemTracker`` on a fake process group (one
process, no GPU), or CUDA's allocator with ``--device cuda`` -- under the keys ``fit``'s text and
JSON print beside the prediction (``fit_text.measured``). torch is imported only here, inside each
run.
"""

from __future__ import annotations

import argparse

from placement_edu.cli.fit_text import measured
from placement_edu.errors import expect
from placement_edu.mesh import Mesh
from placement_edu.peak import PRECISIONS, RESHARD_AFTER_FORWARD, fsdp2_applies
from placement_edu.peak_pipeline import PipelineRank
from placement_edu.step_case import StepCase


def tracked(args: argparse.Namespace, seq: int) -> dict:
    """What PyTorch measures of the step ``fit`` was asked (``--verify``), under the keys
    ``fit_text.measured`` gives: CUDA's allocator with ``--device cuda``; else the tracker run of
    the placement on a fake group -- FSDP2 beside a tensor axis or over accumulated micro-batches
    (``_verify_mesh``), a tensor axis (``_verify_tensor``), a pipeline (``_verify_pipeline``), or
    FSDP2 on the data axis (``peak_tracker``)."""
    if args.device == "cuda":
        from placement_edu.runtime.measurement.cuda_peak import measure_cuda

        gpu = measure_cuda(StepCase.of(**step_keys(args, seq)))
        return {
            **measured(gpu, {}),
            **{key: gpu[key] for key in ("reserved_peak", "device", "seconds")},
        }
    if _data_axis_and_more(args):
        return _verify_mesh(args, seq)
    if args.mesh is not None and args.mesh.degree("tensor") > 1:
        return _verify_tensor(args, seq)
    if args.mesh is not None and args.mesh.degree("pipeline") > 1:
        return _verify_pipeline(args, seq)
    from placement_edu.runtime.measurement.peak_tracker import measure_in_subprocess

    raw = measure_in_subprocess(
        devices=args.devices,
        rank=args.rank,
        precision=args.precision,
        reshard_after_forward=RESHARD_AFTER_FORWARD[args.strategy],
        **step_keys(args, seq),
    )
    return _tracked(raw, fsdp2_applies(args.devices, args.precision))


def _verify_pipeline(args: argparse.Namespace, seq: int) -> dict:
    """PyTorch's ``MemTracker`` on pipeline rank ``--rank``: its stages in
    ``torch.distributed.pipelining`` on a fake group, run by its schedule
    (``axis_tracker.pipeline_measure``), under the keys ``fit_text.measured`` gives."""
    from placement_edu.runtime.axes.axis_tracker import measure_here, pipeline_measure

    raw = measure_here(
        StepCase.of(**step_keys(args, seq)),
        measuring=pipeline_measure,
        pipeline=PipelineRank(
            args.mesh.degree("pipeline"),
            args.rank,
            args.pipeline_schedule,
            args.virtual_stages,
            args.micro_batches,
        ),
    )
    return _tracked(raw, fsdp=False)


def _data_axis_and_more(args: argparse.Namespace) -> bool:
    """Whether the step is FSDP2 on a data axis with a tensor axis beside it, or has micro-batches
    accumulated: what ``runtime/axes/mesh_tracker.py`` runs (``_verify_mesh``)."""
    mesh = args.mesh or Mesh.of(data=args.devices)
    if mesh.degree("pipeline") > 1:
        return False  # (a pipeline's micro-batches are its schedule's)
    return args.micro_batches > 1 or mesh.degree("data") > 1 and mesh.degree("tensor") > 1


def _verify_mesh(args: argparse.Namespace, seq: int) -> dict:
    """``FSDPMemTracker`` on rank ``--rank`` of a data × tensor mesh on a fake group, tensor
    parallelism applied before FSDP2 as torchtitan composes them, over ``--micro-batches``
    micro-batches (``runtime/axes/mesh_tracker.py``), under the keys ``fit_text.measured`` gives;
    refused in one line without a data axis."""
    mesh = args.mesh or Mesh.of(data=args.devices)
    expect(
        mesh.degree("data") > 1,
        "--verify tracks accumulated micro-batches under FSDP2 on a data axis of 2 or more: give "
        f"--devices N or --mesh data=D,tensor=T, got {mesh}",
    )
    from placement_edu.runtime.axes.axis_tracker import measure_here
    from placement_edu.runtime.axes.mesh_tracker import measure

    case = StepCase.of(**step_keys(args, seq), compute=PRECISIONS[args.precision].compute_name)
    raw = measure_here(
        case,
        measure,
        data=mesh.degree("data"),
        tensor=mesh.degree("tensor"),
        rank=args.rank,
        precision=args.precision,
        sequence_parallel=args.sequence_parallel,
        micro_batches=args.micro_batches or 1,
        reshard_after_forward=RESHARD_AFTER_FORWARD[args.strategy],
    )
    return _tracked(raw, fsdp=True)


def step_keys(args: argparse.Namespace, seq: int) -> dict:
    """What a tracker run measures, as fit was asked it: the model and its step (fp32: a
    ``StepCase``'s fields but the dtype, which ``peak_tracker.measure`` reads from the
    precision)."""
    keys = ("micro_batch", "attention", "recompute", "optimizer")
    return {"model": args.arch, "seq": seq, **{key: getattr(args, key) for key in keys}}


def _tracked(raw: dict, fsdp: bool) -> dict:
    """A tracker run's figures under fit's keys (``fit_text.measured``), with its seconds."""
    from placement_edu.runtime.measurement.peak_tracker import states

    return {**measured(states(raw, fsdp), raw["forward_backward_peak"]), "seconds": raw["seconds"]}


def _verify_tensor(args: argparse.Namespace, seq: int) -> dict:
    """PyTorch's ``MemTracker`` on tensor rank 0 of a fake group (``runtime/axes/axis_tracker.py``),
    under the keys ``fit_text.measured`` gives."""
    expect(
        args.precision == "fp32" and args.rank == 0,
        "--verify on a tensor axis tracks tensor rank 0 in fp32 (every tensor rank holds the "
        f"same): give --precision fp32 --rank 0, got --precision {args.precision} --rank "
        f"{args.rank}",
    )
    from placement_edu.runtime.axes.axis_tracker import measure_here

    raw = measure_here(
        StepCase.of(**step_keys(args, seq)),
        tensor=args.mesh.degree("tensor"),
        sequence_parallel=args.sequence_parallel,
    )
    return _tracked(raw, fsdp=False)
