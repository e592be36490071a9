"""Training states, placement modes and placements (SPEC §1, §2).

Plain frozen values, in the spirit of DTensor's ``Shard``/``Replicate``/``Partial``: they carry no
behaviour. Everything that follows from a placement -- memory, communication, correctness -- is
derived elsewhere by pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Union

from placement_edu.errors import PlacementError


class State(str, Enum):
    """The four training states."""

    PARAMS = "params"            # P: the working copy used in forward/backward
    GRADS = "grads"              # G: gradients of the loss w.r.t. the parameters
    OPTIMIZER = "optimizer"      # O: fp32 master copy + Adam m and v under mixed_adam
    ACTIVATIONS = "activations"  # A: made in forward, kept until backward

    def __str__(self) -> str:
        return self.value


MODEL_STATES: tuple[State, ...] = (State.PARAMS, State.GRADS, State.OPTIMIZER)


class Mode(str, Enum):
    """Where a state lives along one mesh axis of size N (SPEC §2).

    Five modes; the offloaded mode comes in the two host layouts the specification allows:
    ``OFF`` keeps a 1/N slice on each host (ZeRO-Offload's layout), ``OFF_R`` a whole copy.
    """

    R = "R"          # replicated: every device holds all of it, identical copies
    S = "S"          # sharded: each device owns a disjoint 1/N slice and only uses that slice
    SG = "SG"        # sharded-with-gather: stored as 1/N slices, all-gathered just before use
    M = "M"          # materialized: computed during the step and freed within it
    OFF = "OFF"      # offloaded: persistent copy in host memory, a 1/N slice per host
    OFF_R = "OFF-R"  # offloaded: persistent copy in host memory, a whole copy per host

    def __str__(self) -> str:
        return self.value


#: Modes whose persistent copy is divided by the axis degree.
SPLIT_MODES = frozenset({Mode.S, Mode.SG, Mode.OFF})
#: Modes whose persistent copy lives on the host, not the device.
HOST_MODES = frozenset({Mode.OFF, Mode.OFF_R})


class GradStatus(str, Enum):
    """The transient status of a gradient along a batch-splitting axis (SPEC §2)."""

    PARTIAL = "partial"      # right after a local backward: only this device's contribution
    REDUCED = "reduced"      # sum-reduced (all-reduce or reduce-scatter), not yet normalised
    SCALED = "scaled"        # reduced and divided once by the number of contributions


#: The mesh axes, outermost first, and what each one splits. ``data``, ``tensor`` and ``pipeline``
#: are the specification's three; ``replica`` is a second batch-splitting axis for hybrid sharding
#: (FSDP HYBRID_SHARD, "hsdp"): states are sharded within a data group and replicated across groups.
AXES: tuple[str, ...] = ("replica", "data", "tensor", "pipeline")
AXIS_SPLITS = {"replica": "the batch, across groups that each hold a whole (sharded) copy",
               "data": "the batch", "tensor": "each layer's weight matrices", "pipeline": "the layers"}
#: Axes that split the batch: a gradient leaves backward partial along each of them (SPEC §5).
#: Listed innermost first, the order in which gradients are reduced.
BATCH_AXES: tuple[str, ...] = ("data", "replica")
#: The tensor dimension each axis shards by default (SPEC §6 rule 1): data and replica shard the
#: flattened parameters, tensor the hidden dimension of weight matrices, pipeline the layer index.
DEFAULT_SHARD_DIMS = {"replica": "flat", "data": "flat", "tensor": "hidden", "pipeline": "layer"}

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


def _axis_modes(state: State, spec: ModeSpec) -> tuple[tuple[str, Mode], ...]:
    """Normalise one state's placement to sorted (axis, mode) pairs. A bare mode means the data axis."""
    pairs = {"data": spec} if isinstance(spec, (Mode, str)) else dict(spec)
    out = []
    for axis, mode in pairs.items():
        if axis not in AXES:
            raise PlacementError(
                f"{state} is placed on axis {axis!r}; known axes: {', '.join(AXES)}")
        out.append((axis, as_mode(mode)))
    return tuple(sorted(out, key=lambda pair: AXES.index(pair[0])))


@dataclass(frozen=True)
class Placement:
    """A mode per training state, per mesh axis. Axes a state does not name are replicated (R)
    for parameters, gradients and optimizer state, and materialized (M) for activations.

    >>> Placement(params="R", grads="S", optimizer="S")          # ZeRO-2 on the data axis
    >>> Placement(params={"data": "SG", "tensor": "S"}, ...)      # FSDP + tensor parallel
    """

    params: tuple[tuple[str, Mode], ...] = ()
    grads: tuple[tuple[str, Mode], ...] = ()
    optimizer: tuple[tuple[str, Mode], ...] = ()
    activations: tuple[tuple[str, Mode], ...] = ()

    def __init__(self, params: ModeSpec = (), grads: ModeSpec = (), optimizer: ModeSpec = (),
                 activations: ModeSpec = ()) -> None:
        for state, spec in ((State.PARAMS, params), (State.GRADS, grads),
                            (State.OPTIMIZER, optimizer), (State.ACTIVATIONS, activations)):
            object.__setattr__(self, state.value, _axis_modes(state, spec or {}))

    def mode(self, state: State, axis: str) -> Mode:
        """The mode of ``state`` along ``axis`` (the default when the placement does not name it)."""
        for name, mode in getattr(self, State(state).value):
            if name == axis:
                return mode
        return Mode.M if State(state) is State.ACTIVATIONS else Mode.R

    def axes(self) -> tuple[str, ...]:
        """The axes any state names, in mesh order."""
        named = {axis for state in State for axis, _ in getattr(self, state.value)}
        return tuple(axis for axis in AXES if axis in named)

    def __str__(self) -> str:
        def one(state: State) -> str:
            pairs = getattr(self, state.value)
            if not pairs:
                return "M" if state is State.ACTIVATIONS else "R"
            if len(pairs) == 1 and pairs[0][0] == "data":
                return str(pairs[0][1])
            return "(" + ", ".join(f"{axis}:{mode}" for axis, mode in pairs) + ")"
        return " ".join(f"{s.name[0]}={one(s)}" for s in State)
