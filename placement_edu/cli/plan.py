"""``placement-edu plan --params PSI --devices N [--memory-gb GB] [--hardware NAME] [...]``: every
placement and mesh that fits the memory budget, ranked by predicted step time (SPEC §3, §9), and
those that do not fit, with their excess. Torch is never imported, but with ``--model`` to measure
a profile not yet cached (``one_peak``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from placement_edu.architectures import sequence_of
from placement_edu.arguments import flag_type
from placement_edu.cli.shape import (
    SHAPE,
    add_devices_flag,
    add_global_batch_flag,
    add_model_flag,
    add_step_flags,
    add_transformer_flags,
    count_flag as _count,
    read_number,
    require_shape,
    transformer_from_flags,
)
from placement_edu.errors import (
    MAX_PARAMS,
    PlacementError,
    read_int,
)
from placement_edu.models import TransformerSpec
from placement_edu.cli.one_peak import planner_peaks, spec_of
from placement_edu.planner import TIE_BAND, default_transformer, plan
from placement_edu.setting import resolve
from placement_edu.units import GB

#: Device memory typed on the command line, in GB (10^9 bytes): up to 10^6 GB, a typo catcher.
MAX_MEMORY_GB = 10**6


def _tie_band(text: str) -> float:
    accepted = "give a fraction from 0 up to 1 (0.02: plans within 2% of the fastest are ties)"
    return read_number(text, 0, 1, accepted, high_included=False)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="rank placements and meshes that fit by predicted step time",
        description="Enumerate placements (dp, zero1/2/3, fsdp_grad_op, hsdp, composed with "
        "tp and pp) on every mesh of DEVICES devices and each recomputation "
        "choice; drop those whose peak exceeds the budget; rank the rest by "
        "predicted step time (SPEC §9).",
    )
    p.add_argument(
        "--params",
        type=flag_type(read_int, "parameters", MAX_PARAMS, "70e9"),
        help="Ψ; without the transformer flags a published shape near Ψ is assumed (and printed)",
    )
    add_transformer_flags(
        p.add_argument_group("transformer (instead of --params)"),
        required=False,
        shape_note=" (--seq may also reshape the --params default)",
    )
    add_model_flag(
        p,
        "--params or the transformer flags",
        "its shape, and each FSDP2 plan's peak (zero3, fsdp, fsdp_grad_op, hsdp on data, replica "
        "and tensor axes) from the module's profile, fit's, the formula's beside it",
    )
    add_devices_flag(p)
    p.add_argument(
        "--memory-gb",
        type=flag_type(read_int, "GB (10^9 bytes)", MAX_MEMORY_GB, "80"),
        default=None,
        help="memory budget per device in GB = 1e9 bytes (default: the hardware's)",
    )
    add_global_batch_flag(p, "default 1024: 4M tokens at s = 4096")
    add_step_flags(p)
    p.add_argument(
        "--tie-band",
        type=flag_type(_tie_band),
        default=TIE_BAND,
        help="plans within this fraction of the fastest step are ties, and the simplest of them "
        "is chosen: the shallowest pipeline, then the fewest axes (default 0.02, 2%%)",
    )
    p.add_argument(
        "--top", type=_count("rows"), default=10, help="rows of the text table (default 10)"
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (bytes, seconds) instead of a table"
    )
    p.set_defaults(handler=_plan)


def transformer_from_args(args: argparse.Namespace) -> tuple[TransformerSpec, str]:
    """The transformer flags, --model's shape, or the published shape assumed for --params (and
    the sentence saying so)."""
    shape = {k: getattr(args, k) for k, _ in SHAPE}
    given = [f"--{k}" for k, v in shape.items() if v is not None and k != "seq"]
    given += [
        f"--{k.replace('_', '-')}" for k in ("ffn", "kv_heads") if getattr(args, k) is not None
    ]
    given += ["--block"] if args.block != "gpt" else []
    if args.model is not None:
        if given or args.params is not None:
            raise PlacementError(
                f"--model {args.model} gives the shape; leave out "
                + ", ".join(given + (["--params"] if args.params is not None else []))
            )
        seq = sequence_of(args.model, args.seq)
        spec = spec_of(args.model, seq, args.micro_batch, args.attention, "none")
        return spec, (
            f"{args.model}: each FSDP2 plan's peak (zero3, fsdp, fsdp_grad_op, hsdp on data, "
            "replica and tensor axes) is the module's (fit's profile and derivation), the "
            "formula's beside it in --json; every other plan's is Korthikanti's formula"
        )
    if args.params is not None:
        if given:
            raise PlacementError(
                f"give either --params or the transformer flags, not both (got --params with "
                f"{', '.join(given)})"
            )
        model, assumption = default_transformer(args.params, args.micro_batch, args.seq)
        return replace(model, attention=args.attention), assumption
    require_shape(args, "70e9")
    return transformer_from_flags(args), ""


def _plan(args: argparse.Namespace) -> int:
    model, assumption = transformer_from_args(args)
    budget = None if args.memory_gb is None else args.memory_gb * GB
    door = resolve(None, model, None, args.precision, args.hardware, memory=budget)
    result = plan(
        door,
        args.devices,
        global_batch=args.global_batch,
        overlap=args.overlap,
        assumption=assumption,
        tie_band=args.tie_band,
        peak_of=None if args.model is None else planner_peaks(args.model, model, door.precision),
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print("\n".join(result.lines(args.top)))
    return 0
