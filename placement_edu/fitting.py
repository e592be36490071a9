"""Will one rank's step fit? Two answers for a real model (issue 22), without torch:

1. **the formula**, what the course taught first: the model read as a GPT-style ``TransformerSpec``
   (same L, h, a, V, f, b, s), sbh(34 + 5as/h) 16-bit bytes per layer, nothing outside the blocks,
   and ``derive_memory``'s peak (fsdp on N devices, dp on one): ``formula_memory``;
2. **the measured profile** and the step it derives (``placement_edu.peak.derive``, the
   derivation ``placement-edu fit`` prints): ``fit_peak``. The profile is read where it is kept
   (shipped for the checked shapes, or cached once measured: ``profile_store``); measuring one
   imports torch and is the runtime's (``placement_edu.runtime.measurement.profiles.get_profile``),
   so a profile not kept is passed in, or refused in one line.

``presentation.fit_three_ways`` sets them side by side with PyTorch's tracker. Bytes are exact
integers.
"""

from __future__ import annotations

from typing import Mapping

from placement_edu.architectures import REFERENCE_SEQ, Architecture, get_architecture
from placement_edu.errors import PlacementError
from placement_edu.memory import Memory
from placement_edu.models import TransformerSpec
from placement_edu.peak import PRECISIONS, ActivationProfile, StepPeak, derive
from placement_edu.profile_store import stored
from placement_edu.report import analyze
from placement_edu.step_case import StepCase

#: The sequence lengths offered per model (the largest is ``REFERENCE_SEQ``'s, shipped and checked).
SEQ_CHOICES: Mapping[str, tuple[int, ...]] = {
    "gpt2": (256, 512, 1024),
    "llama-1b": (512, 1024, 2048),
}
#: What the formula path calls each FSDP2 precision: plain fp32 Adam, or ZeRO's 2/2/12 split.
FORMULA_PRECISION = {"fp32": "fp32_adam", "fsdp2_bf16": "mixed_adam"}


def default_seq(model: str) -> int:
    """The sequence length the model is checked at (its profile shipped): the largest offered."""
    return REFERENCE_SEQ[model]


# --- 1. the formula -------------------------------------------------------------------------------
def formula_spec(
    model: str | Architecture, micro_batch: int = 1, seq: int | None = None, recompute: str = "none"
) -> TransformerSpec:
    """The model as Korthikanti's formula sees it: a GPT-style ``TransformerSpec`` with the same
    layers, width, heads, FFN width, vocabulary, b and s. (It counts Ψ the GPT way: no SwiGLU third
    matrix, no GQA, a learned position table of s rows.)"""
    arch = get_architecture(model)
    return TransformerSpec(
        layers=arch.layers,
        hidden=arch.hidden,
        heads=arch.heads,
        seq=seq or default_seq(arch.name),
        vocab=arch.vocab,
        micro_batch=micro_batch,
        ffn=arch.ffn,
        recompute=recompute,
        name=arch.name,
    )


def formula_memory(
    model: str, micro_batch: int, seq: int, recompute: str, devices: int, precision: str = "fp32"
) -> Memory:
    """The formula path's rank 0: ``derive_memory`` of fsdp on ``devices`` (dp on one device)."""
    spec = formula_spec(model, micro_batch, seq, recompute)
    strategy = "fsdp" if devices > 1 else "dp"
    return analyze(strategy, spec, devices, FORMULA_PRECISION[precision]).memory


# --- 2. the measured profile and the step it derives ---------------------------------------------
def fit_peak(
    model: str,
    micro_batch: int = 1,
    seq: int | None = None,
    recompute: str = "none",
    devices: int = 8,
    rank: int = 0,
    precision: str = "fp32",
    optimizer: str = "adam-foreach",
    profile: ActivationProfile | None = None,
) -> StepPeak:
    """Rank ``rank``'s step under FSDP2 on ``devices`` (one device: plain training), as
    ``placement-edu fit`` derives it (``placement_edu.peak.derive``), from ``profile`` (eager
    attention), or else from the profile kept for that case."""
    seq = seq or default_seq(model)
    compute = PRECISIONS[precision].compute_name
    if profile is None:
        profile = stored(StepCase.of(model, micro_batch, seq, compute, "eager", recompute))
    if profile is None:
        raise PlacementError(
            f"no activation profile is kept for {model} at b = {micro_batch}, s = {seq}, "
            f"{compute}, recompute {recompute}: measure one (imports torch) with "
            "placement_edu.runtime.measurement.profiles.get_profile, or run placement-edu fit"
        )
    return derive(model, profile, devices, rank, precision, optimizer)
