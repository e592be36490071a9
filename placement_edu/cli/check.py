"""``placement-edu check STRATEGY [--fault NAME] [--mesh data=2,tensor=2] [--json]``.

Runs the static checker (SPEC §5, §6) and prints each condition: holds or broken, and why.
Exit status, as a linter's (ruff, flake8): 0 when every condition holds, 1 when one is broken
(directly, as a consequence, or by a safety rule), 2 on bad input, with one line. Torch is never
imported.
"""

from __future__ import annotations

import argparse
import json

from placement_edu.axes import model_axis_degree
from placement_edu.checker import CheckResult, check
from placement_edu.cli.shape import add_precision_flag
from placement_edu.faults import FAULTS
from placement_edu.setting import resolve
from placement_edu.strategies import COMPOSITIONS, STRATEGIES
from placement_edu.units import wrapped

#: The exit status of a check that ran and found a condition broken (0: every one holds; 2: bad
#: input), as a linter's: a script can tell ``check`` passed from ``check`` found a fault.
BROKEN_EXIT = 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="does a strategy train like a single device? (gradient integrity, "
        "state consistency, composition rules)",
        description="Check a strategy's placements and derived schedule for gradient "
        "integrity and state consistency (SPEC §5), and a composition for the "
        "safety rules of SPEC §6; optionally with a named fault edited in. Exit status: 0 "
        f"when every condition holds, {BROKEN_EXIT} when one is broken, 2 on bad input.",
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
    add_precision_flag(p)
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    door = resolve(args.strategy, None, args.mesh, args.precision)  # each typed value, once
    assert door.strategy is not None
    result = check(door, fault=args.fault)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        tensor = model_axis_degree(door.strategy, result.mesh, "tensor")
        print(result if tensor == 1 else f"{result}\n{assumed_heads(tensor)}")
    return exit_status(result)


def exit_status(result: CheckResult) -> int:
    """0 when both conditions hold and no safety rule is broken; ``BROKEN_EXIT`` otherwise."""
    broken = result.broken or result.consequences or result.rule_violations
    return BROKEN_EXIT if broken else 0


def assumed_heads(tensor: int) -> str:
    """What a check on a tensor axis assumes: the checker's model has placements, not heads."""
    return wrapped(
        f"assumed: the checker's abstract model has no attention heads, so tensor={tensor} is "
        f"checked as placements only; a real model's heads must divide by {tensor} (table "
        f"--heads H --mesh tensor={tensor} refuses them otherwise)"
    )
