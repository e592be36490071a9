"""Command line: ``placement-edu table|check|run ...``.

Bad input exits 2 with one line naming the bad value and what is accepted; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from placement_edu import cli_check, cli_run
from placement_edu.errors import PlacementError
from placement_edu.models import Model, ModelSpec, TransformerSpec
from placement_edu.precision import PRESETS
from placement_edu.report import compare
from placement_edu.strategies import STRATEGIES, get_strategy


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"placement-edu: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _number(text: str) -> float:
    """Read 7.5e9, 70e9 or 1000000; a sizes must be positive."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 7.5e9)")
    return value


# --- table ----------------------------------------------------------------------------------
def _table_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("table", help="per-device memory and per-step communication of strategies",
                       description="Derive per-device memory (bytes) and per-step communication "
                                   "for each strategy on an abstract model of PARAMS parameters.")
    p.add_argument("--params", type=_number, help="Ψ, the number of parameters (e.g. 7.5e9)")
    t = p.add_argument_group("transformer (instead of --params; needed to price tp and pp)")
    for flag, what in (("layers", "L"), ("hidden", "h"), ("heads", "a"), ("seq", "s"), ("vocab", "V")):
        t.add_argument(f"--{flag}", type=int, help=what)
    t.add_argument("--micro-batch", type=int, default=1, help="b, sequences per micro-batch per device")
    p.add_argument("--micro-batches", type=int, default=None, help="m, micro-batches per step")
    p.add_argument("--devices", type=_number, required=True, help="N, the number of devices")
    p.add_argument("--strategies", default="dp,zero1,zero2,zero3",
                   help=f"comma-separated, from: {', '.join(STRATEGIES)}")
    p.add_argument("--precision", default="mixed_adam", help=f"one of: {', '.join(PRESETS)}")
    p.add_argument("--mesh", default=None, help="e.g. data=8 or tensor=8 (degrees multiply to --devices)")
    p.add_argument("--json", action="store_true", help="print JSON (bytes, exact) instead of a table")
    p.set_defaults(handler=_table)


def _model(args: argparse.Namespace) -> Model:
    """--params for an abstract model, or the transformer flags for a TransformerSpec."""
    shape = {k: getattr(args, k) for k in ("layers", "hidden", "heads", "seq", "vocab")}
    if args.params is not None:
        if any(v is not None for v in shape.values()):
            raise PlacementError("give either --params or the transformer flags (--layers ...), not both")
        if args.params <= 0 or args.params != int(args.params):
            raise PlacementError(f"--params must be a whole number of parameters > 0, got {args.params:g}")
        return ModelSpec(psi=int(args.params))
    missing = [f"--{k}" for k, v in shape.items() if v is None]
    if len(missing) == len(shape):
        raise PlacementError("give --params (e.g. 7.5e9) or a transformer (--layers --hidden --heads --seq --vocab)")
    if missing:
        raise PlacementError(f"a transformer needs {', '.join(missing)} too")
    return TransformerSpec(micro_batch=args.micro_batch, **shape)


def _table(args: argparse.Namespace) -> int:
    devices = args.devices
    if devices <= 0 or devices != int(devices):
        raise PlacementError(f"--devices must be a whole number >= 1, got {args.devices:g}")
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if not names:
        raise PlacementError(f"--strategies is empty; choose from: {', '.join(STRATEGIES)}")
    strategies = [get_strategy(n) for n in names]
    if args.micro_batches is not None:
        strategies = [s.with_(micro_batches=args.micro_batches) for s in strategies]
    comparison = compare(strategies, _model(args), int(devices), args.precision, args.mesh)
    if args.json:
        print(json.dumps(comparison.to_list(), indent=2))
    else:
        print(comparison)
    return 0


PARSERS: list[Callable[[argparse._SubParsersAction], None]] = [_table_parser, cli_check.add_parser, cli_run.add_parser]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="placement-edu", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in PARSERS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except PlacementError as error:
        print(f"placement-edu: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
