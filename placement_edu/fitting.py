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

from typing import Callable, Mapping, TypedDict

from placement_edu.architectures import REFERENCE_SEQ, Architecture, get_architecture, sequence_of
from placement_edu.errors import PlacementError, expect
from placement_edu.fsdp_storage import PRESET_OF
from placement_edu.memory import Memory
from placement_edu.models import TransformerSpec
from placement_edu.peak import PRECISIONS, ActivationProfile, StepPeak, derive
from placement_edu.profile_store import stored
from placement_edu.precision import PRESETS
from placement_edu.report import analyze
from placement_edu.setting import Setting, resolve
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
#: The strategies ``fit`` places, each by its ``Strategy`` name: FSDP2's ``fully_shard`` on every
#: block, resharding after forward (zero3) or keeping a block gathered until its backward
#: (fsdp_grad_op; fit once called them fsdp2 and fsdp2_no_reshard, ``setting.ALIASES``).
FIT_STRATEGIES = ("zero3", "fsdp_grad_op")
#: The attention kernel as a profile names it (PyTorch's), for the door's name (the formula's).
PROFILE_ATTENTION: Mapping[str, str] = {"flash": "sdpa", "eager": "eager"}
#: A profile for a case: ``profile_store.stored`` (kept, or None), or one that measures.
ProfileSource = Callable[[StepCase], ActivationProfile | None]


class FitOptions(TypedDict, total=False):
    """``fit_peak``'s keywords beyond the model, as ``presentation.fit_answers.fit_peak`` hands
    them on: their defaults are ``fit_peak``'s, stated there once."""

    micro_batch: int
    seq: int | None
    recompute: str
    devices: int
    rank: int
    precision: str
    optimizer: str
    strategy: str
    attention: str


def fit_peak(
    model: str | Architecture | Setting,
    micro_batch: int = 1,
    seq: int | None = None,
    recompute: str = "none",
    devices: int = 8,
    rank: int = 0,
    precision: str = "fp32",
    optimizer: str = "adam-foreach",
    profile: ActivationProfile | ProfileSource = stored,
    *,
    strategy: str = "zero3",
    attention: str = "eager",
) -> StepPeak:
    """Rank ``rank``'s step under FSDP2 on ``devices`` (one device: plain training), as
    ``placement-edu fit`` derives it (``placement_edu.peak.derive``), from ``profile``, or else
    from the profile ``profile`` finds for the step's case (the one kept, by default).

    ``model`` may be a ``Setting`` (``setting.resolve(strategy, devices=N, architecture=...)``):
    its real model, strategy (zero3 or fsdp_grad_op), data axis, precision (fp32_adam, fit's fp32,
    or fsdp2_bf16), recomputation and attention. The keyword form is resolved into one here, once;
    bad input is refused here, in one line."""
    setting = (
        model
        if isinstance(model, Setting)
        else resolve(
            strategy,
            precision=precision,
            devices=devices,
            recompute=recompute,
            attention=attention,
            architecture=model,
        )
    )
    arch, reshard, fsdp2 = read_setting(setting)
    mesh = setting.mesh
    expect(
        mesh is not None and mesh.world_size == mesh.degree("data"),
        f"fit places a step on one data axis (devices = N), got mesh {mesh}; a tensor, pipeline "
        "or context axis is placed by peak_axes.derive_on_mesh",
    )
    assert mesh is not None
    seq = sequence_of(arch, seq)
    case = StepCase(
        arch,
        micro_batch,
        seq,
        PRECISIONS[fsdp2].compute_name,
        PROFILE_ATTENTION[setting.attention],
        setting.recompute,
    )
    found = profile if isinstance(profile, ActivationProfile) else profile(case)
    if found is None:
        raise PlacementError(
            f"no activation profile is kept for {arch.name} at b = {micro_batch}, s = {seq}, "
            f"{case.compute}, {case.attention} attention, recompute {case.recompute}: measure one "
            "(imports torch) with placement_edu.runtime.measurement.profiles.get_profile, or run "
            "placement-edu fit"
        )
    return derive(arch, found, mesh.world_size, rank, PRECISIONS[fsdp2], optimizer, reshard)


def read_setting(setting: Setting) -> tuple[Architecture, bool, str]:
    """What ``fit`` reads of a ``Setting``, checked once: (its real model, the strategy's
    ``reshard_after_forward``, the FSDP2 precision's name in ``fsdp_storage.PRECISIONS``). A
    setting ``fit`` cannot place is refused in one line."""
    strategy, precision = setting.strategy, setting.precision
    expect(
        setting.architecture is not None,
        "fit places a real model: give resolve(..., architecture='gpt2'), or a name as model",
    )
    expect(
        strategy is not None and strategy.name in FIT_STRATEGIES,
        f"fit places {' or '.join(FIT_STRATEGIES)} (FSDP2's fully_shard on every block), got "
        f"{strategy.name if strategy else 'no strategy'}",
    )
    fsdp2 = [name for name, preset in PRESET_OF.items() if PRESETS[preset] == precision]
    expect(
        bool(fsdp2),
        f"fit places FSDP2 steps in {', '.join(PRESET_OF.values())} (fit's "
        f"{', '.join(PRESET_OF)}), got precision {precision.name}",
    )
    assert setting.architecture is not None and strategy is not None
    return setting.architecture, strategy.reshard_after_forward, fsdp2[0]
