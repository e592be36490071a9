"""``placement-edu fit --model M --strategy zero3 --devices N [...]``: will one rank's step fit?

The per-rank breakdown (params, grads, optimizer, activations, the transients at the peak), the peak
and the event of the step where it happens (SPEC §3, "The peak of a real model"). Activations come
from a profile measured from the reference module under ``FakeTensorMode`` (cached after the first
run: a cached answer imports no torch); the rest is derived (``placement_edu.peak``).

``--verify`` runs PyTorch's own tracker for that rank -- ``FSDPMemTracker`` on a fake process group
of N ranks (``MemTracker`` at N = 1 in fp32) -- and prints measured beside predicted, term by term.
``--verify --device cuda`` (N = 1, fp32) runs the step on this machine's GPU instead and reads
CUDA's allocator (``runtime/measurement/cuda_peak.py``).
"""

from __future__ import annotations

import argparse
import json

from placement_edu.architectures import PRESETS as MODELS, sequence_of
from placement_edu.arguments import command, flag_type, listed
from placement_edu.cli.fit_text import text
from placement_edu.cli.fit_verify import tracked
from placement_edu.cli.run import ends_as_a_run_does
from placement_edu.course import require
from placement_edu.errors import MAX_DEVICES, PlacementError, expect, read_int
from placement_edu.peak import (
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTE,
    RESHARD_AFTER_FORWARD,
    ActivationProfile,
    StepPeak,
    accumulated,
    breakdown,
    derive,
)
from placement_edu.pricing import SCHEDULE_FORMS, parsed_schedule
from placement_edu.mesh import Mesh
from placement_edu.models import LAYER_K, every_kth
from placement_edu.strategies import CONTEXT_ATTENTIONS
from placement_edu.peak_axes import CONTEXT_BUFFERS, context_seq, derive_on_mesh
from placement_edu.peak_pipeline import pipeline_micro_batches
from placement_edu.fitting import PROFILE_ATTENTION, read_setting
from placement_edu.setting import ATTENTIONS, resolve
from placement_edu.step_case import StepCase
from placement_edu.timing.hardware import HARDWARE
from placement_edu.units import GB

#: fit's strategies by the core's names (``setting.ALIASES``: fit once said fsdp2 and
#: fsdp2_no_reshard), each as ``peak.RESHARD_AFTER_FORWARD`` keys it.
FIT_STRATEGIES = {"zero3": "fsdp2", "fsdp_grad_op": "fsdp2_no_reshard"}

#: Ranks a ``--verify`` run shards over (a fake group: one process; N = 1024 takes ~20 s for GPT-2).
MAX_VERIFY_DEVICES = 4096
MAX_SEQ = 2**17
MAX_MICRO_BATCH = 1024
#: A pipeline step's micro-batches: the derivation walks every pass of the rank's schedule.
MAX_MICRO_BATCHES = 4096


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub, "fit", "will one rank's training step fit? the peak of a real model, by event", __doc__
    )
    _what_flags(p)
    _where_flags(p)
    _step_flags(p)
    _output_flags(p)
    p.set_defaults(handler=ends_as_a_run_does(_fit))  # (its signals: as run's)


def _count(
    p: argparse.ArgumentParser,
    flag: str,
    what: str,
    most: int,
    help: str,
    default: int | None = None,
) -> None:
    """A flag that counts ``what``, from 1 to ``most`` (``errors.read_int``)."""
    p.add_argument(flag, type=flag_type(read_int, what, most), default=default, help=help)


def _what_flags(p: argparse.ArgumentParser) -> None:
    """--model and --strategy: what is placed, and how."""
    p.add_argument(
        "--model",
        required=True,
        help=f"a reference model ({', '.join(MODELS)}: HF shapes in plain torch), "
        "or PATH/config.json: "
        "a local HF config built with transformers (pip install 'placement-edu[hf]')",
    )
    p.add_argument(
        "--strategy",
        default="zero3",
        help=f"{listed(tuple(FIT_STRATEGIES))}. zero3: FSDP2, fully_shard on every block, then on "
        "the root (N = 1 without mixed precision: plain single-device training); fsdp_grad_op: "
        "the same with reshard_after_forward=False on every block (gathered from forward to "
        "backward); default %(default)s",
    )


def _where_flags(p: argparse.ArgumentParser) -> None:
    """The devices or the mesh, its axes' options, and the rank described."""
    _count(p, "--devices", "devices", MAX_DEVICES, "N (or --mesh)")
    p.add_argument(
        "--mesh",
        type=flag_type(Mesh.parse),
        default=None,
        help="the mesh, as time takes it: data=D,tensor=T[,replica=R][,context=C] (tensor: "
        "Megatron's column/row pairs in every block, placement_edu.peak_axes; replica: HSDP; "
        "context: ring or Ulysses on s/C tokens), or pipeline=P alone (one device per stage, "
        "fp32; --schedule, --micro-batches); --devices is its size",
    )
    p.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="with a tensor axis: the residual stream cut along the sequence (SequenceParallel)",
    )
    p.add_argument(
        "--schedule",
        default=None,
        help=f"with a pipeline axis: {', '.join(SCHEDULE_FORMS)} (default 1f1b), as time takes it",
    )
    m = (
        "with a pipeline axis: m, the micro-batches of one step (default 2p); without one: m "
        "micro-batches' gradients accumulated before the step, FSDP2 reduce-scattering each "
        "(peak.accumulated; default 1)"
    )
    _count(p, "--micro-batches", "micro-batches", MAX_MICRO_BATCHES, m)
    p.add_argument(
        "--context-attention",
        choices=CONTEXT_ATTENTIONS,
        default=None,
        help="with a context axis: ring (default: K/V chunks passed round) or ulysses "
        "(all-to-alls, heads <-> sequence); attention is SDPA's on the rank's s/c tokens",
    )
    p.add_argument(
        "--rank",
        type=flag_type(read_int, "rank", MAX_DEVICES - 1, "", 0),
        default=0,
        help="the rank to describe, 0..N-1 (default %(default)s; the last ranks hold fewer rows)",
    )


def _step_flags(p: argparse.ArgumentParser) -> None:
    """The step: precision, batch, sequence, attention, recomputation, optimizer."""
    p.add_argument(
        "--precision",
        default=None,
        help="fsdp2_bf16 (default, as PyTorch trainers run FSDP2): "
        "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), 4/4/8 B; fp32 (alias of "
        "fp32_adam; the default with --device cuda, which measures a plain fp32 step)",
    )
    _count(p, "--micro-batch", "sequences", MAX_MICRO_BATCH, "b", default=1)
    s = "s (default: gpt2 1024, llama-1b 2048, llama-8b 4096; a config: min(positions, 2048))"
    _count(p, "--seq", "tokens", MAX_SEQ, s)
    p.add_argument(
        "--attention",
        default=None,
        help=f"{listed(ATTENTIONS)}. flash (default): F.scaled_dot_product_attention, as PyTorch "
        "trainers and HF use it; eager: HF's explicit softmax(q·kᵀ)·v, which keeps the "
        "[b, heads, s, s] scores",
    )
    p.add_argument(
        "--recompute",
        default="none",
        help="; ".join(f"{name}: {what}" for name, what in RECOMPUTE.items()) + f"; {LAYER_K}",
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam-foreach")


def _output_flags(p: argparse.ArgumentParser) -> None:
    """The budget it is held against, and how the answer is given (and verified)."""
    p.add_argument(
        "--memory-gb", type=flag_type(_gb), default=None, help="device memory, GB = 10^9 bytes"
    )
    p.add_argument(
        "--hardware",
        default=None,
        help=f"a hardware preset ({', '.join(HARDWARE)}), as plan and time take it: its device "
        "memory is the budget unless --memory-gb gives one (h100-nvlink-ib: 85.9 GB = 80 GiB)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (bytes)")
    p.add_argument(
        "--verify",
        action="store_true",
        help="run PyTorch's tracker for this rank (fake process group) and print it beside",
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="where --verify measures: cpu (PyTorch's trackers under FakeTensorMode, any N); "
        "cuda (a real step on this machine's GPU, CUDA's allocator; N = 1, fp32)",
    )


#: What ``fit`` assumes when a flag is not given: what PyTorch trainers run (torchtitan, HF's
#: Trainer with FSDP2): bf16 mixed precision and SDPA. ``--device cuda`` measures a plain fp32 step.
DEFAULTS = {"precision": "fsdp2_bf16", "attention": "sdpa"}


def _defaults(args: argparse.Namespace) -> list[str]:
    """Fill the flags not given with ``DEFAULTS``; the names filled, as ``--flag value``."""
    used = []
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            if name == "precision" and args.device == "cuda":
                value = "fp32"
            setattr(args, name, value)
            used.append(f"--{name} {value}")
    return used


def _gb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PlacementError(
            f"{text[:40]!r} is not a number; give device memory in GB (e.g. 80)"
        ) from None
    if not (0 < value < 1e9):
        raise PlacementError(
            f"{text[:40]!r} is out of range; give device memory in GB, > 0 (e.g. 80)"
        )
    return value


def _door(args: argparse.Namespace) -> None:
    """fit's flags resolved once, through the one door (``setting.resolve``): the model, strategy,
    mesh or devices, precision, hardware and memory budget, recomputation and attention (bad input
    refused here, in one line), and the pipeline's schedule. Below the door the flags are read as
    resolved: ``args.arch`` is the model's ``Architecture`` (``--model`` stays as typed, for the
    output), and the strategy, precision and attention are fit's words for what the setting holds
    (fsdp2, fp32 or fsdp2_bf16, sdpa: its output's), ``args.budget`` the bytes a device may hold
    (None: no budget given)."""
    setting = resolve(
        args.strategy,
        None,
        args.mesh,
        args.precision,
        args.hardware,
        devices=None if args.mesh is not None else args.devices,  # (--mesh's size: _resolve_mesh)
        recompute=args.recompute,
        attention=args.attention,
        memory=None if args.memory_gb is None else round(args.memory_gb * GB),
        architecture=args.model,
    )
    args.arch, _, args.precision = read_setting(setting)
    assert setting.strategy is not None
    args.strategy = FIT_STRATEGIES[setting.strategy.name]
    args.attention = PROFILE_ATTENTION[setting.attention]
    args.recompute = setting.recompute
    given = args.memory_gb is not None or args.hardware is not None
    args.budget = setting.budget_bytes if given else None
    args.pipeline_schedule, args.virtual_stages = parsed_schedule(args.schedule or "1f1b")


def _check(args: argparse.Namespace) -> int:
    """The sequence length, after refusing what cannot run (one line, exit 2)."""
    arch = args.arch
    seq = sequence_of(arch, args.seq)
    expect(
        args.rank < args.devices,
        f"--rank {args.rank} is not a rank of {args.devices} devices (0..{args.devices - 1})",
    )
    expect(
        arch.positions == 0 or seq <= arch.positions,
        f"--seq {seq} is longer than {args.model}'s {arch.positions} learned positions",
    )
    expect(
        not (arch.config and (args.recompute == "megatron-selective" or every_kth(args.recompute))),
        f"--recompute {args.recompute} is applied to the reference models' modules; "
        "an HF config's own modules take none, selective, torchtitan-op or full",
    )
    expect(
        not (every_kth(args.recompute) and args.mesh is not None),
        f"--recompute {args.recompute} is priced on a data axis (--devices); "
        "on a --mesh give none, selective, megatron-selective, torchtitan-op or full",
    )
    if args.device == "cuda":
        _check_cuda(args)
    expect(
        not args.verify or args.devices <= MAX_VERIFY_DEVICES,
        f"--verify shards over at most {MAX_VERIFY_DEVICES} fake ranks, "
        f"got --devices {args.devices}",
    )
    return seq


def _check_cuda(args: argparse.Namespace) -> None:
    """``--device cuda`` measures one whole device's step: refused, in one line, where it cannot."""
    expect(args.verify, "--device cuda is where --verify measures: add --verify")
    # (on one device every --strategy is the same plain step: nothing is sharded or resharded)
    expect(
        args.devices == 1 and args.precision == "fp32",
        f"--device cuda measures one device's plain fp32 step (--devices 1 --precision fp32), "
        f"got --devices {args.devices} --precision {args.precision}; "
        "more devices are verified on the CPU, on a fake process group (--device cpu)",
    )
    import torch

    expect(
        torch.cuda.is_available(),
        f"--device cuda: this machine has no CUDA device (torch {torch.__version__}, "
        f"built with CUDA {torch.version.cuda or 'no'}); --device cpu verifies with "
        "PyTorch's trackers instead",
    )


def _report(peak: StepPeak, memory_bytes: int | None) -> dict:
    out = breakdown(peak)
    if memory_bytes is not None:
        out["memory_bytes"], out["fits"] = memory_bytes, peak.peak.total <= memory_bytes
    return out


def _fit(args: argparse.Namespace) -> int:
    defaulted = _defaults(args)
    _door(args)
    _resolve_mesh(args)
    require("torch", "fit")  # (a profile is measured with torch, and keyed by its version)
    seq = _check(args)
    if args.arch.config:
        require("transformers", "fit --model PATH/config.json")
    peak, profile, cached = _step(args, seq, args.precision, args.attention, args.recompute)
    memory_bytes = args.budget
    fixes = (
        _what_would_fit(args, seq, memory_bytes)
        if memory_bytes is not None and peak.peak.total > memory_bytes
        else []
    )
    result = {
        "model": args.model,
        "strategy": args.strategy,
        "devices": args.devices,
        "rank": args.rank,
        "precision": args.precision,
        "micro_batch": args.micro_batch,
        "seq": seq,
        "attention": args.attention,
        "recompute": args.recompute,
        "optimizer": args.optimizer,
        "defaults_used": defaulted,
        "mesh": str(args.mesh or Mesh.of(data=args.devices)),
        "sequence_parallel": args.sequence_parallel,
        **_pipeline_keys(args),
        **_context_keys(args, seq, peak),
        **_report(peak, memory_bytes),
        **reserved_of(args, seq, profile, peak),
        "events": [{"name": e.name, "phase": e.phase, "bytes": e.total} for e in peak.events],
        "would_fit_with": fixes,
        "profile": {**profile.to_dict(), "cached": cached},
    }
    result["profile"].pop("moments")
    if args.verify:
        result["measured"] = tracked(args, seq)
    where = args.mesh or Mesh.of(data=args.devices)
    print(json.dumps(result, indent=2) if args.json else text(result, peak, where))
    return 0


def reserved_of(
    args: argparse.Namespace, seq: int, profile: ActivationProfile, peak: StepPeak
) -> dict:
    """What CUDA's caching allocator would reserve, estimated (``placement_edu.reserved``: the
    step ``derive`` placed, replayed through the allocator's model), kept apart from the allocated
    ``peak_bytes``; None on a mesh (its step is not replayed yet), past ``MAX_LAYERS`` blocks,
    or where the replay is not of ``peak``'s step (what it requests at its peak is that step's
    peak, to the byte)."""
    from placement_edu.reserved import ALLOCATOR, MAX_LAYERS, SOURCE, estimate

    if args.mesh is not None:
        return {"reserved_estimate_bytes": None}
    if args.arch.layers > MAX_LAYERS:  # (the replay's cost grows with the blocks)
        why = f"not estimated past {MAX_LAYERS} blocks (the replay goes block by block)"
        return {"reserved_estimate_bytes": None, "reserved_estimate": {"skipped": why}}

    every, kth = every_kth(args.recompute), None
    if every:  # (the checkpointed blocks keep what full recomputation keeps, as in _step)
        from placement_edu.runtime.measurement.profiles import get_profile

        full = StepCase(args.arch, args.micro_batch, seq, profile.compute, args.attention)
        kth = (every, get_profile(full.with_(recompute="full"))[0])
    r = estimate(
        args.arch, profile, args.devices, args.rank, PRECISIONS[args.precision], args.optimizer,
        RESHARD_AFTER_FORWARD[args.strategy], kth,
    )  # fmt: skip
    if r.requested != peak.peak.total:
        return {"reserved_estimate_bytes": None}
    pools = {f"{stream} stream, {pool} pool": b for (stream, pool), b in r.by_pool.items()}
    return {
        "reserved_estimate_bytes": r.reserved,
        "reserved_estimate": {"allocator": ALLOCATOR, "source": SOURCE, "by_pool": pools},
    }


#: The changes a practitioner tries first when a step does not fit, one at a time.
ALTERNATIVES = (
    ("precision", "fsdp2_bf16"),
    ("attention", "sdpa"),
    ("recompute", "torchtitan-op"),
    ("recompute", "full"),
)


def _step(
    args: argparse.Namespace, seq: int, precision: str, attention: str, recompute: str
) -> tuple[StepPeak, ActivationProfile, bool]:
    """The step ``fit`` answers for, under these three choices (the rest from ``args``): its
    peak, the profile it is placed from and whether that was cached. Under ``layer:K`` the
    profiles without and with full recomputation (torchtitan's checkpointed blocks keep and
    replay as the latter)."""
    from placement_edu.runtime.measurement.profiles import get_profile

    prec, every = PRECISIONS[precision], every_kth(recompute)
    case = StepCase(args.arch, args.micro_batch, seq, prec.compute_name, attention, recompute)
    profile, cached = get_profile(case.with_(recompute="none") if every else case)
    reshard = RESHARD_AFTER_FORWARD[args.strategy]
    if args.mesh is not None:
        c = args.mesh.degree("context")
        if c > 1:  # (a context rank's profile: its s/c tokens)
            profile, cached = get_profile(case.with_(seq=context_seq(seq, c)))
        peak = derive_on_mesh(
            arch=args.arch,
            profile=profile,
            mesh=args.mesh,
            rank=args.rank,
            precision=prec,
            optimizer=args.optimizer,
            reshard_after_forward=reshard,
            sequence_parallel=args.sequence_parallel,
            schedule=args.pipeline_schedule,
            virtual_stages=args.virtual_stages,
            micro_batches=args.micro_batches,
            context_attention=args.context_attention,
        )
    else:
        kth = None
        if every:
            kth = (every, get_profile(case.with_(recompute="full"))[0])
        peak = derive(
            args.arch,
            profile,
            args.devices,
            args.rank,
            prec,
            args.optimizer,
            reshard,
            every_kth=kth,
        )
    if args.mesh is None or args.mesh.degree("pipeline") == 1:
        peak = accumulated(peak, args.micro_batches or 1)
    return peak, profile, cached


def _what_would_fit(args: argparse.Namespace, seq: int, memory_bytes: int) -> list[dict]:
    """Each of ``ALTERNATIVES`` (one flag changed) under which the step fits: the flag, its value
    and the peak then. Each is a profile of its own (measured once, then cached)."""
    out = []
    for flag, value in ALTERNATIVES:
        if getattr(args, flag) == value:
            continue
        case = {**vars(args), flag: value}
        try:
            peak = _step(args, seq, case["precision"], case["attention"], case["recompute"])[0]
        except PlacementError:
            continue  # (one this mesh cannot price: a pipeline's bf16, a context axis's eager)
        if peak.peak.total <= memory_bytes:
            out.append({"flag": f"--{flag}", "value": value, "peak_bytes": peak.peak.total})
    return out


def _resolve_mesh(args: argparse.Namespace) -> None:
    """--devices from --mesh (or the mesh's size checked against it), and the flags a mesh needs:
    refused in one line."""
    mesh = args.mesh
    for flag, given, axis in (
        ("--schedule", args.schedule, "pipeline"),
        ("--context-attention", args.context_attention, "context"),
    ):
        expect(
            given is None or (mesh is not None and mesh.degree(axis) > 1),
            f"{flag} applies to a {axis} axis: give --mesh with {axis}=N, or leave {flag} out",
        )
    args.schedule, args.context_attention = (
        args.schedule or "1f1b",
        args.context_attention or "ring",
    )
    args.micro_batches = args.micro_batches or 0  # (0: 2p on a pipeline, resolved below)
    if mesh is None:
        expect(args.devices is not None, "give --devices N, or --mesh (e.g. data=8,tensor=2)")
        expect(not args.sequence_parallel, "--sequence-parallel needs --mesh with a tensor axis")
        return
    expect(
        args.devices in (None, mesh.world_size),
        f"--mesh {mesh} is {mesh.world_size} devices, --devices says {args.devices}: give one",
    )
    args.devices = mesh.world_size
    if mesh.degree("pipeline") > 1:  # a pipeline's step: its m micro-batches, resolved here
        args.micro_batches = pipeline_micro_batches(mesh.degree("pipeline"), args.micro_batches)
    alone = any(mesh.world_size == mesh.degree(axis) for axis in ("tensor", "pipeline"))
    data_tensor = mesh.world_size == mesh.degree("data") * mesh.degree("tensor")
    expect(
        not args.verify or alone or data_tensor,
        "--verify on a mesh runs tensor parallelism (tensor=T), FSDP2 beside it (data=D,tensor=T)"
        f" or a pipeline (pipeline=P) alone, got --mesh {mesh}",
    )


def _pipeline_keys(args: argparse.Namespace) -> dict:
    """On a pipeline axis: the schedule and the micro-batches of the step (default 2p)."""
    p = args.mesh.degree("pipeline") if args.mesh is not None else 1
    if p == 1:  # (gradient accumulation: m micro-batches before the step)
        return {"micro_batches": args.micro_batches} if args.micro_batches > 1 else {}
    return {"schedule": args.schedule, "micro_batches": args.micro_batches}


def _context_keys(args: argparse.Namespace, seq: int, peak: StepPeak) -> dict:
    """On a context axis: the tokens a rank holds and its attention buffers, by phase (bytes)."""
    c = args.mesh.degree("context") if args.mesh is not None else 1
    if c == 1:
        return {}
    buffers = {
        phase: max(e.terms.get(CONTEXT_BUFFERS, 0) for e in peak.events if e.phase == phase)
        for phase in ("forward", "backward")
    }
    return {
        "context_attention": args.context_attention,
        "context": {"tokens_per_rank": seq // c, "buffers": buffers},
    }
