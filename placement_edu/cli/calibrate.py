"""``placement-edu calibrate [--world-sizes 2,4] [--json]``: time all-reduce, all-gather,
reduce-scatter, send and a host copy on gloo over a range of sizes, fit SPEC §9's α and W, and print
the ``this_machine`` hardware line to paste into ``placement_edu.timing.HARDWARE``.

Each world size is one launch of N ranks (as a run of N is); every point is the median of
``--repeats`` timed calls after warm-up ones, each counting its slowest rank. The fit is the core's
(``placement_edu.timing_fit``); the measuring is the runtime's
(``placement_edu.runtime.calibrate``). Only the handler imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import date
from typing import TYPE_CHECKING

from placement_edu.arguments import flag_type
from placement_edu.cli.run import launched
from placement_edu.errors import MAX_LOCAL_WORLD_SIZE, PlacementError, read_int, read_seconds

if TYPE_CHECKING:  # the runtime imports torch: only the handler loads it
    from placement_edu.runtime.calibrate import CalibrationResult
    from placement_edu.timing import Hardware
    from placement_edu.timing_fit import LinkFit

MAX_REPEATS = 1000


def _world_sizes(text: str) -> tuple[int, ...]:
    """ "2,4" -> (2, 4): each a whole number of ranks, 2 to MAX_LOCAL_WORLD_SIZE."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise PlacementError(f"{text!r} names no world size; give e.g. 2,4")
    return tuple(dict.fromkeys(read_int(p, "ranks", MAX_LOCAL_WORLD_SIZE, "2,4", 2) for p in parts))


def _log2_bytes(text: str) -> int:
    """A payload size as a power of two: "22" is 2^22 bytes (4 MiB)."""
    return read_int(text, "(log2 of bytes)", 30, "22", 6)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="time collectives on this machine and fit α and W (SPEC §9)",
        description=__doc__.splitlines()[0].replace("``", ""),
    )
    p.add_argument(
        "--world-sizes",
        type=flag_type(_world_sizes),
        default=(2, 4),
        help="comma-separated ranks per launch (default 2,4)",
    )
    p.add_argument(
        "--min-size",
        type=flag_type(_log2_bytes),
        default=10,
        help="smallest payload, log2 of bytes (default 10: 1 KiB)",
    )
    p.add_argument(
        "--max-size",
        type=flag_type(_log2_bytes),
        default=22,
        help="largest payload, log2 of bytes (default 22: 4 MiB)",
    )
    p.add_argument(
        "--repeats",
        type=flag_type(read_int, "repeats", MAX_REPEATS),
        default=10,
        help="timed calls per point (default 10; the median is fitted)",
    )
    p.add_argument(
        "--timeout",
        type=flag_type(read_seconds),
        default=60.0,
        help="seconds a collective may wait before the calibration is ended (default 60)",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (every repeat, the fits, the hardware line)"
    )
    p.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from placement_edu.runtime.calibrate import calibrate

    if args.min_size > args.max_size:
        raise PlacementError(f"--min-size {args.min_size} is above --max-size {args.max_size}")
    sizes = tuple(2**k for k in range(args.min_size, args.max_size + 1))
    return launched(
        lambda: calibrate(
            args.world_sizes,
            sizes,
            args.repeats,
            timeout_s=args.timeout,
            progress=sys.stderr.isatty(),
        ),
        lambda result: (
            json.dumps(as_dict(result), indent=2, ensure_ascii=False)
            if args.json
            else report(result)
        ),
        what="calibration",
    )


# --- presentation ------------------------------------------------------------------------------
def _memory_bytes() -> int:
    """This machine's memory (all ranks share it on a CPU-only machine)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _source(result: CalibrationResult) -> str:
    flops = result.flops()
    noise = _noise(result)
    return (
        f"fitted by `placement-edu calibrate` on this {os.cpu_count()}-core machine, "
        f"{date.today().isoformat()}: "
        f"gloo over loopback at N = {', '.join(map(str, result.world_sizes))}, payloads "
        f"{_size(min(s.payload_bytes for s in result.samples))}-"
        f"{_size(max(s.payload_bytes for s in result.samples))}, "
        f"median of {result.repeats} repeats; spread (max-min)/median over repeats: "
        f"median {noise[0]:.0%}, "
        f"worst {noise[1]:.0%}; flops: {flops.what} on {flops.group} ranks at once"
    )


def _noise(result: CalibrationResult) -> tuple[float, float]:
    """(median, max) over the points of (max − min) / median of the repeats."""
    spreads = [(hi - lo) / mid for lo, mid, hi in (s.spread for s in result.samples)]
    return statistics.median(spreads), max(spreads)


def hardware(result: CalibrationResult) -> Hardware:
    """The fitted ``this_machine`` preset (``timing.Hardware``)."""
    from placement_edu.timing_fit import this_machine

    return this_machine(result.fit, result.flops().flops_per_s, _memory_bytes(), _source(result))


def _size(n: float) -> str:
    for unit, div in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n:g} B"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def _fit_line(name: str, fit: LinkFit) -> str:
    return (
        f"{name:16} α = {fit.alpha_s * 1e6:8.1f} µs per step   "
        f"W = {fit.bandwidth / 1e9:7.3f} GB/s   "
        f"rms relative error {fit.rms_relative_error:.0%} over {fit.points} points"
    )


def report(result: CalibrationResult) -> str:
    """Measured medians beside the fitted model, per op and size; the fits; the hardware line."""
    from placement_edu.timing_fit import hardware_line

    fit = result.fit
    lines = [
        f"Collectives on gloo, this machine ({os.cpu_count()} CPUs); µs; each point: median of "
        f"{result.repeats} repeats (min-max), slowest rank; fit: t = α·steps + bytes/W (SPEC §9)",
        f"{'op':15}{'N':>3}{'payload':>10}{'steps':>6}{'sent B':>10}"
        f"{'median':>10}{'min':>9}{'max':>10}"
        f"{'fit(op)':>10}{'fit(all)':>10}",
    ]
    for s in result.samples:
        lo, mid, hi = s.spread
        pooled = fit.host if s.op == "h2d" else fit.pooled
        lines.append(
            f"{s.op:15}{s.group:>3}{_size(s.payload_bytes):>10}{s.steps:>6}{int(s.sent_bytes):>10}"
            f"{_us(mid):>10}{_us(lo):>9}{_us(hi):>10}"
            f"{_us(fit.by_op[s.op].seconds(s.op, s.group, s.payload_bytes)):>10}"
            f"{_us(pooled.seconds(s.op, s.group, s.payload_bytes)) if pooled else '-':>10}"
        )
    lines.append("")
    lines.append("Fits (least squares of relative error):")
    lines += [_fit_line(op, f) for op, f in fit.by_op.items()]
    if fit.pooled is not None:
        lines.append(_fit_line("pooled (link)", fit.pooled))
    for n in result.world_sizes:
        at = result.fit_at(n)
        if at.pooled is not None:
            lines.append(_fit_line(f"pooled at N = {n}", at.pooled))
    noise = _noise(result)
    lines.append(
        f"Spread over repeats, (max-min)/median: median {noise[0]:.0%} of the points' medians, "
        f"worst {noise[1]:.0%} (a shared {os.cpu_count()}-core machine: other processes compete)"
    )
    lines.append("")
    lines.append(
        "Compute, every rank at once (achieved FLOP/s per rank; median (min-max) over repeats):"
    )
    for c in result.compute:
        lo, mid, hi = c.spread
        lines.append(
            f"  N = {c.group}: {c.what}: {mid / 1e9:.3g} GFLOP/s ({lo / 1e9:.3g}-{hi / 1e9:.3g})"
        )
    try:
        line = hardware_line(hardware(result))
    except PlacementError as error:
        line = f"(no hardware line: {error})"
    lines += ["", "The this_machine preset (paste into placement_edu.timing.HARDWARE):", line]
    return "\n".join(lines)


def as_dict(result: CalibrationResult) -> dict:
    """Every repeat, the fits and the hardware line, as JSON."""
    from placement_edu.timing_fit import hardware_line

    def fit_dict(f: LinkFit | None) -> dict[str, float] | None:
        return (
            None
            if f is None
            else {
                "alpha_s": f.alpha_s,
                "bandwidth": f.bandwidth,
                "points": f.points,
                "rms_relative_error": f.rms_relative_error,
            }
        )

    fit = result.fit
    try:
        line, why = hardware_line(hardware(result)), None
    except PlacementError as error:
        line, why = None, str(error)
    return {
        "units": {
            "time": "seconds",
            "size": "bytes",
            "bandwidth": "bytes per second",
            "flops": "FLOP/s",
        },
        "model": "t = alpha_s * steps + sent_bytes / bandwidth (SPEC §9)",
        "repeats": result.repeats,
        "world_sizes": list(result.world_sizes),
        "samples": [
            {
                "op": s.op,
                "world_size": s.group,
                "payload_bytes": s.payload_bytes,
                "steps": s.steps,
                "sent_bytes": s.sent_bytes,
                "median_s": s.median_s,
                "seconds": list(s.seconds),
                "fit_op_s": fit.by_op[s.op].seconds(s.op, s.group, s.payload_bytes),
            }
            for s in result.samples
        ],
        "fit": {
            "by_op": {op: fit_dict(f) for op, f in fit.by_op.items()},
            "pooled": fit_dict(fit.pooled),
            "host": fit_dict(fit.host),
            "by_world_size": {
                str(n): fit_dict(result.fit_at(n).pooled) for n in result.world_sizes
            },
        },
        "compute": [
            {
                "what": c.what,
                "world_size": c.group,
                "flops": c.flops,
                "flops_per_s": c.flops_per_s,
                "seconds": list(c.seconds),
            }
            for c in result.compute
        ],
        "noise": dict(zip(("median", "worst"), _noise(result))),
        "hardware_line": line,
        "hardware_error": why,
    }
