"""Derive per-device memory (bytes) and per-step communication for each strategy on an abstract
model of PARAMS parameters, or on a transformer.

``placement-edu table --params PSI --devices N [...]`` (SPEC §3, §4): the paragraph above is its
``--help``. Torch is never imported."""

from __future__ import annotations

import argparse
import json
from fractions import Fraction

from placement_edu.architectures import sequence_of
from placement_edu.arguments import command, flag_type
from placement_edu.cli.shape import (
    SHAPE,
    add_devices_flag,
    add_micro_batches_flag,
    add_model_flag,
    add_precision_flag,
    add_recompute_flags,
    add_transformer_flags,
    count_flag,
    require_shape,
    within_max_params,
)
from placement_edu.errors import (
    MAX_MICRO_BATCHES,
    MAX_PARAMS,
    PlacementError,
    read_fraction,
    read_int,
    show_limit,
)
from placement_edu.experts import MoESpec, imbalance_text
from placement_edu.placement import EXPERT_AXIS
from placement_edu.models import Model, TransformerSpec, per_layer_model
from placement_edu.report import Comparison, compare
from placement_edu.setting import resolve
from placement_edu.units import fmt_gb
from placement_edu.strategies import CONTEXT_ATTENTIONS, STRATEGIES, get_strategy


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "table", "per-device memory and per-step communication of strategies", __doc__)
    p.add_argument(
        "--params",
        type=flag_type(read_int, "parameters", MAX_PARAMS, "7.5e9"),
        help=f"Ψ, the number of parameters (e.g. 7.5e9; at most {show_limit(MAX_PARAMS)})",
    )
    _transformer_flags(p)
    _expert_flags(p)
    _placement_flags(p)
    p.set_defaults(handler=_table)


def _transformer_flags(p: argparse.ArgumentParser) -> None:
    """The transformer's shape (instead of --params), or a real model's."""
    t = p.add_argument_group("transformer (instead of --params; needed to price tp and pp)")
    add_transformer_flags(t, required=False, defaults=False)
    add_model_flag(
        t,
        "--params or the shape flags (--seq, --micro-batch, --attention, --recompute as given)",
        "its shape, and the FSDP2 rows' peak (zero3, fsdp, fsdp_grad_op) from the module's "
        "profile, fit's, beside the formula's",
    )
    add_recompute_flags(t)


def _expert_flags(p: argparse.ArgumentParser) -> None:
    """A mixture of experts' flags (with the transformer's)."""
    e = p.add_argument_group(
        "mixture of experts (with the transformer flags: a Mixtral-style MoE, SwiGLU experts of "
        "width --ffn; an expert axis in --mesh splits its experts)"
    )
    e.add_argument(
        "--experts", type=count_flag("experts"), default=None, help="E, experts per layer"
    )
    e.add_argument(
        "--top-k", type=count_flag("experts per token"), default=None, help="k (default 2)"
    )
    e.add_argument(
        "--capacity-factor",
        type=flag_type(read_capacity_factor),
        default=None,
        help="cf: each expert takes ⌈k·cf·T/E⌉ tokens per micro-batch (default 1)",
    )
    e.add_argument(
        "--routing-skew",
        type=flag_type(read_share),
        default=None,
        help="the busiest expert rank's share of the routed tokens (e.g. 0.5; balanced: 1/e): "
        "prints its tokens, bytes and expert FLOPs beside the balanced rank's",
    )


def _placement_flags(p: argparse.ArgumentParser) -> None:
    """The devices, the strategies, the precision and the mesh; and how the answer is printed."""
    add_micro_batches_flag(
        p, f"m, micro-batches per step (at most {show_limit(MAX_MICRO_BATCHES)})"
    )
    add_devices_flag(p)
    p.add_argument(
        "--strategies",
        default="dp,zero1,zero2,zero3",
        help=f"comma-separated, from: {', '.join(STRATEGIES)}",
    )
    add_precision_flag(p)
    p.add_argument(
        "--mesh", default=None, help="e.g. data=8 or tensor=8 (degrees multiply to --devices)"
    )
    p.add_argument(
        "--context-attention",
        choices=CONTEXT_ATTENTIONS,
        default=None,
        help="on a context axis: ring (K/V passed round the ring) or ulysses (all-to-alls, "
        "heads <-> sequence); default ring",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (bytes, exact) instead of a table"
    )


def moe_flags(args: argparse.Namespace) -> list[tuple[str, object]]:
    """The mixture-of-experts flags and their values (None: not given; ``estimate`` has none)."""
    names = ("experts", "top_k", "capacity_factor", "routing_skew")
    return [(f"--{n.replace('_', '-')}", getattr(args, n, None)) for n in names]


def model_from_args(args: argparse.Namespace) -> Model:
    """--params for an abstract model, the transformer flags for a TransformerSpec, or --model's
    shape."""
    if getattr(args, "model", None) is not None:
        return _real_model(args)
    shape = {k: getattr(args, k) for k, _ in SHAPE}
    extras = {
        "--ffn": args.ffn,
        "--micro-batch": args.micro_batch,
        "--recompute": args.recompute,
        "--sequence-parallel": args.sequence_parallel or None,
        "--attention": getattr(args, "attention", None),
        "--kv-heads": getattr(args, "kv_heads", None),
        "--block": getattr(args, "block", None),
    }
    if args.params is not None:
        given = [
            flag
            for flag, v in {**{f"--{k}": v for k, v in shape.items()}, **extras}.items()
            if v is not None
        ]
        if given:
            raise PlacementError(
                f"give either --params or the transformer flags, not both "
                f"(got --params with {', '.join(given)})"
            )
        moe = [flag for flag, v in moe_flags(args) if v is not None]
        if moe:  # Ψ alone has no layer to give experts: refused, not ignored
            raise PlacementError(
                f"{', '.join(moe)} shape{'s' if len(moe) == 1 else ''} a mixture of experts "
                "from the transformer flags (--layers --hidden --heads --seq --vocab, --ffn the "
                "experts' width); --params gives Ψ alone: give the transformer flags instead"
            )
        return per_layer_model(args.params)
    require_shape(args, "7.5e9")
    if getattr(args, "experts", None) is not None:
        return moe_from_args(args, shape)
    moe_only = [
        flag
        for flag, v in (
            ("--top-k", getattr(args, "top_k", None)),
            ("--capacity-factor", getattr(args, "capacity_factor", None)),
        )
        if v is not None
    ]
    if moe_only:
        raise PlacementError(
            f"{', '.join(moe_only)} shape{'s' if len(moe_only) == 1 else ''} a mixture of "
            "experts: give --experts E too"
        )
    model = TransformerSpec(
        micro_batch=args.micro_batch or 1,
        ffn=args.ffn or 0,
        recompute=args.recompute or "none",
        sequence_parallel=args.sequence_parallel,
        attention=extras["--attention"] or "eager",
        kv_heads=extras["--kv-heads"] or 0,
        block=extras["--block"] or "gpt",
        **shape,
    )
    return within_max_params(model, "transformer", "--layers, --hidden, --ffn or --vocab")


def _real_model(args: argparse.Namespace) -> TransformerSpec:
    """--model's shape (``cli.one_peak.spec_of``), refused in one line beside --params, the shape
    flags or --experts."""
    from placement_edu.cli.one_peak import spec_of

    given = [f"--{k}" for k, _ in SHAPE if k != "seq" and getattr(args, k) is not None]
    given += [
        f"--{k.replace('_', '-')}"
        for k in ("params", "ffn", "kv_heads", "block", "experts")
        if getattr(args, k, None) is not None
    ]
    if given:
        raise PlacementError(f"--model {args.model} gives the shape; leave out {', '.join(given)}")
    seq = sequence_of(args.model, args.seq)
    return spec_of(
        args.model, seq, args.micro_batch or 1, args.attention or "eager", args.recompute or "none"
    )


def _module_peaks(args: argparse.Namespace, model: TransformerSpec, comparison: Comparison) -> list:
    """For each row: (peak bytes, formula's peak bytes, how the peak was priced): the module's
    where ``fit`` derives the row (``cli.one_peak.profile_peak``), else the formula's."""
    from placement_edu.cli.one_peak import profile_peak

    out = []
    for r in comparison.reports:
        formula = int(r.memory.peak)
        peak, how = profile_peak(
            args.model,
            model,
            r.strategy.name,
            r.mesh,
            r.precision,
            r.strategy.micro_batches,
            r.strategy.sequence_parallel,
        )
        out.append((formula if peak is None else peak, formula, how))
    return out


def read_share(text: str) -> Fraction:
    """A share in (0, 1], read exactly ("0.5" or "1/2")."""
    return read_fraction(
        text, "routing skew", Fraction(0), Fraction(1), "give a share in (0, 1], e.g. 0.5 or 1/2"
    )


#: Beyond E/k every expert already has a slot for every token; 10^4 covers any E up to 10^4·k.
MAX_CAPACITY_FACTOR = 10_000


def read_capacity_factor(text: str) -> Fraction:
    """A positive decimal, read exactly (1.25 is 5/4), at most ``MAX_CAPACITY_FACTOR``."""
    return read_fraction(
        text,
        "capacity factor",
        Fraction(0),
        Fraction(MAX_CAPACITY_FACTOR),
        f"give a positive number, at most {MAX_CAPACITY_FACTOR:,}, e.g. 1 or 1.25",
    )


def moe_from_args(args: argparse.Namespace, shape: dict) -> MoESpec:
    """The transformer flags with --experts: a Mixtral-style mixture of experts (experts.py)."""
    dense_only = {
        "--block": getattr(args, "block", None),
        "--recompute": args.recompute,
        "--sequence-parallel": args.sequence_parallel or None,
    }
    given = [flag for flag, v in dense_only.items() if v is not None]
    if given:
        raise PlacementError(
            f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} not derived for a mixture "
            "of experts (--experts); leave " + ("it" if len(given) == 1 else "them") + " out"
        )
    model = MoESpec(
        attention=getattr(args, "attention", None) or "eager",
        ffn=args.ffn or 4 * shape["hidden"],
        experts=args.experts,
        top_k=args.top_k or 2,
        capacity_factor=args.capacity_factor or Fraction(1),
        micro_batch=args.micro_batch or 1,
        kv_heads=getattr(args, "kv_heads", None) or 0,
        **shape,
    )
    return within_max_params(model, "mixture of experts", "--layers, --hidden, --ffn or --experts")


def _table(args: argparse.Namespace) -> int:
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if not names:
        raise PlacementError(f"--strategies is empty; choose from: {', '.join(STRATEGIES)}")
    model = model_from_args(args)
    strategies = [get_strategy(n) for n in names]
    changes: dict[str, object] = {}
    if args.micro_batches is not None:
        changes["micro_batches"] = args.micro_batches
    if args.sequence_parallel:
        changes["sequence_parallel"] = True
    if args.context_attention is not None:
        changes["context_attention"] = args.context_attention
    if changes:
        strategies = [s.with_(**changes) for s in strategies]
    door = resolve(None, model, args.mesh, args.precision)  # each typed value, once
    skew = getattr(args, "routing_skew", None)
    e = door.mesh.degree(EXPERT_AXIS) if door.mesh else 1
    if skew is not None and (not isinstance(model, MoESpec) or e == 1 or args.json):
        raise PlacementError(
            "--routing-skew shows the busiest expert rank: it needs --experts, a mesh with an "
            "expert axis (e.g. --mesh data=2,expert=4) and the text table (no --json)"
        )
    imbalance = ""
    if skew is not None and isinstance(model, MoESpec):  # first: a bad share prints no table
        activations = door.precision.activations
        imbalance = f"\nLoad imbalance. {imbalance_text(model, e, skew, activations)}"
    comparison = compare(strategies, model, args.devices, door.precision, door.mesh)
    if args.model is not None:
        assert isinstance(model, TransformerSpec)
        peaks = _module_peaks(args, model, comparison)
        if args.json:
            rows = [
                {**row, "peak_bytes": peak, "formula_peak_bytes": formula, "peak_from": how}
                for row, (peak, formula, how) in zip(comparison.to_list(), peaks)
            ]
            print(json.dumps(rows, indent=2))
            return 0
        print(comparison)
        print(f"\n{args.model}: the peak column is Korthikanti's formula; the module's (fit's):")
        for r, (peak, formula, how) in zip(comparison.reports, peaks):
            if peak != formula or how.startswith("the module"):
                print(f"  {r.strategy.name:10} {fmt_gb(peak)} ({how})")
        return 0
    print(json.dumps(comparison.to_list(), indent=2) if args.json else comparison)
    if imbalance:
        print(imbalance)
    return 0
