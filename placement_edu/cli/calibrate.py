"""``placement-edu calibrate [--world-sizes 2,4] [--json]``: time all-reduce, all-gather,
reduce-scatter, send and a host copy on gloo over a range of sizes, fit SPEC §9's α and W, and print
the ``this_machine`` hardware line to paste into ``placement_edu.timing.HARDWARE``.

``--device cuda`` times compute on this machine's GPU instead: a bf16 matmul at a few sizes, then a
training step of the reference GPT-2 (``--layers``, ``--hidden``, ``--seq``, ``--micro-batch``), and
prints a ``this_gpu`` line at the step's achieved FLOP/s, with its MFU against the GPU's peak
(``placement_edu.mfu``; the measuring: ``placement_edu.runtime.calibration.gpu_calibrate``).

Each world size is one launch of N ranks (as a run of N is); every point is the median of
``--repeats`` timed calls after warm-up ones, each counting its slowest rank. The fit is the core's
(``placement_edu.timing.fit``); the measuring is the runtime's
(``placement_edu.runtime.calibration.calibrate``). Only the handler imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import date
from typing import TYPE_CHECKING

from placement_edu.arguments import add_timeout_flag, command, flag_type
from placement_edu.cli.run import ends_as_a_run_does, launched
from placement_edu.course import require
from placement_edu.errors import (
    MAX_LOCAL_WORLD_SIZE,
    PlacementError,
    expect,
    read_int,
)
from placement_edu.schedule import OpKind
from placement_edu.timing import PEAK_FLOPS

if TYPE_CHECKING:  # the runtime imports torch: only the handler loads it
    from placement_edu.models import TransformerSpec
    from placement_edu.runtime.calibration.calibrate import CalibrationResult
    from placement_edu.timing import Hardware
    from placement_edu.timing.fit import LinkFit

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
    p = command(
        sub, "calibrate", "time collectives on this machine and fit α and W (SPEC §9)", __doc__
    )
    p.add_argument(
        "--world-sizes",
        type=flag_type(_world_sizes),
        default=(2, 4),
        help="comma-separated ranks per launch (default 2,4)",
    )
    for flag, end, default, size in (
        ("--min-size", "smallest", 10, "1 KiB"),
        ("--max-size", "largest", 22, "4 MiB"),
    ):
        p.add_argument(
            flag,
            type=flag_type(_log2_bytes),
            default=default,
            help=f"{end} payload, log2 of bytes (default {default}: {size})",
        )
    p.add_argument(
        "--repeats",
        type=flag_type(read_int, "repeats", MAX_REPEATS),
        default=10,
        help="timed calls per point (default 10; the median is fitted)",
    )
    add_timeout_flag(p, "the calibration is ended")
    p.add_argument(
        "--json", action="store_true", help="print JSON (every repeat, the fits, the hardware line)"
    )
    gpu = p.add_argument_group("--device cuda: a GPU's compute (a GPT-2 step; default GPT-2 1.5B)")
    gpu.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cpu: gloo's collectives (default); cuda: a bf16 matmul and a GPT-2 training step",
    )
    for flag, default, limit in (
        ("--layers", 48, 1000),
        ("--hidden", 1600, 65536),
        ("--seq", 1024, 131072),
        ("--micro-batch", 4, 4096),
    ):
        gpu.add_argument(
            flag,
            type=flag_type(read_int, flag[2:], limit),
            default=default,
            help=f"(default {default})",
        )
    gpu.add_argument(
        "--heads", type=flag_type(read_int, "heads", 1024), help="(default hidden / 64)"
    )
    gpu.add_argument(
        "--gpu",
        choices=sorted(PEAK_FLOPS),
        help="the GPU whose preset gives the peak and the links (default: from the device name)",
    )
    gpu.add_argument(
        "--peak-tflops",
        type=flag_type(read_int, "TFLOP/s", 100000, "989"),
        help="the device's dense bf16 peak (default: the --gpu's, timing.PEAK_FLOPS)",
    )
    p.set_defaults(handler=ends_as_a_run_does(_calibrate))  # (its signals: as run's)


def _calibrate(args: argparse.Namespace) -> int:
    require("torch", "calibrate")
    if args.device == "cuda":
        return _calibrate_cuda(args)
    from placement_edu.runtime.calibration.calibrate import calibrate

    if args.min_size >= args.max_size:  # (refused before any rank starts, not after its work)
        how = "above" if args.min_size > args.max_size else "equal to"
        raise PlacementError(
            f"--min-size {args.min_size} is {how} --max-size {args.max_size}; the fit of α and W "
            "needs at least two payload sizes"
        )
    sizes = tuple(2**k for k in range(args.min_size, args.max_size + 1))
    status = launched(
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
    if status == 0 and not args.json:  # the GEMM curve of this host's CPU (issue 27, item 3)
        from placement_edu.runtime.processes.launcher import phase

        with phase(CURVE):
            print("\n" + "\n".join(curve_lines(_cpu_curve(args.repeats), CURVE_WHAT)))
    return status


#: The n×n matmuls the CPU's GEMM curve is fitted from (float64, in the calling process).
CPU_CURVE_SIZES = (32, 64, 128, 256, 512)
CURVE_WHAT = "float64 on one CPU thread"
#: Where calibrate is, as a signal's line says, while it times the curve after its run.
CURVE = f"after the run ended, timing the GEMM curve, {CURVE_WHAT} (the run's report printed)"


def _cpu_curve(repeats: int) -> dict[int, float]:
    """{n: FLOP/s} of ``CPU_CURVE_SIZES``' matmuls on one thread of this process."""
    import torch

    from placement_edu.runtime.calibration.gpu_calibrate import matmul_flops

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core's curve: threads that share it measure contention
    try:
        return matmul_flops(torch.device("cpu"), CPU_CURVE_SIZES, repeats, torch.float64)
    finally:
        torch.set_num_threads(threads)


def curve_lines(matmul: dict[int, float], what: str) -> list[str]:
    """The GEMM curve ``gemm.curve_of`` fits to ``matmul`` ({n: FLOP/s of an n×n @ n×n call}),
    point by point, and as the ``gemm_curve`` a Hardware carries (factor 1.0: the fastest)."""
    from placement_edu.gemm import curve_of

    curve = curve_of({2 * n**3: rate for n, rate in matmul.items()})
    lines = [
        f"GEMM curve, {what}: n×n @ n×n, one call of 2n³ FLOPs; "
        "factor = its FLOP/s ÷ the fastest's:"
    ]
    lines += [
        f"  n = {n}: {size:.4g} FLOPs, {rate / 1e9:.4g}e9 FLOP/s, factor {factor:.3f}"
        for (n, rate), (size, factor) in zip(sorted(matmul.items()), curve)
    ]
    points = ", ".join(f"({size:.4g}, {factor:.3f})" for size, factor in curve)
    lines.append(f"gemm_curve=({points},)")
    return lines


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
    from placement_edu.timing.fit import this_machine

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
    from placement_edu.timing.fit import hardware_line

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
        pooled = fit.host if s.op == OpKind.H2D else fit.pooled
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
    from placement_edu.timing.fit import hardware_line

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


# --- --device cuda: a GPU's compute ---------------------------------------------------------------
MATMUL_SIZES = (2048, 4096, 8192)


def _calibrate_cuda(args: argparse.Namespace) -> int:
    """A bf16 matmul and a GPT-2 step on ``cuda:0``; refused in one line without CUDA."""
    import torch

    from placement_edu.mfu import step_model

    expect(not args.json, "--device cuda prints its report as text; --json is the collectives'")
    expect(
        torch.cuda.is_available(),
        f"--device cuda: this machine has no CUDA device (torch {torch.__version__}, "
        f"built with CUDA {torch.version.cuda or 'no'}); without --device, calibrate times "
        "gloo's collectives on the CPU",
    )
    heads = args.heads or args.hidden // 64
    expect(
        heads >= 1 and args.hidden % heads == 0,
        f"--hidden {args.hidden} does not divide into {heads} heads; give --heads",
    )
    model = step_model(args.layers, args.hidden, heads, args.seq, args.micro_batch)
    name = torch.cuda.get_device_name(0)
    gpu, peak, peak_from = peak_of(name, args.gpu, args.peak_tflops)
    from placement_edu.runtime.calibration.gpu_calibrate import matmul_flops, step_seconds

    device = torch.device("cuda", 0)
    matmul = matmul_flops(device, MATMUL_SIZES, args.repeats, torch.bfloat16)
    step = step_seconds(device, model, args.repeats, torch.bfloat16)
    memory = torch.cuda.get_device_properties(device).total_memory
    print(gpu_report(name, matmul, step.model, step.seconds, gpu, peak, peak_from, memory))
    return 0


def peak_of(device_name: str, gpu: str | None, peak_tflops: int | None) -> tuple[str, float, str]:
    """(GPU, peak FLOP/s, where the peak came from): ``--gpu`` or the GPU the device name names;
    ``--peak-tflops`` or that GPU's ``timing.PEAK_FLOPS``."""
    from placement_edu.mfu import gpu_of

    gpu = gpu or gpu_of(device_name)
    expect(
        gpu is not None,
        f"--device cuda: {device_name!r} is none of the presets' GPUs ({', '.join(PEAK_FLOPS)}, "
        "SXM); give --gpu (whose links the line copies) and --peak-tflops (its dense bf16 peak)",
    )
    assert gpu is not None
    if peak_tflops is not None:
        return gpu, peak_tflops * 1e12, f"--peak-tflops {peak_tflops}"
    return gpu, PEAK_FLOPS[gpu], f"the {gpu}'s dense bf16 peak, timing.PEAK_FLOPS"


def gpu_report(
    device_name: str,
    matmul: dict[int, float],
    model: TransformerSpec,
    seconds: float,
    gpu: str,
    peak: float,
    peak_from: str,
    memory_bytes: int,
) -> str:
    """The matmul's FLOP/s per size, the step's achieved FLOP/s and MFU, and the ``this_gpu``
    hardware line (``mfu.measured_hardware``)."""
    from placement_edu.mfu import measured_hardware, step_flops, step_flops_6psi
    from placement_edu.timing.fit import hardware_line

    flops = step_flops(model)
    what = (
        f"a training step (forward, backward, AdamW) of the reference GPT-2, L={model.layers} "
        f"h={model.hidden} a={model.heads} s={model.seq} b={model.micro_batch} "
        f"(Ψ = {model.psi:,}), bf16 parameters, PyTorch eager (sdpa attention), on {device_name}"
    )
    hw = measured_hardware(gpu, flops / seconds, memory_bytes, peak, peak_from, what)
    lines = [f"bf16 matmul on {device_name} (n×n @ n×n, 2n³ FLOPs; MFU against {peak_from}):"]
    lines += [f"  n = {n}: {f / 1e12:.4g}e12 FLOP/s ({f / peak:.1%})" for n, f in matmul.items()]
    lines += [
        f"Step: {what}",
        f"  {flops:,} model FLOPs in {seconds * 1e3:.4g} ms: {flops / seconds / 1e12:.4g}e12 "
        f"FLOP/s, MFU {flops / seconds / peak:.1%}",
        f"  6Ψ·tokens alone (issue 23's count, ≈ 190e12 for GPT-2 1.5B on an H200): "
        f"{step_flops_6psi(model) / seconds / 1e12:.4g}e12 FLOP/s",
        *curve_lines(matmul, f"bf16 on {device_name}"),
        "",
        "The this_gpu preset (paste into placement_edu.timing.HARDWARE):",
        hardware_line(hw),
    ]
    return "\n".join(lines)
