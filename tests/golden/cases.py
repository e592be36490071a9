"""The golden-figures grid: what the package prints today for a fixed set of inputs.

Each case is a name and a function returning text -- a CLI command's output (``table``, ``check``,
``plan``, ``estimate``, with ``--json`` where it exists, so every byte and every op is in it) or a
Python API call's JSON (concrete models the CLI cannot describe, every fault of the checker, step
times). ``figures.json`` beside this file holds the outputs as literals, written once by
``python -m tests.golden.cases --write``; ``tests/test_golden_figures.py`` recomputes each case and
compares it with its literal. A refactor must leave every figure as it was; a change of a figure on
purpose rewrites the file in the same commit, with the reason in the commit message.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path
from typing import Callable

GOLDEN = Path(__file__).with_name("figures.json")

#: Abstract Ψ, a small transformer and a 7B-like transformer, as the CLI reads them.
PSI = ["--params", "7.5e9"]
SMALL = ["--layers", "4", "--hidden", "256", "--heads", "8", "--seq", "128", "--vocab", "1000"]
SEVEN_B = [
    "--layers",
    "32",
    "--hidden",
    "4096",
    "--heads",
    "32",
    "--seq",
    "4096",
    "--vocab",
    "32000",
]
ONE_AXIS = "dp,zero1,zero1_allreduce,zero2,zero3,fsdp,fsdp_grad_op,zero2_offload,zero3_offload"
PRECISIONS = ("mixed_adam", "fp32_adam", "mixed_adam_fp32_accum", "2/6/12/4")


def cli(*argv: str) -> str:
    """What ``placement-edu ARGV`` prints, its stderr and its exit status, as one text."""
    from placement_edu.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return f"exit {code}\n{out.getvalue()}" + (
        f"stderr:\n{err.getvalue()}" if err.getvalue() else ""
    )


def _cli_cases() -> dict[str, Callable[[], str]]:
    cases: dict[str, Callable[[], str]] = {}

    def add(*argv: str) -> None:
        cases["cli " + " ".join(argv)] = lambda: cli(*argv)

    for devices in ("8", "64"):
        for precision in PRECISIONS:
            add(
                "table",
                *PSI,
                "--devices",
                devices,
                "--strategies",
                ONE_AXIS,
                "--precision",
                precision,
                "--json",
            )
    add("table", *PSI, "--devices", "64")  # the README's text table
    for model in (SMALL, SEVEN_B):
        for recompute in ("none", "selective", "full"):
            add(
                "table",
                *model,
                "--devices",
                "8",
                "--strategies",
                ONE_AXIS,
                "--recompute",
                recompute,
                "--micro-batch",
                "2",
                "--json",
            )
    for strategies, mesh in (
        ("tp", "tensor=4"),
        ("pp", "pipeline=4"),
        ("dp×tp", "data=2,tensor=4"),
        ("dp×pp", "data=2,pipeline=4"),
        ("zero1×tp×pp", "data=2,tensor=2,pipeline=2"),
        ("zero3×tp", "data=4,tensor=2"),
        ("hsdp", "replica=2,data=4"),
    ):
        devices = str(math.prod(int(part.split("=")[1]) for part in mesh.split(",")))
        for model in (SMALL, SEVEN_B):
            add(
                "table",
                *model,
                "--devices",
                devices,
                "--strategies",
                strategies,
                "--mesh",
                mesh,
                "--json",
            )
        add(
            "table",
            *SEVEN_B,
            "--devices",
            devices,
            "--strategies",
            strategies,
            "--mesh",
            mesh,
            "--micro-batches",
            "8",
            "--sequence-parallel",
            "--recompute",
            "selective",
            "--json",
        )
    add(
        "table",
        *SEVEN_B,
        "--devices",
        "8",
        "--strategies",
        "pp",
        "--mesh",
        "pipeline=8",
        "--micro-batches",
        "1000000",
        "--json",
    )
    for strategy in (
        "dp",
        "zero1",
        "zero1_allreduce",
        "zero2",
        "zero3",
        "fsdp_grad_op",
        "zero2_offload",
        "tp",
        "pp",
        "dp×tp",
        "zero1×tp×pp",
        "zero3×tp",
        "hsdp",
    ):
        add("check", strategy, "--json")
    for strategy, fault in (
        ("dp", "skip-grad-reduce"),
        ("dp", "double-scale"),
        ("zero1", "skip-param-sync"),
        ("zero2", "skip-param-sync"),
        ("dp", "unsynced-init"),
        ("zero3", "stale-gather"),
        ("zero3", "skip-grad-reduce"),
        ("zero3×tp", "skip-grad-reduce"),
        ("dp×pp", "skip-grad-reduce"),
        ("zero1×tp×pp", "skip-param-sync"),
        ("zero3", "skip-param-sync"),
    ):  # the last one is refused
        add("check", strategy, "--fault", fault)
    add("plan", "--params", "70e9", "--devices", "64", "--memory-gb", "80", "--json")
    add(
        "plan",
        *SEVEN_B,
        "--devices",
        "16",
        "--memory-gb",
        "40",
        "--hardware",
        "a100-nvlink-ib",
        "--json",
    )
    add(
        "estimate",
        "--convention",
        "deepspeed",
        "--params",
        "2.851e9",
        "--gpus-per-node",
        "8",
        "--nodes",
        "1",
    )
    add(
        "estimate",
        "--convention",
        "deepspeed",
        "--params",
        "2.851e9",
        "--gpus-per-node",
        "8",
        "--nodes",
        "4",
        "--stage",
        "3",
        "--largest-layer",
        "2e8",
    )
    add("estimate", "--convention", "accelerate", "--params", "7e9")
    add("estimate", "--convention", "megatron", *SEVEN_B)
    return cases


def _api_cases() -> dict[str, Callable[[], str]]:
    """Concrete models (real tensors, each sharding rule), every fault, step times."""
    cases: dict[str, Callable[[], str]] = {}

    def concrete(
        strategy: str, widths: tuple[int, ...], rule: str, units: str, mesh: str, rank: int
    ) -> str:
        from placement_edu import analyze
        from placement_edu.implementations import mlp_model

        return json.dumps(
            analyze(
                strategy,
                mlp_model(widths, rule, units),
                mesh=mesh,
                precision="fp64_adam",
                rank=rank,
            ).to_dict(),
            sort_keys=True,
        )

    for strategy in ("dp", "zero1", "zero2", "zero3", "fsdp_grad_op", "zero3_offload"):
        for rule, units in (("zero", "model"), ("fsdp2", "layer"), ("greedy", "model")):
            for rank in (0, 2):
                cases[f"api concrete {strategy} {rule} {units} rank {rank}"] = (
                    lambda s=strategy, r=rule, u=units, k=rank: concrete(
                        s, (7, 5, 3), r, u, "data=3", k
                    )
                )

    def checked(strategy: str, fault: str | None) -> str:
        from placement_edu import check

        result = check(strategy, fault=fault)
        return str(result)

    from placement_edu.faults import applicable_faults
    from placement_edu.strategies import COMPOSITIONS, STRATEGIES, example_mesh

    for name, strategy in {**STRATEGIES, **COMPOSITIONS}.items():
        for fault in (None, *applicable_faults(strategy, example_mesh(strategy))):
            cases[f"api check {name} {fault}"] = lambda s=name, f=fault: checked(s, f)

    def timed(strategy: str, mesh: str, hardware: str) -> str:
        from placement_edu.models import TransformerSpec
        from placement_edu.timing import step_time

        model = TransformerSpec(
            layers=32, hidden=4096, heads=32, seq=4096, vocab=32000, micro_batch=1
        )
        return repr(step_time(strategy, model, mesh, "mixed_adam", hardware))

    for strategy, mesh in (
        ("dp", "data=64"),
        ("zero3", "data=64"),
        ("zero1×tp×pp", "data=4,tensor=8,pipeline=2"),
        ("hsdp", "replica=8,data=8"),
        ("zero2_offload", "data=8"),
    ):
        for hardware in ("h100-nvlink-ib", "a100-nvlink"):
            cases[f"api step_time {strategy} {mesh} {hardware}"] = (
                lambda s=strategy, m=mesh, h=hardware: timed(s, m, h)
            )
    return cases


def all_cases() -> dict[str, Callable[[], str]]:
    return {**_cli_cases(), **_api_cases()}


def main() -> int:
    if sys.argv[1:] != ["--write"]:
        print(
            "usage: python -m tests.golden.cases --write   (rewrites figures.json from this tree)"
        )
        return 2
    figures = {name: case() for name, case in all_cases().items()}
    GOLDEN.write_text(json.dumps(figures, indent=0, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {len(figures)} cases to {GOLDEN} ({GOLDEN.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
