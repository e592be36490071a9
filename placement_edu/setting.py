"""The door: what a user types or passes, resolved once into one frozen ``Setting``.

torchtitan builds one ``JobConfig`` from its flags and hands it down; placement_edu builds one
``Setting`` (strategy, model, mesh, precision, hardware, recomputation, attention kernel, memory
budget, and a real model's architecture for ``fit``) with ``resolve`` and hands it to ``analyze``,
``check``, ``step_time``, ``price_configuration``, ``plan``, ``fit`` and ``RunConfig`` (each takes
a ``Setting``, and resolves its keyword forms into one at its top). Below the door nothing parses a
name or a mesh again: a ``Setting``'s fields are already the core's types. Bad input fails here,
with ``PlacementError`` in one line that names the value and what is accepted, and, for a near
miss, the name it was probably meant to be ("did you mean 'zero3'?").

What each field accepts (``resolve``'s arguments):

- ``strategy``: a ``Strategy``, or a name or composition (``strategies.get_strategy``; an alias of
  ``ALIASES`` -- fsdp2 is zero3 -- taken as its canonical name)
- ``model``: a model spec, or Ψ, a number (``models.as_model``)
- ``architecture``: a real model, whose module ``fit`` places event by event: a reference model's
  name (gpt2, llama-1b, llama-8b), an HF config.json's path, or an ``Architecture``
  (``architectures.get_architecture``)
- ``mesh``: a ``Mesh``, text like "data=2,tensor=4", or a mapping {axis: degree}; a bare number is
  refused (``devices`` says how many devices sit on the strategy's own axis)
- ``precision``, ``hardware``: a preset's name or the object itself
- ``recompute``: none, selective (alias megatron-selective), full, torchtitan-op (priced by a
  module's profile only), or layer:K; for a real model (``architecture``), the
  policies its module is measured under (``peak.RECOMPUTE``: Megatron's selective is
  megatron-selective there); ``attention``: flash or eager (sdpa is flash)
- ``memory``: the budget per device in bytes (None: the hardware's)
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import get_close_matches
from typing import Callable, Iterable, Mapping, TypeVar

from placement_edu.architectures import PRESETS as MODELS
from placement_edu.architectures import Architecture, get_architecture
from placement_edu.errors import MAX_DEVICES, PlacementError, expect, positive_int, shown
from placement_edu.fsdp_storage import PRESET_OF
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import MAX_EVERY, Model, TransformerSpec, as_model, every_kth, layer_k
from placement_edu.peak import RECOMPUTE as MODULE_POLICIES
from placement_edu.precision import PRESETS, Precision, get_precision
from placement_edu.strategies import COMPOSITIONS, STRATEGIES, Strategy, get_strategy
from placement_edu.timing.hardware import HARDWARE, Hardware, get_hardware

T = TypeVar("T")

#: One name for one thing: what the commands once spelled apart, each alias -> its canonical name.
#: ``fit`` says FSDP2's words (fully_shard, reshard_after_forward), ``time`` and the core ZeRO's;
#: ``fit`` names the attention kernel PyTorch calls (sdpa), ``time`` the formula's (flash).
ALIASES: Mapping[str, str] = {
    "fsdp2": "zero3",
    "fsdp2_no_reshard": "fsdp_grad_op",
    "sdpa": "flash",
    # Korthikanti's selective recomputation, the formula's "selective", is Megatron-LM's: fit
    # names it megatron-selective (a real module's "selective" is another policy, peak.RECOMPUTE,
    # so the alias applies where the formula prices the step)
    "megatron-selective": "selective",
    # fit's name for a precision preset (``fsdp_storage.PRESET_OF``): fp32 is fp32_adam
    **{name: preset for name, preset in PRESET_OF.items() if name != preset},
}
#: Attention as the formula prices it: eager, or flash (no s×s scores kept; PyTorch's sdpa).
ATTENTIONS = TransformerSpec.ATTENTION
#: Recomputation choices (Korthikanti et al. 2022's, torchtitan's op policy, whose FLOPs the time
#: model charges and whose peak only a module's profile prices, and torchtitan's layer:K).
RECOMPUTES = (*TransformerSpec.RECOMPUTE, *TransformerSpec.PROFILE_ONLY)
#: A real model's: the policies its module is measured under (torch's, Megatron's, torchtitan's).
MODULE_RECOMPUTES = tuple(MODULE_POLICIES)


def did_you_mean(value: object, accepted: Iterable[str]) -> str:
    """The hint for a near miss of one of ``accepted`` ("; did you mean 'zero3'?": a name it
    begins, or one spelled alike), "" for anything else."""
    if not isinstance(value, str) or len(value) > 100:
        return ""
    key, names = value.strip().lower(), list(accepted)
    near = [n for n in names if key and n.startswith(key)][:2] or get_close_matches(key, names, n=2)
    return f"; did you mean {' or '.join(map(repr, near))}?" if near else ""


def canonical(value: str, accepted: Iterable[str], what: str) -> str:
    """``value`` or the canonical name of its alias, if ``accepted`` holds it; else a one-line
    refusal naming the value, what is accepted and the nearest names."""
    names = tuple(accepted)
    key = ALIASES.get(value.strip().lower(), value.strip().lower())
    if key in names:
        return key
    aliases = [a for a, c in ALIASES.items() if c in names]
    raise PlacementError(
        f"unknown {what} {shown(value)}; accepted: {', '.join(names)}"
        + (f" (aliases: {', '.join(f'{a} = {ALIASES[a]}' for a in aliases)})" if aliases else "")
        + did_you_mean(value, [*names, *aliases])
    )


def _named(value: T | str, get: Callable[[T | str], T], names: Iterable[str]) -> T:
    """``get(value)`` (a registry's own lookup and message), with "did you mean" on a near miss."""
    if isinstance(value, str):
        value = ALIASES.get(value.strip().lower(), value)
    try:
        return get(value)
    except PlacementError as error:
        raise PlacementError(f"{error}{did_you_mean(value, names)}") from None


@dataclass(frozen=True)
class Setting:
    """One entry point's inputs, resolved: the core's own types, compared by value.

    ``strategy``, ``model`` and ``mesh`` are None where the entry point needs none (``plan``
    chooses the strategy and the mesh). ``memory_bytes``: the budget per device (None: the
    hardware's, ``budget_bytes``). ``architecture``: a real model's module, which ``fit`` places
    event by event (None for the formula's models)."""

    strategy: Strategy | None = None
    model: Model | None = None
    mesh: Mesh | None = None
    precision: Precision = PRESETS["mixed_adam"]
    hardware: Hardware = HARDWARE["h100-nvlink-ib"]
    recompute: str = "none"
    attention: str = "flash"
    memory_bytes: int | None = None
    architecture: Architecture | None = None

    @property
    def budget_bytes(self) -> int:
        """Bytes a device may hold: the budget given, or the hardware's memory."""
        return self.hardware.memory_bytes if self.memory_bytes is None else self.memory_bytes


def resolve(
    strategy: str | Strategy | Setting | None = None,
    model: Model | int | float | None = None,
    mesh: Mesh | Mapping[str, int] | str | None = None,
    precision: str | Precision | None = None,
    hardware: str | Hardware | None = None,
    *,
    devices: int | None = None,
    recompute: str = "none",
    attention: str | None = None,
    memory: int | None = None,
    architecture: str | Architecture | None = None,
) -> Setting:
    """The one door: every argument resolved once, checked, and frozen into a ``Setting``.

    ``devices``: all on the strategy's one axis (``Strategy.default_mesh``) when no ``mesh`` is
    given; with a mesh, it must count the mesh's devices. A ``Setting`` passed as ``strategy``
    comes back as it is. ``precision``, ``hardware`` and ``attention`` left out (None) are the
    ``Setting``'s defaults (mixed_adam, h100-nvlink-ib, flash), which are nothing typed to
    resolve."""
    if isinstance(strategy, Setting):
        return strategy
    names = [*STRATEGIES, *COMPOSITIONS]
    built = None if strategy is None else _named(strategy, get_strategy, names)
    spec = None if model is None else as_model(model)
    where = None if mesh is None else as_mesh(mesh)
    if devices is not None:
        devices = positive_int("devices", devices)
        expect(devices <= MAX_DEVICES, f"devices = {devices:,} is more than 2^40 devices")
        if where is None:
            expect(built is not None, "give a strategy with devices (or a mesh)")
            assert built is not None
            where = built.default_mesh(devices)
        expect(
            where.world_size == devices,
            f"mesh {where} has {where.world_size} devices, but devices = {devices}",
        )
    module = None if architecture is None else _named(architecture, get_architecture, MODELS)
    expect(isinstance(recompute, str), f"recompute must be text, got {recompute!r}")
    kept = layer_k(recompute) or (recompute if module else ALIASES.get(recompute, recompute))
    policies = RECOMPUTES if module is None else MODULE_RECOMPUTES
    expect(
        kept in policies or every_kth(kept),
        f"unknown recompute choice {shown(recompute)}; accepted: {', '.join(policies)}, or "
        f"layer:K (K from 1 to {MAX_EVERY:,}){did_you_mean(recompute, policies)}",
    )
    expect(
        attention is None or isinstance(attention, str),
        f"attention must be text, got {attention!r}",
    )
    budget = None if memory is None else positive_int("memory budget (bytes)", memory)
    return Setting(
        built,
        spec,
        where,
        Setting.precision if precision is None else _named(precision, get_precision, PRESETS),
        Setting.hardware if hardware is None else _named(hardware, get_hardware, HARDWARE),
        kept,
        Setting.attention if attention is None else canonical(attention, ATTENTIONS, "attention"),
        budget,
        module,
    )
