"""The placement-edu command: derive, check, run and price where each training state lives.

One module per subcommand: ``table.py`` (derived memory and communication), ``check.py`` (the
static checker), ``run.py`` (a measured run), ``course.py`` (the course: copy and open it, build
its site and slides). ``table`` and ``check`` never import torch; ``run`` imports the runtime, and
``course`` JupyterLab and the site's tools, only inside their handlers. A command that needs an
extra the install lacks says which, in one line (``placement_edu.course.require``).

Bad input exits 2 with one line naming the bad value and what is accepted; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

from placement_edu.cli import entry  # first: a signal from here on ends the command in one line
from placement_edu.arguments import OneLineParser, described
from placement_edu.cli import check, run, table
from placement_edu.cli import estimate
from placement_edu.cli import calibrate
from placement_edu.cli import plan
from placement_edu.cli import torch_ref
from placement_edu.cli import fit
from placement_edu.cli import course
from placement_edu.cli import time as time_cmd
from placement_edu.errors import PlacementError

__all__ = ["build_parser", "main"]

#: One ``add_parser(sub)`` per subcommand, in the order ``--help`` lists them.
PARSERS: list[Callable[[argparse._SubParsersAction], None]] = [
    table.add_parser,
    check.add_parser,
    run.add_parser,
    estimate.add_parser,
    calibrate.add_parser,
    plan.add_parser,
    torch_ref.add_parser,
    fit.add_parser,
    time_cmd.add_parser,
    course.add_parser,
]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="placement-edu", description=described(__doc__))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for add in PARSERS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: sys.argv[1:]), run the subcommand, return the exit status."""
    try:
        return _main(argv)
    finally:
        entry.hand_back()  # (the command's process: the signals as Python had them)


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as done:  # --help (0) or a usage error (2)
        return int(done.code or 0)
    try:
        return int(args.handler(args) or 0)
    except PlacementError as error:
        print(f"placement-edu: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before or after a run's ranks exist
        print("placement-edu: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left early (``| head``): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python flushes at exit)
        return 141  # 128 + SIGPIPE, as a shell reports it
