"""``placement-edu check STRATEGY [--fault NAME] [--mesh data=2,tensor=2] [--json]``.

Runs the static checker (SPEC §5, §6) and prints each condition: holds or broken, and why.
Exit 0 whenever the check ran, whatever it found; 2 on bad input, with one line. Torch is never
imported.
"""

from __future__ import annotations

import argparse
import json

from placement_edu.checker import check
from placement_edu.faults import FAULTS
from placement_edu.mesh import Mesh
from placement_edu.precision import PRESETS, TRIPLE_FORM
from placement_edu.strategies import COMPOSITIONS, STRATEGIES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="does a strategy train like a single device? (gradient integrity, "
        "state consistency, composition rules)",
        description="Check a strategy's placements and derived schedule for gradient "
        "integrity and state consistency (SPEC §5), and a composition for the "
        "safety rules of SPEC §6; optionally with a named fault edited in.",
    )
    p.add_argument(
        "strategy", help=f"one of: {', '.join(STRATEGIES)}; compositions: {', '.join(COMPOSITIONS)}"
    )
    p.add_argument("--fault", default=None, help=f"one of: {', '.join(FAULTS)}")
    p.add_argument(
        "--mesh",
        default=None,
        help="e.g. data=2,tensor=2 (default: 4 devices on a one-axis strategy's axis, "
        "2 per axis for a composition)",
    )
    p.add_argument(
        "--precision",
        default="mixed_adam",
        help=f"a preset: {', '.join(PRESETS)}; or a custom {TRIPLE_FORM}",
    )
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    mesh = Mesh.parse(args.mesh) if args.mesh is not None else None
    result = check(args.strategy, mesh=mesh, fault=args.fault, precision=args.precision)
    print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) if args.json else result)
    return 0
