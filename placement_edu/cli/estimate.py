"""``placement-edu estimate --convention deepspeed|megatron|accelerate [...]``: another tool's
memory estimate, exactly as it prints it, beside ours, with a term-by-term reconciliation (SPEC §8).

Every number comes from ``placement_edu.estimators`` (their formulas) and ``report.analyze`` (ours).
Torch is never imported.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from placement_edu.arguments import command, flag_type
from placement_edu.cli.shape import (
    SHAPE,
    add_choice_flag,
    add_micro_batches_flag,
    add_recompute_flags,
    count_flag,
)
from placement_edu.cli.table import model_from_args
from placement_edu.errors import (
    MAX_DEVICES,
    MAX_PARAMS,
    PlacementError,
    read_int,
    within_device_limit,
)
from placement_edu.estimators import (
    ACCELERATE_DTYPES,
    ZERO2_GPU_FORMULAS,
    Estimate,
    Reconciliation,
    accelerate_table,
    accelerate_training,
    deepspeed_printout,
    deepspeed_table,
    megatron_theoretical_memory,
    ours,
    reconcile,
)
from placement_edu.models import ModelSpec, TransformerSpec
from placement_edu.placement import Placement
from placement_edu.precision import PRESETS, TRIPLE_FORM
from placement_edu.report import analyze
from placement_edu.strategies import Strategy
from placement_edu.units import fmt_bytes, plain

CONVENTIONS = ("deepspeed", "megatron", "accelerate")
#: The precision ours uses by default: the preset that counts what the tool counts (SPEC §1).
DEFAULT_PRECISION = {
    "deepspeed": "mixed_adam_fp32_accum",
    "megatron": "mixed_adam_fp32_grads",
    "accelerate:float32": "fp32_adam",
    "accelerate:float16": "mixed_adam",
}
#: Megatron's parallel degrees (each a flag): the axis, what it counts, its symbol.
DEGREES = (
    ("tensor", "tensor-parallel degree", "t"),
    ("pipeline", "pipeline stages", "p"),
    ("data", "data-parallel degree", "d"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "estimate",
        "DeepSpeed's, Megatron's or Accelerate's memory estimate beside ours, "
        "reconciled term by term",
        __doc__,
    )
    p.add_argument(
        "--convention", required=True, choices=CONVENTIONS, help="whose estimate to reproduce"
    )
    p.add_argument(
        "--params",
        type=flag_type(read_int, "parameters", MAX_PARAMS, "2.851e9"),
        help="Ψ, the number of parameters (deepspeed, accelerate)",
    )
    _tool_flags(p)
    _transformer_flags(p)
    p.add_argument(
        "--precision",
        default=None,
        help=f"ours: a preset ({', '.join(PRESETS)}) or a custom {TRIPLE_FORM}; "
        "default: the preset that counts what the tool counts",
    )
    p.add_argument("--json", action="store_true", help="print JSON (exact bytes) instead of text")
    p.set_defaults(handler=_estimate)


def _tool_flags(p: argparse.ArgumentParser) -> None:
    """What DeepSpeed's and Accelerate's estimates take."""
    p.add_argument(
        "--gpus-per-node",
        type=count_flag("GPUs per node", MAX_DEVICES),
        default=1,
        help="deepspeed (default %(default)s)",
    )
    p.add_argument(
        "--nodes",
        type=count_flag("nodes", MAX_DEVICES),
        default=1,
        help="deepspeed (default %(default)s)",
    )
    p.add_argument(
        "--stage",
        type=int,
        choices=(2, 3),
        default=2,
        help="deepspeed: ZeRO stage (default %(default)s)",
    )
    p.add_argument(
        "--largest-layer",
        type=count_flag("parameters", MAX_PARAMS),
        help="parameters of the largest layer (deepspeed --stage 3; accelerate's Largest Layer)",
    )
    p.add_argument(
        "--formula",
        choices=tuple(ZERO2_GPU_FORMULAS),
        default="pr5099",
        help="deepspeed ZeRO-2 revision: pr5099 (today's code, 2Ψ + 18Ψ/N) or pr965 (4Ψ + 16Ψ/N, "
        "what the docs' t5-3b table printed)",
    )
    add_choice_flag(p, "--dtype", ACCELERATE_DTYPES, "float32", "accelerate: the row to reconcile")
    p.add_argument(
        "--buffer-bytes",
        type=count_flag("bytes", MAX_PARAMS),
        default=0,
        help="accelerate: bytes of module buffers counted with the weights (default %(default)s)",
    )


def _transformer_flags(p: argparse.ArgumentParser) -> None:
    """A transformer and its parallel degrees, as Megatron's estimate takes them."""
    t = p.add_argument_group("transformer (megatron; or instead of --params)")
    for flag, what in SHAPE:
        t.add_argument(f"--{flag}", type=count_flag(flag), help=what)
    t.add_argument(
        "--ffn", type=count_flag("ffn units"), default=None, help="f, MLP width (default 4h)"
    )
    t.add_argument(
        "--micro-batch", type=count_flag("sequences"), default=None, help="b (default 1)"
    )
    add_recompute_flags(t)
    for axis, what, symbol in DEGREES:
        t.add_argument(
            f"--{axis}",
            type=count_flag(what, MAX_DEVICES),
            default=1,
            help=f"{symbol} (default %(default)s)",
        )
    add_micro_batches_flag(t, "m per step (default: p, a full pipeline)")
    t.add_argument(
        "--distributed-optimizer",
        action="store_true",
        help="Megatron's distributed optimizer (ZeRO-1 on d)",
    )


def _psi(args: argparse.Namespace) -> int:
    if args.params is None and args.layers is None:
        raise PlacementError(
            f"--convention {args.convention} needs --params (e.g. 2.851e9) or a transformer "
            "(--layers --hidden --heads --seq --vocab)"
        )
    return model_from_args(args).psi


def _deepspeed(args: argparse.Namespace) -> tuple[str, list[tuple[str, Reconciliation]]]:
    psi, gpn, nodes = _psi(args), args.gpus_per_node, args.nodes
    within_device_limit(f"--gpus-per-node {gpn:,} × --nodes {nodes:,}", gpn * nodes)
    if args.stage == 3 and args.largest_layer is None:
        raise PlacementError(
            "--stage 3 needs --largest-layer (parameters of the largest layer, e.g. 32e6)"
        )
    rows = deepspeed_table(psi, gpn, nodes, args.stage, args.largest_layer, args.formula)
    precision = args.precision or DEFAULT_PRECISION["deepspeed"]
    out = []
    for row in rows:
        strategy = Strategy(f"zero{row.stage}", row.placement)
        report = analyze(strategy, ModelSpec(psi), gpn * nodes, precision)
        out.append(
            (
                f"{row.options.replace('cpu ', 'cpu').strip()}, per GPU",
                reconcile(row.gpu, ours(report)),
            )
        )
        out.append(
            (
                f"{row.options.replace('cpu ', 'cpu').strip()}, per CPU",
                reconcile(
                    row.cpu,
                    ours(
                        report,
                        f"host memory of one node ({gpn} GPUs), steady state",
                        host=True,
                        per_node=gpn,
                    ),
                ),
            )
        )
    head = (
        f"DeepSpeed estimate_zero{args.stage}_model_states_mem_needs_all_cold"
        + (f", formula {args.formula}" if args.stage == 2 else "")
        + ', as DeepSpeed prints it ("GB" there is GiB = 2^30 bytes):\n\n'
        + deepspeed_printout(rows, psi, gpn, nodes, args.largest_layer)
    )
    return head, out


def _megatron(args: argparse.Namespace) -> tuple[str, list[tuple[str, Reconciliation]]]:
    if args.params is not None:
        raise PlacementError(
            "Megatron's estimate needs a transformer (--layers --hidden --heads --seq --vocab), "
            f"not --params {args.params}"
        )
    model = model_from_args(args)
    assert isinstance(model, TransformerSpec)  # no --params: the transformer flags
    t, p, d = args.tensor, args.pipeline, args.data
    theirs = megatron_theoretical_memory(
        model, t, p, d, args.distributed_optimizer, args.micro_batches
    )
    # Megatron's placement: params and grads R on data, everything S on tensor and pipeline; the
    # distributed optimizer shards O on data (ZeRO-1).
    split = {"data": "R", "tensor": "S", "pipeline": "S"}
    placement = Placement(
        params=split,
        grads=split,
        optimizer={**split, "data": "S" if args.distributed_optimizer else "R"},
    )
    strategy = Strategy(
        "megatron",
        placement,
        micro_batches=args.micro_batches or p,
        sequence_parallel=model.sequence_parallel,
    )
    report = analyze(
        strategy,
        model,
        mesh=f"data={d},tensor={t},pipeline={p}",
        precision=args.precision or DEFAULT_PRECISION["megatron"],
    )
    mine = ours(report, "per GPU, pipeline stage 0", transient=("activations",))
    return (
        "Megatron-LM report_theoretical_memory, as Megatron prints it "
        '("MB" there is MiB = 2^20 bytes):\n\n'
        f"{theirs.printed}"
    ), [("first pipeline stage, per GPU", reconcile(theirs, mine))]


def _accelerate(args: argparse.Namespace) -> tuple[str, list[tuple[str, Reconciliation]]]:
    psi = _psi(args)
    rows = accelerate_table(psi, args.buffer_bytes, args.largest_layer)
    header = ("dtype", "Largest Layer", "Total Size", "Training using Adam")
    widths = [max(len(r[i]) for r in rows + (header,)) for i in range(4)]
    table = "\n".join(" | ".join(c.center(w) for c, w in zip(r, widths)) for r in (header,) + rows)
    theirs = accelerate_training(psi, args.dtype, args.buffer_bytes)
    out = []
    if theirs.terms:
        precision = args.precision or DEFAULT_PRECISION[f"accelerate:{args.dtype}"]
        out.append(
            (
                f"{args.dtype}, Training using Adam, one device",
                reconcile(theirs, ours(analyze("dp", ModelSpec(psi), 1, precision), "one device")),
            )
        )
    return (
        "accelerate estimate-memory, as Accelerate prints it "
        '("KB/MB/GB" there are powers of 1024):\n\n'
        f"{table}"
        + (
            ""
            if theirs.terms
            else f"\n\n{args.dtype}: Accelerate prints N/A for training (no estimate to reconcile)"
        )
    ), out


def _show(label: str, r: Reconciliation) -> list[str]:
    verdict = (
        "agree to the byte"
        if r.agrees
        else f"differ by {fmt_bytes(r.ours.total_bytes - r.theirs.total_bytes)} (ours − theirs)"
    )
    lines = [
        f"{label}:",
        f"  theirs  {r.theirs.printed.strip()} = {fmt_bytes(r.theirs.total_bytes)}  "
        f"[{r.theirs.convention}; {r.theirs.unit}]",
        f"  ours    {fmt_bytes(r.ours.total_bytes)}  [{r.ours.convention}; {r.ours.quantity}]",
        f"  -> {verdict}",
    ]
    width = max(len(line.kind) for line in r.lines)
    for line in r.lines:
        mark = "=" if line.agrees else "≠"
        lines.append(
            f"    {line.kind.ljust(width)}  theirs {fmt_bytes(line.theirs)} {mark} ours "
            f"{fmt_bytes(line.ours)}: {line.why}"
        )
    return lines


def _estimate_json(e: Estimate) -> dict[str, Any]:
    return {
        "convention": e.convention,
        "quantity": e.quantity,
        "printed": e.printed,
        "unit": e.unit,
        "rule": e.rule,
        "total_bytes": plain(e.total_bytes),
        "terms": [
            {"name": t.name, "kind": t.kind, "bytes": plain(t.bytes), "why": t.why} for t in e.terms
        ],
    }


def _estimate(args: argparse.Namespace) -> int:
    head, pairs = {"deepspeed": _deepspeed, "megatron": _megatron, "accelerate": _accelerate}[
        args.convention
    ](args)
    if args.json:
        print(
            json.dumps(
                {
                    "convention": args.convention,
                    "printed": head.split("\n\n", 1)[1],
                    "units": "bytes (GB = 1e9 bytes, GiB = 2^30 bytes)",
                    "comparisons": [
                        {
                            "label": label,
                            "agree": r.agrees,
                            "theirs": _estimate_json(r.theirs),
                            "ours": _estimate_json(r.ours),
                            "lines": [
                                {
                                    "kind": x.kind,
                                    "theirs": plain(x.theirs),
                                    "ours": plain(x.ours),
                                    "agree": x.agrees,
                                    "why": x.why,
                                }
                                for x in r.lines
                            ],
                        }
                        for label, r in pairs
                    ],
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return 0
    out = [head, "", "Theirs beside ours (GB = 10^9 bytes, GiB = 2^30 bytes), term by term:"]
    for label, r in pairs:
        out += [""] + _show(label, r)
    print("\n".join(out))
    return 0
