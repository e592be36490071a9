"""``placement-edu torch-ref IMPL --world-size N``: train a toy MLP with PyTorch's own
implementation (DDP, ZeroRedundancyOptimizer under DDP, FSDP2) on real processes, and print what
each rank held and sent beside what the core predicts, op by op and byte by byte.

Only the handler imports torch: building this parser stays torch-free.
"""

from __future__ import annotations

import argparse
import json
import sys

from placement_edu.arguments import add_timeout_flag, command, flag_type
from placement_edu.cli.run import ends_as_a_run_does, launched
from placement_edu.course import require
from placement_edu.errors import read_int
from placement_edu.implementations import (
    DEFAULT_MODEL,
    IMPLEMENTATIONS,
    TORCH_REF_PRECISIONS,
    TorchRefConfig,
    parse_model,
)

#: Ranks this machine can start (each is a process that imports torch: ~0.2 GiB).
MAX_WORLD_SIZE = 64


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "torch-ref",
        "PyTorch's own DDP / ZeroRedundancyOptimizer / FSDP2, measured "
        "against the core's prediction",
        __doc__,
    )
    p.add_argument(
        "impl",
        choices=IMPLEMENTATIONS,
        help="the implementation: "
        + "; ".join(f"{k}: {v.what}" for k, v in IMPLEMENTATIONS.items()),
    )
    p.add_argument(
        "--world-size",
        type=flag_type(read_int, "world size", MAX_WORLD_SIZE),
        default=4,
        help=f"ranks (2 to {MAX_WORLD_SIZE}; default %(default)s)",
    )
    p.add_argument(
        "--model",
        type=flag_type(_model),
        default=None,
        help="mlp:a,b,c,...: a float64 Tanh MLP of these widths, seed 0 "
        f"(default {DEFAULT_MODEL}); "
        "transformer: the one-block toy dtensor_tp trains (its default)",
    )
    p.add_argument(
        "--steps",
        type=flag_type(read_int, "steps", 1000),
        default=3,
        help="optimizer steps (default %(default)s)",
    )
    p.add_argument(
        "--precision",
        choices=TORCH_REF_PRECISIONS,
        default="fp64_adam",
        help="fp64_adam (default): float64 throughout; fsdp2_bf16: FSDP2's "
        "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over float32 shards; "
        "fsdp2_bf16_reduce_bf16: the same, gradients reduced in bf16 (fsdp2 implementations only)",
    )
    add_timeout_flag(p, "the run fails")
    p.add_argument(
        "--json", action="store_true", help="print JSON: measured and predicted per rank"
    )
    p.set_defaults(handler=ends_as_a_run_does(_torch_ref))  # (its signals: as run's)


def _model(text: str) -> str:
    parse_model(text)
    return text


def _torch_ref(args: argparse.Namespace) -> int:
    model = args.model or ("transformer" if args.impl == "dtensor_tp" else DEFAULT_MODEL)
    config = TorchRefConfig(args.impl, args.world_size, model, args.steps, precision=args.precision)
    config.validate()  # bad input: one line, exit 2, no processes
    require("torch", "torch-ref")
    from placement_edu.runtime.measurement.torch_ref_result import run

    return launched(
        lambda: run(config, timeout_s=args.timeout, progress=sys.stderr.isatty()),
        lambda result: json.dumps(result.to_dict(), indent=2) if args.json else str(result),
    )
