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
from typing import Callable, TypeVar

from placement_edu.arguments import command
from placement_edu.faults import FaultName
from placement_edu.course import require
from placement_edu.errors import expect
from placement_edu.mesh import Mesh
from placement_edu.strategies import COMPOSITIONS, Strategy, get_strategy
from placement_edu.runtime.args import STEP_OPTIONS, add_arguments, config_from_args, options_given


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "run", "run a strategy on real processes; measured against predicted", __doc__)
    add_arguments(p)
    p.set_defaults(handler=ends_as_a_run_does(_run))


#: What a launch returns (a RunResult, a TorchRefResult, a CalibrationResult): ``show`` prints it.
R = TypeVar("R")


def launched(launch: Callable[[], R], show: Callable[[R], str], what: str = "run") -> int:
    """Run ``launch`` (it starts processes) and print ``show`` of its result; the exit status. Every
    launching command ends the same way: Ctrl-C, SIGTERM, SIGHUP or SIGQUIT, one line and 130,
    143, 129 or 131, whenever it comes (``launcher.ends_as_a_run``); a failed rank, the report
    (root cause first) and 1. The launch runs in an agent (``runtime/processes/agent.py``): this
    process never imports torch for it."""
    from placement_edu.runtime.processes.agent import BEFORE, for_a_command
    from placement_edu.runtime.processes.launcher import (
        AFTER_THE_RUN,
        RunFailed,
        RunInterrupted,
        ends_as_a_run,
        phase,
    )

    def body() -> int:
        try:
            with for_a_command(), phase(BEFORE):
                result = launch()
        except RunInterrupted as stopped:
            print(f"placement-edu: {stopped}", file=sys.stderr)
            return stopped.exit_code
        except RunFailed as error:
            print(f"placement-edu: {what} failed:\n{error}", file=sys.stderr)
            return 1
        with phase(AFTER_THE_RUN):
            print(show(result))
        return 0

    return ends_as_a_run(body)


def ends_as_a_run_does(handler: Callable[[argparse.Namespace], int]) -> Callable:
    """``handler``, a command that starts processes, ending on a signal as ``run`` does from its
    first line, before it starts any (``launcher.ends_as_a_run``)."""

    def command(args: argparse.Namespace) -> int:
        from placement_edu.runtime.processes.launcher import ends_as_a_run

        return ends_as_a_run(lambda: handler(args))

    return command


def _run(args: argparse.Namespace) -> int:
    require("torch", "run")
    from placement_edu.runtime.processes.launcher import run

    config = config_from_args(args, args.world_size)
    if config.resolved_mesh().degree("context") > 1:
        return _run_context(args, config.resolved_strategy(), config.resolved_mesh())
    if config.resolved_mesh().degree("expert") > 1:
        return _run_expert(args, config.resolved_strategy(), config.resolved_mesh())
    config.validate()  # bad input: one line, exit 2, no processes
    return launched(
        lambda: run(config, timeout_s=args.timeout, progress=sys.stderr.isatty()),
        lambda result: json.dumps(result.to_dict(), indent=2) if args.json else str(result),
    )


def _run_context(args: argparse.Namespace, strategy: Strategy, mesh: Mesh) -> int:
    """A mesh with a context axis: one causal attention layer run as ``strategy`` attends (ring
    or Ulysses) on the context ranks (``runtime.context_launch``), measured against the core's
    context ops and against one process."""
    from placement_edu.runtime.axes.context_config import ContextRun
    from placement_edu.runtime.axes.context_launch import run_context

    c = mesh.degree("context")
    expect(
        "context" in strategy.axes,
        f"a run on a context axis executes one attention layer of a strategy with a context "
        f"axis ({', '.join(CONTEXT_STRATEGIES)}); {strategy.name} has none: give one of those",
    )
    refuse_step_options(args, "a context axis", "one attention layer")
    expect(
        all(n == 1 for axis, n in mesh if axis != "context"),
        f"a run on a context axis executes one attention layer on that axis alone; give --mesh "
        f"data=1,context={c} (got {mesh})",
    )
    expect(args.fault is None, "a run on a context axis injects no fault; drop --fault")
    job = ContextRun(strategy.context_attention, c)
    job.validate()
    return launched(
        lambda: run_context(job, args.timeout),
        lambda result: json.dumps(result.to_dict(), indent=2) if args.json else str(result),
    )


def _run_expert(args: argparse.Namespace, strategy: Strategy, mesh: Mesh) -> int:
    """A mesh with an expert axis: one mixture-of-experts layer (top-2, 4 experts) on its d·e
    ranks (``runtime.expert_layer``), measured against the core's ops and against one process,
    healthy or with one of SPEC §5's expert faults; a strategy the expert axis refuses
    (``experts.check_expert_axis``) refused before any rank starts."""
    from placement_edu.experts import check_expert_axis
    from placement_edu.runtime.axes.expert_measure import launch_expert_layer
    from placement_edu.runtime.axes.expert_run import ExpertRun

    d, e = mesh.degree("data"), mesh.degree("expert")
    refuse_step_options(args, "an expert axis", "one mixture-of-experts layer")
    expect(
        all(n == 1 for axis, n in mesh if axis not in ("data", "expert")),
        f"a run on an expert axis executes one mixture-of-experts layer on data × expert alone; "
        f"give --mesh data={d},expert={e} (got {mesh})",
    )
    faults = (FaultName.DROP_ROUTED_TOKENS, FaultName.SKIP_EXPERT_GRAD_REDUCE)
    expect(
        args.fault in (None, *faults),
        f"a run on an expert axis injects {' or '.join(faults)}, got --fault {args.fault}",
    )
    expect(
        args.fault != faults[1] or d > 1,
        f"--fault {faults[1]} needs a data axis: give --mesh data=2,expert={e}",
    )
    job = ExpertRun(
        e, top_k=2, data=d, drop=args.fault == faults[0], skip_expert_reduce=args.fault == faults[1]
    )
    check_expert_axis(job.spec(), mesh, strategy)
    job.validate()
    return launched(
        lambda: launch_expert_layer(job, args.timeout),
        lambda result: json.dumps(result.to_dict(), indent=2) if args.json else result.report(),
    )


#: The strategies a run on a context axis executes (those whose axes include it).
CONTEXT_STRATEGIES = tuple(n for n in COMPOSITIONS if "context" in get_strategy(n).axes)


def refuse_step_options(args: argparse.Namespace, axis: str, layer: str) -> None:
    """A layer run (context or expert axis) is one forward and backward of ``layer`` in float64:
    it has no steps, micro-batches or pipeline schedule to honour, and no other dtype. A flag it
    would ignore is refused in one line instead."""
    given = [
        f
        for f in options_given(args, STEP_OPTIONS)
        if not (f == "--dtype" and args.dtype == "float64")
    ]
    expect(
        not given,
        f"a run on {axis} executes {layer}, one forward and backward in float64; it cannot honour "
        f"{', '.join(given)}: leave {'it' if len(given) == 1 else 'them'} out",
    )
