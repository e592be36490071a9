"""Training states, placement modes and placements (SPEC §1, §2).

Plain frozen values, in the spirit of DTensor's ``Shard``/``Replicate``/``Partial``: they carry no
behaviour. Everything that follows from a placement -- memory, communication, correctness -- is
derived elsewhere by pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Mapping, Union

from placement_edu.errors import PlacementError

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["AXES", "MODEL_STATES", "PHASES", "STARTUP", "GradStatus", "Mode", "Placement", "State"]


class State(str, Enum):
    """The four training states."""

    PARAMS = "params"  # P: the working copy used in forward/backward
    GRADS = "grads"  # G: gradients of the loss w.r.t. the parameters
    OPTIMIZER = "optimizer"  # O: fp32 master copy + Adam m and v under mixed_adam
    ACTIVATIONS = "activations"  # A: made in forward, kept until backward

    def __str__(self) -> str:
        return self.value


#: The three persistent model states, P, G and O (activations are made and freed each step).
MODEL_STATES: tuple[State, ...] = (State.PARAMS, State.GRADS, State.OPTIMIZER)
#: The phases of one optimizer step, in order (start-up happens once, before the first step).
PHASES: tuple[str, ...] = ("forward", "backward", "step")
#: The phase of what happens once, before the first step (the broadcast of replicated parameters).
STARTUP = "startup"


class Mode(str, Enum):
    """Where a state lives along one mesh axis of size N (SPEC §2).

    Five modes; the offloaded mode comes in the two host layouts the specification allows:
    ``OFF`` keeps a 1/N slice on each host (ZeRO-Offload's layout), ``OFF_R`` a whole copy.
    """

    R = "R"  # replicated: every device holds all of it, identical copies
    S = "S"  # sharded: each device owns a disjoint 1/N slice and only uses that slice
    SG = "SG"  # sharded-with-gather: stored as 1/N slices, all-gathered just before use
    M = "M"  # materialized: computed during the step and freed within it
    OFF = "OFF"  # offloaded: persistent copy in host memory, a 1/N slice per host
    OFF_R = "OFF-R"  # offloaded: persistent copy in host memory, a whole copy per host

    def __str__(self) -> str:
        return self.value


# The mode sets every rule reads, defined once (SPEC §2):
#: a whole copy per device (on the device or, for OFF-R, on its host);
WHOLE = frozenset({Mode.R, Mode.OFF_R})
#: the persistent copy is divided by the axis degree;
SPLIT_MODES = frozenset({Mode.S, Mode.SG, Mode.OFF})
#: stored as slices and rebuilt in full by an all-gather just before use;
GATHERED = frozenset({Mode.SG, Mode.OFF})
#: the persistent copy lives in host memory, not on the device.
HOST_MODES = frozenset({Mode.OFF, Mode.OFF_R})


class GradStatus(str, Enum):
    """The transient status of a gradient along a batch-splitting axis (SPEC §2)."""

    PARTIAL = "partial"  # right after a local backward: only this device's contribution
    REDUCED = "reduced"  # sum-reduced (all-reduce or reduce-scatter), not yet normalised
    SCALED = "scaled"  # reduced and divided once by the number of contributions


#: The mesh axes, in the order a mesh is written (where ranks sit is ``mesh.LAYOUT``'s order), and
#: what each one splits. ``data``, ``tensor`` and ``pipeline``
#: are the specification's three; ``replica`` is a second batch-splitting axis for hybrid sharding
#: (FSDP HYBRID_SHARD, "hsdp"): states are sharded within a data group and replicated across groups.
#: ``context`` splits each sequence into c chunks (context parallelism, ``context.py``): every
#: rank runs the whole model on its chunk of the tokens, so it splits the batch's tokens too.
#: ``expert`` holds E/e of a mixture of experts' experts on each rank (expert parallelism,
#: ``experts.py``); its modes are fixed (``expert_mode``), not chosen by a placement.
AXES: tuple[str, ...] = ("replica", "data", "expert", "context", "tensor", "pipeline")
#: Axes that split the batch: a gradient leaves backward partial along each of them (SPEC §5).
#: Listed innermost first, the order in which gradients are reduced. ``context`` splits the tokens
#: of each sequence: its ranks' gradients are partial sums too, reduced over data × context
#: (Megatron-Core reduces them over its data-parallel group "with context parallel").
BATCH_AXES: tuple[str, ...] = ("context", "data", "replica")
#: The tensor dimension each axis shards by default (SPEC §6 rule 1): data, context and replica
#: shard the flattened parameters, tensor the hidden dimension of weight matrices, pipeline the
#: layer index.
DEFAULT_SHARD_DIMS = {
    "replica": "flat",
    "data": "flat",
    "context": "flat",
    "expert": "expert",  # the index of the expert
    "tensor": "hidden",
    "pipeline": "layer",
}


#: The expert axis (expert parallelism, carved from the data axis as Megatron-LM does).
EXPERT_AXIS = "expert"


def expert_mode(state: State) -> Mode:
    """A state's mode on the expert axis, fixed by what the axis is: the experts' params, grads
    and optimizer state are S (each rank owns E/e experts, ``experts.py``); activations M. The
    dense weights, R there, are the data axis' business (``experts.check_expert_axis``)."""
    return default_mode(state) if State(state) is State.ACTIVATIONS else Mode.S


def known_axes(named: Iterable[str], where: str) -> None:
    """Refuse an axis name that is not one of AXES; ``where`` says what named it, for the
    message (e.g. "mesh_axes")."""
    for axis in named:
        if axis not in AXES:
            raise PlacementError(f"{where} names axis {axis!r}; known axes: {', '.join(AXES)}")


ModeSpec = Union[Mode, str, Mapping[str, Union[Mode, str]]]


def as_mode(value: Mode | str) -> Mode:
    """Read a mode from a Mode or its short name ('R', 'S', 'SG', 'M', 'OFF', 'OFF-R')."""
    if isinstance(value, Mode):
        return value
    for mode in Mode:
        if str(value).upper() in (mode.value, mode.name):
            return mode
    known = ", ".join(m.value for m in Mode)
    raise PlacementError(f"unknown placement mode {value!r}; known modes: {known}")


def default_mode(state: State) -> Mode:
    """What a placement means where it names no mode: M for activations, R for the others."""
    return Mode.M if State(state) is State.ACTIVATIONS else Mode.R


def _axis_modes(state: State, spec: ModeSpec) -> tuple[Mode, ...]:
    """One state's mode on every axis of AXES, in order. A bare mode means the data axis; axes
    not named take the default, so two spellings of one meaning give the same table."""
    if isinstance(spec, (Mode, str)):
        pairs = {"data": spec}
    elif isinstance(spec, Mapping):
        pairs = dict(spec)
    elif isinstance(spec, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in spec):
        pairs = dict(spec)
    else:
        raise PlacementError(
            f"{state} placement {spec!r} is not a mode ('R', 'S', 'SG', 'M', 'OFF', "
            "'OFF-R') or a mapping from axis to mode, e.g. {'data': 'SG', 'tensor': 'S'}"
        )
    known_axes(pairs, f"the {state} placement")
    if EXPERT_AXIS in pairs:
        raise PlacementError(
            f"the {state} placement names the expert axis; its modes are fixed, not chosen: the "
            "experts are S on it (E/e per rank), the dense weights as the data axis places them"
        )
    return tuple(as_mode(pairs[axis]) if axis in pairs else default_mode(state) for axis in AXES)


#: Each state with the mode a placement means where it names none (``default_mode``).
_DEFAULTS = tuple((state, default_mode(state)) for state in State)


@dataclass(frozen=True)
class Placement:
    """A mode per training state, per mesh axis: a full table, so values compare and hash by
    meaning. Axes a state does not name are replicated (R) for parameters, gradients and
    optimizer state, and materialized (M) for activations: ``Placement()``,
    ``Placement(params="R")`` and ``Placement(activations="M")`` are one value.

    >>> Placement(params="R", grads="S", optimizer="S")          # ZeRO-2 on the data axis
    >>> Placement(params={"data": "SG", "tensor": "S"}, ...)      # FSDP + tensor parallel
    """

    params: tuple[Mode, ...]
    grads: tuple[Mode, ...]
    optimizer: tuple[Mode, ...]
    activations: tuple[Mode, ...]

    def __init__(
        self,
        params: ModeSpec | None = None,
        grads: ModeSpec | None = None,
        optimizer: ModeSpec | None = None,
        activations: ModeSpec | None = None,
    ) -> None:
        for state, spec in (
            (State.PARAMS, params),
            (State.GRADS, grads),
            (State.OPTIMIZER, optimizer),
            (State.ACTIVATIONS, activations),
        ):
            object.__setattr__(self, state.value, _axis_modes(state, spec or {}))
        # the same table by (state, axis), what ``mode`` reads (not a field: no part of the value)
        table = {(s, axis): m for s in State for axis, m in zip(AXES, getattr(self, s.value))}
        table.update({(s, EXPERT_AXIS): expert_mode(s) for s in State})  # fixed on that axis
        object.__setattr__(self, "_by_state_and_axis", table)

    def __hash__(self) -> int:  # (the fields' hash, found once: every cache of a plan asks it)
        try:
            return self._hash  # type: ignore[attr-defined, no-any-return]
        except AttributeError:
            found = hash((self.params, self.grads, self.optimizer, self.activations))
            object.__setattr__(self, "_hash", found)
            return found

    def __getstate__(self) -> dict[str, Any]:  # (a str's hash differs between processes)
        return {key: value for key, value in self.__dict__.items() if key != "_hash"}

    def mode(self, state: State, axis: str) -> Mode:
        """The mode of ``state`` along ``axis`` (a state's name is its State: a str enum)."""
        try:
            return self._by_state_and_axis[state, axis]  # type: ignore[attr-defined, no-any-return]
        except (KeyError, AttributeError):  # an unknown axis or state: refused by name below
            if axis == EXPERT_AXIS:
                return expert_mode(state)
            return getattr(self, State(state).value)[AXES.index(axis)]

    def named(self, state: State) -> dict[str, Mode]:
        """The axes on which ``state`` differs from its default, with their modes, in mesh order."""
        default = default_mode(state)
        return {
            axis: mode
            for axis, mode in zip(AXES, getattr(self, State(state).value))
            if mode is not default
        }

    def axes(self) -> tuple[str, ...]:
        """The axes on which any state differs from its default, in mesh order (found once: every
        validation of a strategy asks)."""
        try:
            return self._axes  # type: ignore[attr-defined, no-any-return]
        except AttributeError:  # (``named`` of every state, read straight from the four tables)
            tables = [(getattr(self, state.value), default) for state, default in _DEFAULTS]
            axes = tuple(
                axis
                for i, axis in enumerate(AXES)
                if any(modes[i] is not default for modes, default in tables)
            )
            object.__setattr__(self, "_axes", axes)
            return axes

    def __repr__(self) -> str:
        def spec(state: State) -> str:
            named = self.named(state)
            if list(named) == ["data"]:
                return repr(named["data"].value)
            return (
                "{" + ", ".join(f"{axis!r}: {mode.value!r}" for axis, mode in named.items()) + "}"
            )

        args = ", ".join(f"{s.value}={spec(s)}" for s in State if self.named(s))
        return f"Placement({args})"

    def __str__(self) -> str:
        try:  # (written once: a plan's --json prints one for each of thousands of rows)
            return self._text  # type: ignore[attr-defined, no-any-return]
        except AttributeError:
            pass

        def one(state: State) -> str:
            named = self.named(state)
            if not named:
                return str(default_mode(state))
            if list(named) == ["data"]:
                return str(named["data"])
            return "(" + ", ".join(f"{axis}:{mode}" for axis, mode in named.items()) + ")"

        text = " ".join(f"{s.name[0]}={one(s)}" for s in State)
        object.__setattr__(self, "_text", text)
        return text
