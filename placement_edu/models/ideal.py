"""The ideal slices of the Ψ-level formula (``IdealSlices``: a state split over axes of degrees
d1, d2, ... holds exactly Ψ/(d1·d2·...) elements per device) and the abstract model of Ψ parameters
(``ModelSpec``), what the ZeRO paper's tables use."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from placement_edu.errors import expect, non_negative_int, positive_int
from placement_edu.models.protocol import NoAttention
from placement_edu.models.splits import (
    Coords,
    Degrees,
    Number,
    UnitRun,
    listed_units,
    per_layer_units,
    stage_units,
)


def tensor_split(psi: int, replicated: int, split: Degrees) -> Fraction:
    """Elements of Ψ on one device of the axes in ``split``: the R parameters tensor parallelism
    leaves whole on every tensor rank are divided by every other axis, the rest by the tensor
    axis too -- ((Ψ − R)/t + R)/(d1·d2·...) for the other axes' degrees; Ψ/(t·d1·d2·...) when
    R = 0. (Megatron-LM, ``megatron/core/tensor_parallel/layers.py``: a column-parallel layer
    holds 1/t of its weight and bias, a row-parallel one 1/t of its weight and the whole bias.)"""
    t = split.get("tensor", 1)
    others = math.prod(n for axis, n in split.items() if axis != "tensor")
    return _split(psi, replicated, t, others)


@lru_cache(maxsize=4096)  # (a plan asks for the same few splits tens of thousands of times)
def _split(psi: int, replicated: int, t: int, others: int) -> Fraction:
    return Fraction(psi - replicated + replicated * t, t * others)  # ((Ψ − R)/t + R)/others


class IdealSlices:
    """What the derivations ask of a model, for the Ψ-level formula: a state split over axes of
    degrees d1, d2, ... holds exactly Ψ/(d1·d2·...) elements per device, with no padding --
    except the ``replicated_elements`` (R) that the tensor axis leaves whole: (Ψ − R)/t + R on a
    tensor rank (``tensor_split``). Pipeline stages take equal shares of both (Ψ-level)."""

    psi: int
    #: R: parameters tensor parallelism leaves whole on every tensor rank (0: all split by t).
    replicated_elements: int = 0

    def local_elements(self, split: Degrees, coords: Coords = None) -> Number:
        """Elements of a state on one device after dividing by each split axis' degree (R not
        by the tensor axis')."""
        return tensor_split(self.psi, self.replicated_elements, split)

    def traffic_elements(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> Number:
        """Full size of the tensor a data-axis collective moves: Ψ over the other axes' splits
        (R not over the tensor axis: a tensor rank reduces its whole copy of the replicated
        parameters' gradients)."""
        return tensor_split(self.psi, self.replicated_elements, split_other)

    def padding(self, n: int) -> int:
        """Elements of padding a sharding over ``n`` adds: none for the ideal formula."""
        return 0

    def unit_runs(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> list[UnitRun]:
        """Elements each gather unit's data-axis collective moves, in forward order, as runs of
        equal units: Ψ-level units are equal parts of ``traffic_elements`` (fractions of an
        element), one run, whatever their number. On a pipeline stage, ``traffic_elements`` is the
        stage's share and the units are the stage's own (``stage_units``): a unit is still a
        layer's worth, never 1/p of one."""
        total = self.traffic_elements(split_other, padded_for, coords)
        stages, stage = split_other.get("pipeline", 1), (coords or {}).get("pipeline", 0)
        gather_units, layers = self.gather_units, self.layers  # type: ignore[attr-defined]
        units = stage_units(gather_units, layers, stages, stage)
        return [(Fraction(total, units), units)] if units > 1 else [(total, 1)]

    def unit_elements(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> list[Number]:
        """``unit_runs`` listed unit by unit."""
        return listed_units(self.unit_runs(split_other, padded_for, coords))

    #: An abstract model is reduced in one collective per axis (its units are Ψ-level parts).
    reduces_per_unit = False


@dataclass(frozen=True)
class ModelSpec(NoAttention, IdealSlices):
    """An abstract model of ``psi`` parameters.

    ``layers``: units the parameters are split into (pipeline stages take whole layers).
    ``gather_units``: how many equal units an SG state is gathered in (0, the default: one per
    layer, FSDP wrapping each of L layers; 1 = the whole model at once, the worst case). The live
    gather window is two units: the one computing and the next, prefetched (``prefetched_window``).
    ``boundary_elements``: elements of one activation crossing a block or stage boundary for one
    micro-batch (b·s·h for a transformer); drives tensor- and pipeline-parallel traffic.
    ``activation_bytes``: activation bytes one device keeps for one micro-batch without parallelism.
    ``tp_blocks_per_layer``: column-then-row-parallel pairs per layer (2 for attention + MLP).
    ``replicated_elements``: R, parameters tensor parallelism leaves whole on every tensor rank
    (norms, row-parallel biases): a tensor rank holds (Ψ − R)/t + R of each model state, and under
    sequence parallelism their gradients are all-reduced on the tensor axis (SPEC §6 rule 3).
    0, the default, splits all of Ψ over t.
    """

    psi: int
    layers: int = 1
    gather_units: int = 0  # 0 means one unit per layer (FSDP's usual wrapping)
    boundary_elements: int = 0
    activation_bytes: int = 0
    tp_blocks_per_layer: int = 2
    name: str = ""
    replicated_elements: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "psi", positive_int("number of parameters (psi)", self.psi))
        object.__setattr__(self, "layers", positive_int("layers", self.layers))
        per_layer_units(self)
        for name in ("gather_units", "tp_blocks_per_layer"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        for name in ("boundary_elements", "activation_bytes", "replicated_elements"):
            object.__setattr__(self, name, non_negative_int(name, getattr(self, name)))
        expect(
            self.replicated_elements <= self.psi,
            f"replicated_elements ({self.replicated_elements:,}) must be at most psi "
            f"({self.psi:,}): they are the parameters tensor parallelism leaves whole",
        )

    def activation_bytes_per_microbatch(self, tensor: int, layers_here: Fraction) -> Number:
        """Activation bytes one device keeps for one micro-batch (ideal split over t and stages)."""
        return Fraction(self.activation_bytes, tensor) * layers_here / self.layers

    def tensor_replicated_elements(self, layers: range, last_stage: bool) -> Number:
        """Parameters of ``layers`` left whole on every tensor rank (their share of
        replicated_elements)."""
        return Fraction(self.replicated_elements * len(layers), self.layers)

    @property
    def description(self) -> str:
        return self.name or f"Ψ = {self.psi:,} parameters"
