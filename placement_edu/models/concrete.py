"""The exact tensors of a model (``ConcreteModel``, from a torch ``nn.Module`` or its shapes):
slices follow a real sharding rule (ZeRO's flat padded buffer, FSDP2's per-tensor dim-0 chunks, or
``ZeroRedundancyOptimizer``'s whole tensors) and report their padding."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

from placement_edu.errors import expect, one_of
from placement_edu.models.protocol import NoAttention
from placement_edu.models.splits import Coords, Degrees, Number, UnitRun, stage_layers, unit_runs_of

if TYPE_CHECKING:  # torch is only needed to read a real module
    import torch


SHARDING_RULES = ("zero", "fsdp2", "greedy")
#: How a concrete model's tensors form gather units: "model" (one unit, the whole model -- the
#: worst case) or "layer" (one unit per layer: FSDP wrapping each block, ``fully_shard`` per layer).
GATHER_UNITS = ("model", "layer")


def greedy_partition(sizes: list[int] | tuple[int, ...], n: int) -> list[int]:
    """The owner (0..n-1) of each whole tensor under PyTorch ``ZeroRedundancyOptimizer``'s rule:
    tensors taken largest first (ties in their given order), each to the rank holding the fewest
    elements so far (ties to the lowest rank). Slices are uneven, and no tensor is split."""
    owners = [0] * len(sizes)
    load = [0] * min(n, len(sizes))  # a rank beyond the number of tensors never gets one
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(len(load)), key=lambda r: (load[r], r))
        owners[i] = rank
        load[rank] += sizes[i]
    return owners


@dataclass(frozen=True)
class TensorSpec:
    """One parameter tensor: name, shape, the layer it belongs to, and its tensor-parallel split.

    ``tp``: "col" (column-parallel: rows, dim 0, split over the tensor axis), "row" (row-parallel:
    dim 1 split) or None (replicated across tensor ranks, e.g. norms and row-parallel biases).
    """

    name: str
    shape: tuple[int, ...]
    layer: int = 0
    tp: str | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class Parametrized(Protocol):
    """What ``ConcreteModel.from_module`` reads: a torch module, or anything that lists its
    parameters as one does -- (name, an object with ``.shape``) -- such as the runtime's toy
    shapes, read without importing torch (``runtime/engines/toy_shapes.py``)."""

    def named_parameters(self) -> Iterable[tuple[str, Any]]: ...


@dataclass(frozen=True)
class ConcreteModel(NoAttention):
    """The exact parameter tensors of a model, and the sharding rule its data axis follows.

    ``rule="zero"``: all local tensors flattened into one buffer padded to a multiple of N, equal
    slices (DeepSpeed ZeRO). ``rule="fsdp2"``: each tensor split along dim 0 into chunks of
    ceil(rows/N) rows; the last ranks may hold fewer rows or none, collectives move padded chunks.
    ``rule="greedy"``: whole tensors, largest first, each to the least-loaded rank (PyTorch
    ``ZeroRedundancyOptimizer``); uneven slices, no padding (``greedy_partition``).

    ``units``: the gather units of sharded-with-gather parameters, real groups of tensors (see
    GATHER_UNITS). Each unit is gathered, and its gradient reduce-scattered, by its own collective,
    and under the "zero" rule each unit is its own flat buffer, padded to a multiple of N (FSDP1's
    FlatParameter per wrapped module); "fsdp2" pads each tensor anyway.
    """

    tensors: tuple[TensorSpec, ...]
    rule: str = "zero"
    units: str = "model"
    boundary_elements: int = 0
    activation_bytes: int = 0
    tp_blocks_per_layer: int = 1
    name: str = ""
    #: Bytes of ``activation_bytes`` that tensor parallelism does not split (block inputs kept
    #: whole on every tensor rank). 0, the default, divides all activations by t (the ideal).
    activation_bytes_replicated: int = 0

    def __post_init__(self) -> None:
        expect(len(self.tensors) > 0, "a concrete model needs at least one parameter tensor")
        expect(
            self.rule in SHARDING_RULES,
            f"unknown sharding rule {self.rule!r}; known rules: {', '.join(SHARDING_RULES)}",
        )
        one_of("gather units", self.units, GATHER_UNITS)
        expect(
            self.rule != "greedy" or self.units == "model",
            "the greedy rule owns whole tensors for an optimizer step; it has no gather units "
            "(units='model')",
        )

    @classmethod
    def from_module(
        cls,
        module: "torch.nn.Module | Parametrized",
        *,
        rule: str = "zero",
        tp_plan: Mapping[str, str] | None = None,
        **fields: object,
    ) -> "ConcreteModel":
        """Read every parameter of ``module``. A tensor's layer is the first integer in its name
        ("3.weight" and "layers.3.mlp.weight" are layer 3; names without one are layer 0)."""
        expect(
            hasattr(module, "named_parameters"),
            f"from_module reads a torch.nn.Module, got {module!r} of type {type(module).__name__}",
        )
        tp_plan = dict(tp_plan or {})
        tensors = []
        for name, param in module.named_parameters():
            digits = [part for part in name.split(".") if part.isdigit()]
            tensors.append(
                TensorSpec(
                    name, tuple(param.shape), int(digits[0]) if digits else 0, tp_plan.get(name)
                )
            )
        return cls(tuple(tensors), rule=rule, **fields)  # type: ignore[arg-type]

    @property
    def psi(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def layers(self) -> int:
        return max(t.layer for t in self.tensors) + 1

    @property
    def gather_units(self) -> int:
        """How many gather units the whole model has (one per layer that holds tensors, or one)."""
        return len({t.layer for t in self.tensors}) if self.units == "layer" else 1

    @property
    def reduces_per_unit(self) -> bool:
        """A gradient sharded with its gathered parameters is reduce-scattered unit by unit."""
        return self.gather_units > 1

    def _grouped(
        self, local: list[tuple[str, tuple[int, ...]]]
    ) -> list[list[tuple[str, tuple[int, ...]]]]:
        """``local`` (name, shape) pairs grouped into gather units, in forward (model) order."""
        if self.units == "model":
            return [local] if local else []
        layer = {t.name: t.layer for t in self.tensors}
        groups: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
        for name, shape in local:
            groups.setdefault(layer[name], []).append((name, shape))
        return [groups[k] for k in sorted(groups)]

    # --- slicing --------------------------------------------------------------------------
    def stage_layers(self, stages: int, stage: int) -> range:
        """Contiguous layers of pipeline ``stage`` (``stage_layers``)."""
        return stage_layers(self.layers, stages, stage)

    def local_tensors(
        self, split: Degrees, coords: Coords = None
    ) -> list[tuple[str, tuple[int, ...]]]:
        """The (name, shape) of each tensor this device holds after the pipeline and tensor axes."""
        coords = coords or {}
        out = []
        for t in self.tensors:
            if "pipeline" in split and t.layer not in self.stage_layers(
                split["pipeline"], coords.get("pipeline", 0)
            ):
                continue
            shape = t.shape
            degree = split.get("tensor", 1)
            if degree > 1 and t.tp is not None:
                dim = {"col": 0, "row": 1}.get(t.tp, len(shape))
                expect(
                    dim < len(shape),
                    f"tensor {t.name}: tp split {t.tp!r} does not fit shape {shape}; use 'col' or "
                    "'row'",
                )
                expect(
                    shape[dim] % degree == 0,
                    f"tensor {t.name}: dim {dim} of size {shape[dim]} is not divisible by tensor "
                    f"degree {degree}",
                )
                shape = shape[:dim] + (shape[dim] // degree,) + shape[dim + 1 :]
            out.append((t.name, shape))
        return out

    def data_shard(
        self, local: list[tuple[str, tuple[int, ...]]], n: int, index: int
    ) -> tuple[int, int]:
        """(elements held by data rank ``index``, elements its collectives move) under the rule,
        summed over the gather units."""
        if self.rule == "zero":  # each unit one flat buffer, padded to a multiple of n
            padded = [
                -(-sum(math.prod(s) for _, s in unit) // n) * n for unit in self._grouped(local)
            ]
            return sum(padded) // n, sum(padded)
        # whole tensors, no padding: a collective moves exactly the tensors
        if self.rule == "greedy":
            sizes = [math.prod(s) for _, s in local]
            owners = greedy_partition(sizes, n)
            return sum(size for size, o in zip(sizes, owners) if o == index), sum(sizes)
        held = moved = 0
        for _, shape in local:
            rows, per_row = shape[0], math.prod(shape[1:])
            chunk = -(-rows // n)
            held += max(0, min(chunk, rows - index * chunk)) * per_row
            moved += n * chunk * per_row
        return held, moved

    def local_elements(self, split: Degrees, coords: Coords = None) -> int:
        """Exact elements on the device at ``coords``, padding included where the rule stores it."""
        coords = coords or {}
        local = self.local_tensors(split, coords)
        if split.get("data", 1) > 1:
            return self.data_shard(local, split["data"], coords.get("data", 0))[0]
        return sum(math.prod(s) for _, s in local)

    def traffic_elements(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> int:
        """Elements a data-axis collective over ``padded_for`` ranks moves (padded when > 1 and
        the collective works on equal slices)."""
        local = self.local_tensors(split_other, coords)
        if padded_for > 1:
            return self.data_shard(local, padded_for, 0)[1]
        return sum(math.prod(s) for _, s in local)

    def unit_elements(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> list[int]:
        """Elements each gather unit's data-axis collective moves (whole, exact, padded by the
        rule when ``padded_for`` > 1), in forward order."""
        units = self._grouped(self.local_tensors(split_other, coords))
        if padded_for > 1:
            return [self.data_shard(unit, padded_for, 0)[1] for unit in units]
        return [sum(math.prod(s) for _, s in unit) for unit in units]

    def unit_runs(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> list[UnitRun]:
        """``unit_elements`` as runs of equal neighbours (a concrete model lists its tensors, so
        its units cost what its description costs)."""
        return unit_runs_of(list(self.unit_elements(split_other, padded_for, coords)))

    def tensor_replicated_elements(self, layers: range, last_stage: bool) -> int:
        """Elements of the tensors in ``layers`` that tensor parallelism leaves whole (tp=None)."""
        return sum(t.numel for t in self.tensors if t.tp is None and t.layer in layers)

    def padding(self, n: int) -> int:
        """Elements of padding the rule adds when sharding the whole model over ``n`` ranks."""
        return self.data_shard([(t.name, t.shape) for t in self.tensors], n, 0)[1] - self.psi

    def activation_bytes_per_microbatch(self, tensor: int, layers_here: Fraction) -> Number:
        rep = self.activation_bytes_replicated
        return (Fraction(self.activation_bytes - rep, tensor) + rep) * layers_here / self.layers

    @property
    def description(self) -> str:
        units = f", {self.gather_units} gather units" if self.gather_units > 1 else ""
        return (
            self.name or f"{len(self.tensors)} tensors, Ψ = {self.psi:,} ({self.rule} rule{units})"
        )
