"""Exercises of the notebook "Offloaded: model state in host memory, moved over the host link"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.exercises.derived import model_state_gb
from placement_edu.report import analyze
from placement_edu.schedule import HOST_TRANSFERS
from placement_edu.timing import HARDWARE, op_time
from placement_edu.units import GB


def host_link_gb(strategy: str, psi: float, n: int) -> Fraction:
    """Host-link bytes per device per step (``Schedule.host_link_bytes``), in GB."""
    return Fraction(analyze(strategy, psi, n).schedule.host_link_bytes) / GB


def host_link_seconds(strategy: str, psi: float, n: int, hardware: str = "h100-nvlink-ib") -> float:
    """Seconds per step one device spends on the host link: Σ op_time of its h2d and d2h
    transfers."""
    link = HARDWARE[hardware].host_link
    assert link is not None, f"{hardware} has no host link"  # every preset names one
    return sum(
        (
            op_time(o, link)
            for o in analyze(strategy, psi, n).schedule.per_step
            if o.op in HOST_TRANSFERS
        ),
        0.0,
    )


EXERCISES = (
    Exercise(
        "offloaded-host-link-gb",
        "`zero2_offload` (ZeRO-Offload), Ψ = 7.5e9, N = 64, `mixed_adam`: how many GB (1e9 "
        "bytes) cross the host link of **one** device per step, both directions together?",
        lambda: host_link_gb("zero2_offload", 7.5e9, 64),
        "GB (1e9 bytes)",
        "The fp16 gradient slice goes down (2Ψ/N = 0.234 GB) and the updated fp16 parameter slice "
        "comes up (2Ψ/N): 4Ψ/N = 0.469 GB per device per step (SPEC §7). Its own total: these "
        "bytes cross PCIe, not the network, so they are not ring bytes.",
        mistakes=(
            (
                0,
                "0 is what a ring-bytes column shows: host transfers are not network traffic, so "
                "they need their own total.",
            ),
            (
                Fraction(234375, 10**6),
                "that is one direction: the gradient slice goes down AND the "
                "updated parameter slice comes back up.",
            ),
            (30, "that moves the whole fp16 P and G: each device moves only its own 1/N slice."),
        ),
        hint="2Ψ/N down + 2Ψ/N up.",
        devices=64,
    ),
    Exercise(
        "offloaded-zero3-over-zero2",
        "Same Ψ and N: how many times `zero2_offload`'s host-link bytes does `zero3_offload` "
        "move per step?",
        lambda: host_link_gb("zero3_offload", 7.5e9, 64) / host_link_gb("zero2_offload", 7.5e9, 64),
        "×",
        "zero3_offload keeps the parameter slice in host memory too, so it streams it up before "
        "the forward gather and again before the backward gather (2 × 2Ψ/N), and sends the "
        "gradient slice down (2Ψ/N): 6Ψ/N against 4Ψ/N, 1.5×. (The updated parameters stay on the "
        "host: no upload after the step.)",
        mistakes=(
            (1, "zero3_offload uploads the parameter slice before each of its two gathers."),
            (
                2,
                "the updated parameters stay in host memory: zero3_offload has no "
                "upload after the step.",
            ),
        ),
        hint="count the h2d and d2h entries of each schedule.",
    ),
    Exercise(
        "offloaded-device-model-state-gb",
        "`zero2_offload`, Ψ = 7.5e9, N = 64, `mixed_adam`: how many GB of model state "
        "(persistent P + G + O) stay on each device?",
        lambda: model_state_gb("zero2_offload", 7.5e9, 64),
        "GB (1e9 bytes)",
        "Only the fp16 parameters, 2Ψ = 15 GB, replicated: G and O live in host memory (1.64 GB of "
        "host memory per device). zero2 without offload keeps 16.64 GB; the saving is the 1.64 GB "
        "of sharded G and O, small at N = 64, large at small N.",
        mistakes=(
            (
                Fraction(16640625, 10**6),
                "that is zero2 without offload: G and O are on the host here.",
            ),
            (
                0,
                "the fp16 parameters stay on the device (P is R): only "
                "zero3_offload moves them too.",
            ),
        ),
        hint="which states are OFF?",
        devices=64,
    ),
    Exercise(
        "offloaded-pcie-seconds",
        "Ψ = 70e9 on N = 8 H100s with `zero2_offload`, PCIe 5.0 at 50 GB/s each way, 10 µs "
        "per transfer (the `h100-nvlink-ib` preset): how many seconds per step does one "
        "device spend on its host link (within 1%)?",
        lambda: host_link_seconds("zero2_offload", 70e9, 8),
        "s",
        "4Ψ/N = 35 GB at 50 GB/s: 0.7 s per step, on every device at once. "
        "Unless it overlaps backward (DeepSpeed pipelines it per bucket), that is 0.7 s added to a "
        "step whose compute is 34.79 s at 32,768 tokens per device (6Ψ per token at 40% of an "
        "H100's peak, as the notebook's cell prints): 2%, more with fewer tokens; and the CPU's "
        "Adam over 8.75e9 parameters per GPU usually takes longer still.",
        mistakes=((0.35, "that prices one direction: 2Ψ/N down and 2Ψ/N up."),),
        hint="host-link bytes / 50e9 B/s.",
        tolerance=1e-2,
        devices=8,
    ),
)
