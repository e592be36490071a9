"""The options of a measured run, defined once: ``placement-edu run`` (placement_edu.cli.run) adds
them to its subcommand, and ``torchrun -m placement_edu.runtime.worker`` parses them with
``parser()``. Torch-free (the dtype names are plain text here; ``config.py`` maps them to torch),
so the command line can list them without importing torch; and the runtime never imports the CLI.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from placement_edu.arguments import add_timeout_flag, OneLineParser, flag_type
from placement_edu.errors import (
    MAX_LOCAL_WORLD_SIZE,
    MAX_RUN_MICRO_BATCHES,
    MAX_STEPS,
    read_int,
)
from placement_edu.faults import FAULTS
from placement_edu.names import spelled
from placement_edu.strategies import PIPELINE_SCHEDULES

if TYPE_CHECKING:  # the config imports torch: the CLI builds its parser without it
    from placement_edu.runtime.config import RunConfig

#: The element types a run can use (``runtime.config.DTYPES`` maps each to torch, a precision
#: preset and a tolerance; a test keeps the two in step).
DTYPE_NAMES = ("float64", "float32")


def add_arguments(p: argparse.ArgumentParser, world_size: bool = True) -> None:
    """The run options, on ``p``; ``world_size=False`` for torchrun, which sets the world size."""
    # (The list of runnable names lives in runtime.engines, which may import torch: the help names
    # examples, and a name the runtime cannot run is refused with the whole list.)
    p.add_argument(
        "strategy",
        help="a strategy the runtime executes, e.g. zero3, hsdp or dp×tp "
        "(× may be typed x); another name is refused with the list",
    )
    if world_size:
        p.add_argument(
            "--world-size",
            type=flag_type(read_int, "processes", MAX_LOCAL_WORLD_SIZE, "4", 2),
            required=True,
            help="number of processes (ranks) on this machine, at least 2 "
            "(one process is the reference run)",
        )
    p.add_argument(
        "--steps",
        type=flag_type(read_int, "optimizer steps", MAX_STEPS),
        default=None,  # (None: not given -- RunConfig's default; a layer run refuses a given one)
        help="optimizer steps (default 3)",
    )
    p.add_argument("--fault", default=None, help=f"inject a fault of SPEC §5: {', '.join(FAULTS)}")
    p.add_argument(
        "--mesh", default=None, help="e.g. data=2,tensor=2 (degrees multiply to the world size)"
    )
    p.add_argument(
        "--micro-batches",
        type=flag_type(read_int, "micro-batches", MAX_RUN_MICRO_BATCHES),
        default=None,
        help="m, for pipeline strategies (default 4)",
    )
    p.add_argument(
        "--schedule",
        default=None,
        choices=PIPELINE_SCHEDULES,
        help="pipeline schedule (default 1f1b)",
    )
    p.add_argument("--dtype", default=None, choices=DTYPE_NAMES, help="default float64")
    add_timeout_flag(p, "the run is ended")
    p.add_argument("--json", action="store_true", help="print JSON (exact bytes, the full ledger)")


def parser() -> argparse.ArgumentParser:
    """The same options for ``python -m placement_edu.runtime.worker`` (world size from
    torchrun)."""
    p = OneLineParser(prog="placement_edu.runtime.worker")
    add_arguments(p, world_size=False)
    return p


def runnable_name(text: str) -> str:
    """The runtime's name for a typed strategy: "dpxtp" and "dp*tp" are "dp×tp"."""
    from placement_edu.runtime.engines import RUNNABLE  # (imported here: it may bring torch)

    name = spelled(text, RUNNABLE)
    return name if name in RUNNABLE else text  # else the message names what was typed, not "×"


def config_from_args(args: argparse.Namespace, world_size: int) -> RunConfig:
    """The ``RunConfig`` the parsed options describe (imports torch: call it only to run)."""
    from placement_edu.runtime.config import RunConfig

    given = {k: v for k, v in (("steps", args.steps), ("dtype", args.dtype)) if v is not None}
    return RunConfig(
        runnable_name(args.strategy),
        world_size,
        fault=args.fault,
        mesh=args.mesh,
        micro_batches=args.micro_batches,
        pipeline_schedule=args.schedule,
        **given,  # type: ignore[arg-type]
    )


#: The options a one-layer run (a context or an expert axis: one forward and backward of one
#: layer, in float64) cannot honour, by their attribute in the parsed options.
STEP_OPTIONS = {
    "steps": "--steps",
    "dtype": "--dtype",
    "micro_batches": "--micro-batches",
    "schedule": "--schedule",
}


def options_given(args: argparse.Namespace, options: dict[str, str]) -> list[str]:
    """The flags of ``options`` typed on the command line (their parsed value is not None)."""
    return [flag for attr, flag in options.items() if getattr(args, attr, None) is not None]
