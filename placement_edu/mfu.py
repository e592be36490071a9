"""MFU: a measured step's achieved FLOP/s against its GPU's peak, and the ``Hardware`` it makes.

``placement-edu calibrate --device cuda`` times a training step of the reference GPT-2
(``runtime.gpu_calibrate``); this module, pure and without torch, turns those seconds into FLOP/s:

- ``step_model``    the ``TransformerSpec`` of the model timed (its Ψ is the reference GPT-2's, the
                    position table sized to the sequence timed)
- ``step_flops``    its model FLOPs per step, ``timing.model_flops_per_token`` × b·s (6Ψ + 12·L·h·s
                    per token, ``timing.FLOP_CONVENTION``: the one count of the package)
- ``step_flops_6psi``  the same without attention, 6Ψ·b·s (how issue 23 counted its H200's step)
- ``gpu_of``        which GPU of ``timing.PEAK_FLOPS`` a CUDA device name is (SXM parts only)
- ``measured_hardware``  the one-GPU ``Hardware`` of that step: achieved FLOP/s, device memory,
                    and the links of the matching preset (not measured: one GPU has no links)

Units: FLOPs, seconds, FLOP/s, bytes.
"""

from __future__ import annotations

from dataclasses import replace

from placement_edu.errors import expect
from placement_edu.models import TransformerSpec
from placement_edu.timing import FLOP_CONVENTION, HARDWARE, PEAK_FLOPS, Hardware
from placement_edu.timing import model_flops_per_token

#: GPT-2's vocabulary (openai-community/gpt2), the reference model's default.
GPT2_VOCAB = 50257


def step_model(
    layers: int, hidden: int, heads: int, seq: int, micro_batch: int, vocab: int = GPT2_VOCAB
) -> TransformerSpec:
    """The GPT-2 a step is timed on: ``TransformerSpec``'s Ψ counts a learned position table of
    ``seq`` rows, so the runtime builds its reference GPT-2 with ``positions = seq``."""
    return TransformerSpec(
        layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab, micro_batch=micro_batch
    )


def step_flops(model: TransformerSpec) -> int:
    """Model FLOPs of one training step of ``model``'s micro-batch: b·s tokens at
    ``timing.model_flops_per_token`` each (what MFU divides by the peak; the optimizer step's
    FLOPs are not counted)."""
    return model_flops_per_token(model) * model.micro_batch * model.seq


def step_flops_6psi(model: TransformerSpec) -> int:
    """6Ψ per token × b·s, attention left out: the count issue 23's ≈ 190e12 on an H200 uses
    (``timing.model_flops_per_token`` of Ψ alone), to compare a step with it."""
    return model_flops_per_token(model.psi) * model.micro_batch * model.seq


def gpu_of(device_name: str) -> str | None:
    """The GPU of ``timing.PEAK_FLOPS`` that ``torch.cuda.get_device_name`` names ("NVIDIA H200"
    -> "H200"), or None. The presets are SXM parts: a PCIe or NVL card has another peak (an H100
    PCIe: 756e12), so it matches none and ``--peak-tflops`` gives its peak."""
    if "PCIE" in device_name.upper() or "NVL" in device_name.upper().split():
        return None
    found = [gpu for gpu in PEAK_FLOPS if gpu in device_name.upper()]
    return found[0] if len(found) == 1 else None


def measured_hardware(
    gpu: str,
    achieved_flops: float,
    memory_bytes: int,
    peak_flops: float,
    peak_from: str,
    what: str,
) -> Hardware:
    """``this_gpu``: one GPU at the FLOP/s a step achieved, with its memory; the node and host
    links are the ``{gpu}-nvlink`` preset's (one GPU measures no link). ``source`` names the MFU,
    the peak and where the peak came from."""
    preset = f"{gpu.lower()}-nvlink"
    expect(preset in HARDWARE, f"no preset {preset!r} for GPU {gpu!r}; known: {list(PEAK_FLOPS)}")
    mfu = achieved_flops / peak_flops
    return replace(
        HARDWARE[preset],
        name="this_gpu",
        flops=achieved_flops,
        memory_bytes=memory_bytes,
        source=f"measured by `placement-edu calibrate --device cuda`: {what}; "
        f"{achieved_flops / 1e12:.4g}e12 FLOP/s = {mfu:.1%} MFU of {peak_flops / 1e12:g}e12 "
        f"({peak_from}); FLOPs: {FLOP_CONVENTION}; links: {preset}'s, not measured",
    )
