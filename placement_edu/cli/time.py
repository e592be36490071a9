"""Price one configuration -- a transformer, a batch, a strategy on a mesh -- as the planner prices
each candidate (SPEC §3, §9): step time with its breakdown, model and hardware FLOP/s per GPU with
MFU, and the peak memory per device.

``placement-edu time --layers L --hidden H ... --global-batch B --strategy S --mesh M``: the
paragraph above is its ``--help``. The figures are the planner's (``pricing.price``); torch is
never imported."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from placement_edu.arguments import command, flag_type, listed
from placement_edu.cli.shape import (
    SHAPE,
    add_global_batch_flag,
    add_model_flag,
    add_step_flags,
    add_transformer_flags,
    read_number,
    transformer_from_flags,
)
from placement_edu.configuration import PeakOf, Priced
from placement_edu.pricing import (
    DATA_PLACEMENTS,
    SCHEDULE_FORMS,
    parsed_schedule,
    price_configuration,
)
from placement_edu.architectures import sequence_of
from placement_edu.errors import PlacementError, shown
from placement_edu.cli.one_peak import FSDP2_PLACEMENTS, planner_peaks, profile_peak, spec_of
from placement_edu.models import MAX_EVERY, TransformerSpec, layer_k
from placement_edu.mesh import Mesh
from placement_edu.names import data_part
from placement_edu.setting import ALIASES, RECOMPUTES, Setting, resolve
from placement_edu.strategies import CONTEXT_ATTENTIONS, Strategy
from placement_edu.timing import FLOP_CONVENTION, Hardware
from placement_edu.units import GB

#: ``--efficiency`` bounds: a typo catcher (0.01 to 10 × the preset's achieved FLOP/s).
EFFICIENCY_RANGE = (0.01, 10.0)


def tera(flops_e12: float) -> str:
    """FLOP/s given in 10^12, as ``time`` prints them: "989.4e12", or the plain figure where
    that would read "4.2e-06e12" (a toy's few FLOPs)."""
    return f"{flops_e12:.4g}e12" if flops_e12 >= 1e-3 else f"{flops_e12 * 1e12:.4g}"


def _efficiency(text: str) -> float:
    low, high = EFFICIENCY_RANGE
    accepted = f"give a number from {low:g} to {high:g} (1.0 = the preset's achieved FLOP/s)"
    return read_number(text, low, high, accepted)


def _schedule(text: str) -> str:
    parsed_schedule(text)  # refused here, in one line, if it is not a schedule
    return text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "time",
        "price one given configuration: step time, where it goes, MFU, peak memory",
        __doc__,
    )
    shape = p.add_argument_group("transformer")
    add_transformer_flags(shape, required=False, shape_note=" (required without --model)")
    add_model_flag(
        shape,
        "the transformer flags",
        "its shape for the formula, and its peak from the module's profile (fit's) where fit "
        "derives the placement -- FSDP2 (zero3, fsdp, fsdp_grad_op, hsdp) on data, replica and "
        "tensor axes -- with the formula's beside it",
    )
    add_global_batch_flag(p, "m = global batch ÷ (data replicas × b)", required=True)
    _placement_flags(p)
    _pricing_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON (seconds, bytes, FLOP/s)")
    p.set_defaults(handler=_time)


def _placement_flags(p: argparse.ArgumentParser) -> None:
    """The strategy on the mesh: its axes' options, recomputation and the pipeline's schedule."""
    p.add_argument(
        "--strategy",
        default="dp",
        help=f"the data placement ({listed(DATA_PLACEMENTS)}), composed with tp and pp as "
        "--mesh says; or the composition plan prints, e.g. zero1×tp×pp (default %(default)s)",
    )
    p.add_argument(
        "--mesh",
        required=True,
        help="e.g. data=48,tensor=8,pipeline=6 (rank order: tensor innermost, then data, "
        "pipeline, replica)",
    )
    p.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="Megatron sequence parallelism on the tensor axis",
    )
    p.add_argument(
        "--context-attention",
        choices=CONTEXT_ATTENTIONS,
        default="ring",
        help="on a context axis of --mesh: ring (K/V passed round the ring, overlapped with "
        "attention) or ulysses (all-to-alls, heads <-> sequence, on the critical path)",
    )
    p.add_argument(
        "--recompute",
        type=flag_type(_recompute),
        default="none",
        help="activation recomputation, by the trainer that ships it; the step is charged the "
        "FLOPs each replays: none (default: every trainer without activation checkpointing); "
        "selective, alias megatron-selective (Korthikanti et al. 2022: core attention "
        "recomputed; Megatron-LM's --recompute-granularity selective); torchtitan-op "
        "(torchtitan's activation_checkpoint.mode = 'selective', selective_ac_option = 'op': "
        "mm, SDPA and reduce-scatter outputs saved, every second mm of a block recomputed; its "
        "peak needs --model, fit's profile); layer:K (torchtitan's mode = 'selective', "
        "selective_ac_option = 'K': every K-th block as full, the others none); full (every "
        "block: Megatron-LM's --recompute-granularity full, torchtitan's mode = 'full', HF's "
        "gradient checkpointing)",
    )
    p.add_argument(
        "--schedule",
        type=_schedule_type,
        default=None,
        help=f"pipeline schedule: {', '.join(SCHEDULE_FORMS)} (default 1f1b; interleaved: "
        "bubble (p-1)/(V·m), V× the stage sends; zero_bubble: ZB-H1, bubble (p-1)/(3m))",
    )
    p.add_argument(
        "--balanced-stages",
        action="store_true",
        help="a pipeline split that counts the logit layer, so every stage does 1/p of the FLOPs "
        "(default: L/p layers a stage, the logit layer on the last, as Megatron-LM splits)",
    )


def _pricing_flags(p: argparse.ArgumentParser) -> None:
    """What the step is priced with: hardware, overlap, precision, and the time model's options."""
    add_step_flags(p)
    p.add_argument(
        "--efficiency",
        type=_efficiency_type,
        default=1.0,
        help="scales the preset's achieved FLOP/s (1.0 = the preset)",
    )
    p.add_argument(
        "--no-roofline",
        action="store_true",
        help="the FLOP-only time model: every FLOP at the achieved FLOP/s, no memory-bound op "
        "priced (default: the roofline, each op at max(FLOPs/rate, bytes/HBM bandwidth), where "
        "the hardware knows its bandwidth)",
    )
    p.add_argument(
        "--fused",
        action="store_true",
        help="torch.compile's fusion of the elementwise chains (norms, RoPE, SwiGLU, residual "
        "adds, float8 casts: each chain one kernel, an approximation); on the roofline",
    )


def _recompute(text: str) -> str:
    """The policy's name (the door's: an alias, megatron-selective, read as selective)."""
    policy = layer_k(text) or ALIASES.get(text, text)
    if policy not in RECOMPUTES and not layer_k(policy):
        raise PlacementError(
            f"{shown(text)} is not a recomputation; give none, selective (or "
            f"megatron-selective), torchtitan-op, full, or layer:K (K from 1 to {MAX_EVERY:,})"
        )
    return policy


_schedule_type = flag_type(_schedule)
_efficiency_type = flag_type(_efficiency)


def lines(priced: Priced, model: TransformerSpec, float8: bool = False) -> list[str]:
    """The text report: the configuration, the step and its breakdown, FLOP/s and MFU, memory
    (``float8``: the precision runs float8 GEMMs, so MFU is said to be against bf16's peak)."""
    c, hw = priced.choice, priced.hardware
    t = c.time
    assert t is not None
    compute = {p: s for p, s, _ in t.by_pass}
    out = [
        f"{model.description}",
        f"{c.strategy.name} on {c.mesh} ({c.mesh.world_size} × {hw.name}), "
        f"{c.strategy.micro_batches} micro-batches of {model.micro_batch} "
        f"({c.strategy.pipeline_schedule}"
        + (f":{c.strategy.virtual_stages}" if c.strategy.virtual_stages > 1 else "")
        + (", balanced stages" if c.strategy.balanced_stages else "")
        + f"), recompute {c.recompute}, {model.attention} attention, "
        f"overlap {priced.overlap}, "
        f"{float(priced.tokens_per_device):,.6g} tokens per device",
        f"step {t.total_s:.4g} s on rank 0 = compute {t.compute_s:.4g} s + exposed communication "
        f"{t.exposed_comm_s:.4g} s + pipeline bubble {t.bubble_s:.4g} s",
        f"  compute: forward {compute['forward']:.4g} s, backward {compute['backward']:.4g} s"
        + (f", optimizer step {compute['step']:.4g} s" if compute.get("step") else "")
        + f" at {hw.flops / 1e12:.4g}e12 FLOP/s achieved"
        + (
            f", on the roofline (HBM {hw.memory_bandwidth / 1e12:.4g}e12 B/s, "
            + ("fused" if hw.fused else "eager")
            + " elementwise ops)"
            if hw.roofline and hw.memory_bandwidth is not None
            else ", FLOP-only (no memory-bound op priced)"
        ),
        f"  communication {t.comm_s:.4g} s, of it {t.exposed_comm_s:.4g} s exposed:",
    ]
    for op, axis, phase, critical, seconds in priced.collectives:
        if not seconds:  # a recv: its transfer is priced at the sender (SPEC §4)
            continue
        out.append(
            f"    {phase:<8} {op} on {axis}: {seconds:.4g} s, "
            f"{priced.status(op, axis, phase, critical)}" + (" (critical path)" if critical else "")
        )
    if not priced.collectives:
        out.append("    none")
    mfu = "" if priced.mfu is None else f" = MFU {priced.mfu:.1%}"
    hfu = "" if priced.hfu is None else f" = HFU {priced.hfu:.1%}"
    peak = (
        "no known peak for this hardware: no MFU"
        if priced.peak_flops is None
        else f"of the {priced.peak_flops / 1e12:g}e12 dense bf16 peak"
        + (
            "; under float8 two tensor-core peaks run, so torchtitan reports no MFU: this is "
            "against bf16's alone"
            if float8
            else ""
        )
    )
    out += [
        f"model FLOPs {tera(priced.tflops_per_gpu)} per GPU per s{mfu}; hardware FLOPs "
        f"{tera(priced.hardware_tflops_per_gpu)}{hfu} ({peak}); FLOPs: {FLOP_CONVENTION}",
        "  in Megatron-LM's count (num_floating_point_operations: the matmuls' weights, the "
        "logit layer, 12·L·h·s attention): "
        f"{tera(priced.megatron_flops / priced.step_s / 1e12)} per GPU per s"
        + ("" if priced.megatron_mfu is None else f" = MFU {priced.megatron_mfu:.1%}"),
        f"peak memory {c.peak_bytes / GB:.2f} GB per device (rank 0) of "
        f"{hw.memory_bytes / GB:.1f} GB: "
        + (
            "fits"
            if priced.fits
            else f"does NOT fit, {(c.peak_bytes - hw.memory_bytes) / GB:.2f} GB over"
        ),
    ]
    return out


def _transformer(args: argparse.Namespace) -> TransformerSpec:
    """The transformer the flags describe, or ``--model``'s (its shape; --seq, --micro-batch,
    --attention and --recompute as given), refused in one line where both or neither are."""
    shape = [f"--{k}" for k in ("layers", "hidden", "heads", "vocab", "ffn", "kv_heads")]
    given = [f.replace("_", "-") for f in shape if getattr(args, f[2:]) is not None]
    if args.model is None:
        missing = [f"--{k}" for k, _ in SHAPE if getattr(args, k) is None]
        if missing:
            raise PlacementError(
                f"give the transformer ({', '.join(missing)} missing) or --model NAME"
            )
        return transformer_from_flags(args)
    if given or args.block != "gpt":
        raise PlacementError(
            f"--model {args.model} gives the shape; leave out "
            + ", ".join(given + (["--block"] if args.block != "gpt" else []))
        )
    seq = sequence_of(args.model, args.seq)
    return spec_of(args.model, seq, args.micro_batch, args.attention, args.recompute)


def _transformer_of(setting: Setting) -> TransformerSpec:
    assert isinstance(setting.model, TransformerSpec)
    return setting.model


def _priced_on(hw: Hardware, args: argparse.Namespace) -> Hardware:
    """``hw`` on the roofline (issue 42: ``time``'s default where it knows its HBM bandwidth),
    fused with ``--fused``; off it with ``--no-roofline``, where ``--fused`` is refused."""
    if args.no_roofline:
        if args.fused:
            raise PlacementError(
                "--fused prices torch.compile's fused elementwise chains on the roofline, and "
                "--no-roofline leaves the roofline off; give one of them"
            )
        return replace(hw, roofline=False, fused=False)
    if hw.memory_bandwidth is None:
        if args.fused:
            raise PlacementError(
                f"--fused needs the roofline, and hardware {hw.name!r} has no HBM bandwidth "
                "(memory_bandwidth) to price it at; give a preset (e.g. h100-nvlink-ib)"
            )
        return hw
    return replace(hw, roofline=True, fused=args.fused)


def _profile_only_peak(name: str, model: TransformerSpec, setting: Setting) -> PeakOf:
    """The peak of a policy only the module's profile prices (``profile_peak``), refused in one
    line where the profile does not price the placement."""
    measured = planner_peaks(name, model, setting.precision)

    def peak_of(strategy: Strategy, mesh: Mesh, recompute: str) -> int:
        peak = measured(strategy, mesh, recompute)
        if peak is None:
            raise PlacementError(
                f"--recompute {recompute}'s peak is the module's profile's, which prices FSDP2 "
                f"({', '.join(FSDP2_PLACEMENTS)}) on the data and replica axes: give one there "
                f"(--strategy {strategy.name} on {mesh} is not)"
            )
        return peak

    return peak_of


def _time(args: argparse.Namespace) -> int:
    setting = resolve(
        None, _transformer(args), args.mesh, args.precision, args.hardware, recompute=args.recompute
    )  # the door: every typed value resolved here, once
    setting = replace(setting, hardware=_priced_on(setting.hardware, args))
    model, mesh = _transformer_of(setting), setting.mesh
    assert mesh is not None
    for flag, given in (("--schedule", args.schedule), ("--balanced-stages", args.balanced_stages)):
        if given and mesh.degree("pipeline") == 1:  # refused, not ignored (issue 43, item 7)
            raise PlacementError(
                f"{flag} shapes a pipeline, and --mesh {args.mesh} has no pipeline axis; "
                "add one (e.g. data=4,pipeline=2) or leave the flag out"
            )
    # torchtitan-op: Korthikanti's formula has no term for its save list; only a profile prices
    # its peak (the step is charged its FLOPs either way)
    profile_only = setting.recompute in TransformerSpec.PROFILE_ONLY
    if profile_only and args.model is None:
        raise PlacementError(
            f"--recompute {setting.recompute}: Korthikanti's formula has no term for its save "
            "list, so only the module's profile (fit's) prices its peak; give --model NAME"
        )
    priced = price_configuration(
        setting,
        peak_of=_profile_only_peak(args.model, model, setting) if profile_only else None,
        strategy=args.strategy,
        global_batch=args.global_batch,
        sequence_parallel=args.sequence_parallel,
        schedule=args.schedule or "1f1b",
        overlap=args.overlap,
        efficiency=args.efficiency,
        context_attention=args.context_attention,
        balanced_stages=args.balanced_stages,
    )
    out = priced.to_dict()
    text = lines(priced, model, setting.precision.float8 is not None)
    if args.model is not None:
        strategy = priced.choice.strategy
        peak, how = profile_peak(
            args.model,
            model,
            data_part(strategy.name),  # the resolved placement's (fsdp2 typed: zero3), as plan's
            mesh,
            setting.precision,
            strategy.micro_batches,
            args.sequence_parallel,
        )
        formula = None if profile_only else out["peak_bytes"]
        out.update(model=args.model, peak_from=how, formula_peak_bytes=formula)
        if peak is not None:
            out.update(peak_bytes=peak, fits=peak <= priced.hardware.memory_bytes)
            memory = priced.hardware.memory_bytes
            text[-1] = (
                f"peak memory {peak / GB:.2f} GB per device (rank 0) of {memory / GB:.1f} GB: "
                + (
                    "fits"
                    if peak <= memory
                    else f"does NOT fit, {(peak - memory) / GB:.2f} GB over"
                )
                + f"; from {how}"
            )
            text.append(
                f"  Korthikanti's formula: {formula / GB:.2f} GB (Megatron's model of Megatron's "
                "code)"
                if formula is not None
                else f"  Korthikanti's formula: no term for {model.recompute}'s save list"
            )
        else:
            text.append(f"  the peak above is {how}")
    print(json.dumps(out, indent=2) if args.json else "\n".join(text))
    return 0
