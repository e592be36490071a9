"""The walk of a command's arguments (issue 41's "Done when"): which package files a command's
arguments cross on their way in, and whether any value is resolved twice.

    .venv/bin/python benchmarks/walk_arguments.py            # the three walks
    .venv/bin/python benchmarks/walk_arguments.py --calls    # and every function entered
    .venv/bin/python benchmarks/walk_arguments.py --more     # and plan's, check's, table's

Three walks, each traced with ``sys.setprofile`` from ``placement_edu.cli.main(argv)``:

- ``placement-edu run zero3 --world-size 2 --mesh data=2 --steps 1``: the arguments into the
  runtime, up to the point where the run's jobs leave this process for the agent that starts the
  ranks (``launcher._launch_from_agent``, stubbed here: no process is started). The ranks receive
  the ``RunConfig`` whole, its ``Setting`` already resolved (``RunConfig.setting``).
- ``placement-edu time ...``: the arguments into pricing, to the printed report.
- ``placement-edu fit --model gpt2 ...``: the arguments into the derivation of a real model's step
  (its profile shipped, so nothing is measured), to the printed report: the flags are resolved at
  its door (``cli/fit.py``'s ``_door``, ``setting.resolve``) and read as resolved below it.

Each walk prints the files entered in order (a function of the file called; module bodies run by
an import are not counted), then each resolver called on a value typed by the user (text, a
number, a mapping: ``RESOLVERS``), and the values resolved more than once. The issue's target: at
most 12 files each, no value resolved twice. Exit status 0 whether or not the targets hold.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from placement_edu.cli import main  # noqa: E402

PACKAGE = ROOT / "placement_edu"
TARGET_FILES = 12
#: Functions that turn what a user typed into the core's types: (file, function, argument).
RESOLVERS = {
    ("strategies.py", "get_strategy"): "strategy",
    ("mesh.py", "as_mesh"): "mesh",
    ("mesh.py", "parse"): "text",
    ("precision.py", "get_precision"): "precision",
    ("timing/hardware.py", "get_hardware"): "hardware",
    ("models/shapes.py", "as_model"): "model",
    ("architectures.py", "get_architecture"): "name",
    ("pricing.py", "configured_strategy"): "name",
    ("pricing.py", "parsed_schedule"): "text",
    ("setting.py", "canonical"): "value",
    ("peak.py", "read_recompute"): "text",
    ("fsdp_storage.py", "fsdp_precision"): "precision",
}
RUN = ["run", "zero3", "--world-size", "2", "--mesh", "data=2", "--steps", "1"]
TIME = [
    "time",
    *("--layers", "32", "--hidden", "4096", "--heads", "32", "--seq", "4096"),
    *("--vocab", "32000", "--global-batch", "512", "--strategy", "zero1"),
    *("--mesh", "data=8,tensor=4,pipeline=2", "--recompute", "selective"),
]
#: fit's arguments into the derivation of a real model's step (its profile shipped: no torch run).
FIT = [
    *("fit", "--model", "gpt2", "--strategy", "fsdp2", "--devices", "8"),
    *("--precision", "fsdp2_bf16", "--attention", "sdpa", "--hardware", "h100-nvlink-ib"),
]

#: The other derivation commands (``--more``): each typed value resolved once there too.
MORE = [
    ["plan", "--params", "70e9", "--devices", "64"],
    ["check", "zero3", "--mesh", "data=4"],
    ["table", "--params", "7.5e9", "--devices", "8", "--mesh", "data=8"],
]


class Boundary(Exception):
    """Raised where the arguments leave this process (the run's jobs handed to the agent)."""


def raw(value: object) -> bool:
    """Whether ``value`` is as a user types or passes it (not yet a core type)."""
    return isinstance(value, (str, int, float, dict)) and not isinstance(value, bool)


Resolution = tuple[str, str, str, list[str]]


def stack(frame: FrameType | None) -> list[str]:
    """``file:function`` of each package frame from ``main`` down to ``frame``."""
    out = []
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if PACKAGE in path.parents:
            out.append(f"{path.relative_to(PACKAGE)}:{frame.f_code.co_name}")
        frame = frame.f_back
    return out[::-1]


def walk(argv: list[str]) -> tuple[list[str], list[Resolution]]:
    """(the package files entered, in order; each resolver call on a raw value: (file,
    function, value, the stack that called it)) while ``main(argv)`` runs."""
    files: list[str] = []
    resolved: list[Resolution] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        path = Path(code.co_filename)
        if code.co_name == "<module>" or PACKAGE not in path.parents:
            return
        name = str(path.relative_to(PACKAGE))
        if name not in files:
            files.append(name)
        argument = RESOLVERS.get((name, code.co_name))
        if argument is not None:
            value = frame.f_locals.get(argument)
            frames = stack(frame)
            inner = any(tuple(f.split(":")) in RESOLVERS for f in frames[:-1])
            if raw(value) and not inner:  # (as_mesh's Mesh.parse is one resolution, not two)
                resolved.append((name, code.co_name, repr(value), frames))

    from placement_edu.runtime.processes import launcher

    def handed_over(*args: object, **kwargs: object) -> list:
        raise Boundary

    real = launcher._launch_from_agent
    launcher._launch_from_agent = handed_over  # type: ignore[assignment]
    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(argv)
    except Boundary:
        pass
    finally:
        sys.setprofile(None)
        launcher._launch_from_agent = real  # type: ignore[assignment]
    return files, resolved


def show(label: str, argv: list[str], calls: bool) -> None:
    files, resolved = walk(argv)
    crossed: list[str] = []  # the files on the way from main to each resolution
    for *_, frames in resolved:
        for f in frames:
            if f.split(":")[0] not in crossed:
                crossed.append(f.split(":")[0])
    print(f"placement-edu {' '.join(argv)}")
    print(f"  {label}")
    print(f"  files the typed values cross to where they are resolved: {len(crossed)} ", end="")
    print(f"(target <= {TARGET_FILES}): {', '.join(crossed)}")
    print(f"  package files entered in all (the derivations included): {len(files)}")
    if calls:
        print("    " + ", ".join(files))
    values = [v for _, _, v, _ in resolved]
    twice = sorted({v for v in values if values.count(v) > 1})
    print(f"  values resolved from what was typed: {len(resolved)}")
    for name, function, value, frames in resolved:
        print(f"    {name}:{function}({value})" + (f"  <- {' > '.join(frames)}" if calls else ""))
    print(f"  resolved twice: {len(twice)} (target 0){': ' if twice else ''}{', '.join(twice)}")


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", action="store_true", help="list every resolver call")
    parser.add_argument("--more", action="store_true", help="walk plan, check and table too")
    args = parser.parse_args()
    show("into the runtime (to the ranks' launch)", RUN, args.calls)
    show("into pricing (to the printed report)", TIME, args.calls)
    show("into the derivation of a real model's step (to the printed report)", FIT, args.calls)
    for argv in MORE if args.more else []:
        show("into the derivations", argv, args.calls)


if __name__ == "__main__":
    main_()
