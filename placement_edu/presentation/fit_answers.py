"""Two answers to "will one rank's step fit?" for a real model: Korthikanti's formula and the
measured activation profile with the step it derives (issue 22; ``fit_comparison`` sets them side
by side with PyTorch's tracker).

1. **the formula**, what the course taught first: the model read as a GPT-style ``TransformerSpec``
   (same L, h, a, V, f, b, s), sbh(34 + 5as/h) 16-bit bytes per layer, nothing outside the blocks,
   and ``derive_memory``'s peak (fsdp on N devices, dp on one);
2. **the measured profile** (``placement_edu.runtime.measurement.profiles``: shipped for the
   checked shapes, else measured once under ``FakeTensorMode`` and cached) and the step it derives
   (``placement_edu.peak.derive``, the derivation ``placement-edu fit`` prints).

Bytes are exact integers.
"""

from __future__ import annotations

from typing import Mapping

from placement_edu.architectures import REFERENCE_SEQ, Architecture, get_architecture
from placement_edu.memory import Memory
from placement_edu.models import TransformerSpec
from placement_edu.peak import PRECISIONS, ActivationProfile, StepPeak, derive
from placement_edu.report import analyze

#: The sequence lengths offered per model (the largest is ``REFERENCE_SEQ``'s, shipped and checked).
SEQ_CHOICES: Mapping[str, tuple[int, ...]] = {
    "gpt2": (256, 512, 1024),
    "llama-1b": (512, 1024, 2048),
}
#: What the formula path calls each FSDP2 precision: plain fp32 Adam, or ZeRO's 2/2/12 split.
FORMULA_PRECISION = {"fp32": "fp32_adam", "fsdp2_bf16": "mixed_adam"}

#: A profile's case: (model, micro_batch, seq, compute, recompute).
ProfileCase = tuple[str, int, int, str, str]
#: Profiles read in this process, and whether each came from a cache (shipped or on disk).
_PROFILES: dict[ProfileCase, tuple[ActivationProfile, bool]] = {}


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
def profile_for(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> ActivationProfile:
    """The activation profile (eager attention), kept in this process once read: shipped with the
    package or cached on disk (no torch imported), else measured under ``FakeTensorMode`` (imports
    torch: 3-6 s on a laptop CPU, no tensor memory) and cached."""
    case = (model, micro_batch, seq, compute, recompute)
    if case not in _PROFILES:
        from placement_edu.runtime.measurement.profiles import get_profile

        _PROFILES[case] = get_profile(model, micro_batch, seq, compute, "eager", recompute)
    return _PROFILES[case][0]


def is_known(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> bool:
    """Whether ``profile_for`` answers at once: read in this process already, or shipped."""
    from placement_edu.runtime.measurement.profiles import SHIPPED_CASES

    shipped = (model, seq, compute, "eager") in SHIPPED_CASES and (micro_batch, recompute) == (
        1,
        "none",
    )
    return (model, micro_batch, seq, compute, recompute) in _PROFILES or shipped


def was_cached(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> bool:
    """Whether ``profile_for`` read that profile from a cache (shipped or on disk) rather than
    measuring it."""
    return _PROFILES[(model, micro_batch, seq, compute, recompute)][1]


def fit_peak(
    model: str,
    micro_batch: int = 1,
    seq: int | None = None,
    recompute: str = "none",
    devices: int = 8,
    rank: int = 0,
    precision: str = "fp32",
    optimizer: str = "adam-foreach",
) -> StepPeak:
    """Rank ``rank``'s step under FSDP2 on ``devices`` (one device: plain training), as
    ``placement-edu fit`` derives it (``placement_edu.peak.derive``)."""
    seq = seq or default_seq(model)
    compute = PRECISIONS[precision].compute_name
    profile = profile_for(model, micro_batch, seq, compute, recompute)
    return derive(model, profile, devices, rank, precision, optimizer)
