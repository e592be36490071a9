"""Achieved FLOP/s on one device: a bf16 matmul, then a whole training step of the reference GPT-2
(``placement-edu calibrate --device cuda``).

Two numbers, from the kernel to the model:

- ``matmul_flops``: an n×n by n×n matmul, 2n³ FLOPs, at a few n -- the most a device's matmul
  units deliver here (the ceiling a step is measured against, below the datasheet's peak);
- ``step_seconds``: forward, backward and AdamW's step of ``reference_models``' GPT-2 (PyTorch
  eager, no compile), every parameter in ``dtype``; its model FLOPs are counted by the core
  (``placement_edu.mfu.step_flops``), never here.

Each timing runs warm-up calls first (kernels chosen, AdamW's state made), then the median of
``repeats`` timed calls, each between two ``synchronize`` so that the clock waits for the device.
The device is a parameter: the same code runs on a CPU (tests, tiny sizes) and on ``cuda``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from placement_edu.architectures import Architecture
from placement_edu.models import TransformerSpec
from placement_edu.runtime.measurement.reference_models import batch, build

WARMUP = 3


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(call: Callable[[], object], device: torch.device, repeats: int) -> float:
    """The median wall time of ``call`` over ``repeats`` timed calls, after ``WARMUP`` untimed
    ones; the device is synchronized before and after each, so the time is the device's work."""
    for _ in range(WARMUP):
        call()
    seconds = []
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        call()
        _synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def matmul_flops(
    device: torch.device, sizes: tuple[int, ...], repeats: int, dtype: torch.dtype
) -> dict[int, float]:
    """Achieved FLOP/s of an n×n @ n×n matmul (2n³ FLOPs) in ``dtype``, per n."""
    out = {}
    for n in sizes:
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        out[n] = 2 * n**3 / median_seconds(lambda: a @ b, device, repeats)
    return out


@dataclass(frozen=True)
class StepTiming:
    """One training step of ``model`` timed: the median seconds, and what was run."""

    model: TransformerSpec
    seconds: float
    dtype: str
    attention: str


def step_seconds(
    device: torch.device,
    model: TransformerSpec,
    repeats: int,
    dtype: torch.dtype,
    attention: str = "sdpa",
) -> StepTiming:
    """The median seconds of one training step -- forward, backward, AdamW's step, zeroed
    gradients -- of the reference GPT-2 of ``model``'s shape (``mfu.step_model``), its position
    table ``model.seq`` rows so that its Ψ is ``model.psi``, every parameter in ``dtype``."""
    arch = Architecture(
        "gpt2",
        model.layers,
        model.hidden,
        model.heads,
        model.ffn,
        model.vocab,
        positions=model.seq,
        name="calibrate",
    )
    assert arch.psi == model.psi, (arch.psi, model.psi)  # one model, counted once
    net = build(arch, attention).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    ids, labels = (t.to(device) for t in batch(arch, model.micro_batch, model.seq))

    def train_step() -> None:
        net(ids, labels).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    seconds = median_seconds(train_step, device, repeats)
    return StepTiming(model, seconds, str(dtype).removeprefix("torch."), attention)
