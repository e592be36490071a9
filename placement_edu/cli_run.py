"""``placement-edu run STRATEGY --world-size N``: execute a strategy on real torch.distributed
processes on this machine and print measured against predicted (SPEC §7).

For a cluster, the same engines run under torchrun (gloo, or NCCL with GPUs):
    torchrun --nproc-per-node 4 -m placement_edu.runtime.worker zero3 --steps 5 --json
"""

from __future__ import annotations

import argparse
import json
import sys

from placement_edu.errors import PlacementError
from placement_edu.faults import FAULTS
from placement_edu.runtime.config import DTYPES, RunConfig
from placement_edu.runtime.engines import RUNNABLE
from placement_edu.strategies import PIPELINE_SCHEDULES


def _arguments(p: argparse.ArgumentParser, world_size: bool = True) -> None:
    p.add_argument("strategy", help=f"one of: {', '.join(RUNNABLE)} (dp×tp may be typed dpxtp)")
    if world_size:
        p.add_argument("--world-size", type=int, required=True, help="number of processes (ranks)")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps (default 3)")
    p.add_argument("--fault", default=None, help=f"inject a fault of SPEC §5: {', '.join(FAULTS)}")
    p.add_argument("--mesh", default=None, help="e.g. data=2,tensor=2 (degrees multiply to the world size)")
    p.add_argument("--micro-batches", type=int, default=None, help="m, for pipeline strategies (default 4)")
    p.add_argument("--schedule", default=None, choices=PIPELINE_SCHEDULES, help="pipeline schedule (default 1f1b)")
    p.add_argument("--dtype", default="float64", choices=list(DTYPES), help="default float64")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a collective may wait before the run is ended (default 60)")
    p.add_argument("--json", action="store_true", help="print JSON (exact bytes, the full ledger)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a strategy on real processes; measured against predicted",
                       description=__doc__.splitlines()[0])
    _arguments(p)
    p.set_defaults(handler=_run)


def parser() -> argparse.ArgumentParser:
    """The same options for ``python -m placement_edu.runtime.worker`` (world size from torchrun)."""
    p = argparse.ArgumentParser(prog="placement_edu.runtime.worker")
    _arguments(p, world_size=False)
    return p


def config_from_args(args: argparse.Namespace, world_size: int) -> RunConfig:
    if args.timeout <= 0:
        raise PlacementError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    strategy = args.strategy.strip().lower().replace("x", "×").replace("*", "×")
    strategy = strategy.replace("×", "x") if strategy.replace("×", "x") in RUNNABLE else strategy
    return RunConfig(strategy, world_size, steps=args.steps, fault=args.fault, mesh=args.mesh,
                     dtype=args.dtype, micro_batches=args.micro_batches, pipeline_schedule=args.schedule)


def _run(args: argparse.Namespace) -> int:
    from placement_edu.runtime.launcher import RunFailed, run
    config = config_from_args(args, args.world_size)
    config.validate()                                  # bad input: one line, exit 2, no processes
    try:
        result = run(config, timeout_s=args.timeout, progress=sys.stderr.isatty())
    except RunFailed as error:
        print(f"placement-edu: run failed:\n{error}", file=sys.stderr)
        return 1
    print(json.dumps(result.to_dict(), indent=2) if args.json else result)
    return 0
