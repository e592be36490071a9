"""``placement-edu run STRATEGY --world-size N``: execute a strategy on real torch.distributed
processes on this machine and print measured against predicted (SPEC §7).

The options are the runtime's own (``placement_edu.runtime.args``), shared with torchrun; for a
cluster, the same engines run under torchrun (gloo, or NCCL with GPUs):
    torchrun --nproc-per-node 4 -m placement_edu.runtime.worker zero3 --steps 5 --json

Only the handler imports the runtime's torch side: building this parser stays torch-free.
"""

from __future__ import annotations

import argparse
import json
import sys

from placement_edu.runtime.args import add_arguments, config_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a strategy on real processes; measured against predicted",
                       description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from placement_edu.runtime.launcher import RunFailed, RunInterrupted, run
    config = config_from_args(args, args.world_size)
    config.validate()                                  # bad input: one line, exit 2, no processes
    try:
        result = run(config, timeout_s=args.timeout, progress=sys.stderr.isatty())
    except RunInterrupted as stopped:                  # Ctrl-C or SIGTERM: one line, 130 or 143
        print(f"placement-edu: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except RunFailed as error:
        print(f"placement-edu: run failed:\n{error}", file=sys.stderr)
        return 1
    print(json.dumps(result.to_dict(), indent=2) if args.json else result)
    return 0
