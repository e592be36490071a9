"""FSDP2's storage on one rank, as PyTorch lays it out (``fully_shard``), and its three dtypes.

- every tensor is split along dim 0 into chunks of ceil(rows/N) rows; every rank *stores* a padded
  chunk (the last ranks hold fewer rows, or none, in the same storage);
- a unit's all-gather fills one flat buffer of N padded chunks in the compute dtype, and its
  gradients are reduce-scattered from one padded flat buffer in the reduce dtype.

``peak.derive`` places these units in a step. Sizes are in elements; ``FSDPPrecision`` gives the
bytes per element of each dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping

from placement_edu.architectures import Architecture
from placement_edu.errors import PlacementError, expect, positive_int
from placement_edu.placement import State
from placement_edu.precision import PRESETS as ZERO_PRESETS
from placement_edu.precision import Precision


@dataclass(frozen=True)
class FSDPPrecision:
    """Bytes per element of FSDP2's three dtypes: the sharded parameters' storage (also Adam's m
    and v and the sharded gradients), the gathered parameters and compute (``param_dtype``), and the
    gradient reduce-scatter (``reduce_dtype``)."""

    name: str
    storage: int
    compute: int
    reduce: int

    @property
    def compute_name(self) -> str:
        return {4: "fp32", 2: "bf16"}[self.compute]

    @property
    def per_parameter(self) -> tuple[int, int, int]:
        """(P, G, O) bytes per parameter: the split a ZeRO table would print."""
        return self.storage, self.reduce, 2 * self.storage

    @classmethod
    def of(cls, name: str, preset: Precision) -> "FSDPPrecision":
        """FSDP2's three dtypes as ``preset`` states them (one definition: ``precision.PRESETS``):
        its parameters' storage, the dtype they are gathered and computed in, and the dtype their
        gradients are reduced in."""
        return cls(
            name, preset.params, preset.wire_bytes(State.PARAMS), preset.wire_bytes(State.GRADS)
        )


#: Each FSDP2 precision ``fit`` places a step in, by the ``precision.PRESETS`` entry it is:
#: fp32 throughout (fp32 shards, grads, m and v: 4/4/8 B per parameter), and
#: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (fp32 master shards, fp32 grads, fp32
#: m and v -- 4/4/8 B per parameter -- gathered and computed in bf16, reduced in fp32).
PRESET_OF: Mapping[str, str] = MappingProxyType({"fp32": "fp32_adam", "fsdp2_bf16": "fsdp2_bf16"})
PRECISIONS: Mapping[str, FSDPPrecision] = MappingProxyType(
    {name: FSDPPrecision.of(name, ZERO_PRESETS[preset]) for name, preset in PRESET_OF.items()}
)
#: ZeRO's split of the same 16 bytes, kept and named as ZeRO's (SPEC §1): 2/2/12.
ZERO_MIXED = ZERO_PRESETS["mixed_adam"]


def fsdp_precision(precision: str | FSDPPrecision) -> FSDPPrecision:
    """``precision`` by name (one of PRECISIONS) or as given; anything else is refused in one
    line."""
    prec = (
        PRECISIONS[precision]
        if isinstance(precision, str) and precision in PRECISIONS
        else precision
    )
    if not isinstance(prec, FSDPPrecision):
        raise PlacementError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    return prec


def chunk_rows(rows: int, n: int) -> int:
    """FSDP2's dim-0 chunk: ceil(rows / N) rows; every rank stores this many (padded)."""
    return -(-rows // n)


def held_rows(rows: int, n: int, rank: int) -> int:
    """Rows rank ``rank`` of ``n`` really holds: the last ranks may hold fewer, or none."""
    c = chunk_rows(rows, n)
    return max(0, min(c, rows - rank * c))


@dataclass(frozen=True)
class Unit:
    """One ``fully_shard`` unit on one rank, in elements: ``stored`` (padded chunks), ``held``
    (real rows), ``gathered`` (N padded chunks: what all-gather and reduce-scatter move),
    ``tensors`` (how many), ``numel`` (unpadded)."""

    name: str
    stored: int
    held: int
    gathered: int
    tensors: int
    numel: int
    largest_held: int


def units(arch: Architecture, n: int, rank: int) -> list[Unit]:
    """The root unit, then one per block, as rank ``rank`` of ``n`` stores them (a list of L + 1:
    ``root_and_block`` gives the two kinds, every block alike)."""
    root, block = root_and_block(arch, n, rank)
    return [root] + [replace(block, name=str(k)) for k in range(arch.layers)]


def root_and_block(arch: Architecture, n: int, rank: int) -> tuple[Unit, Unit]:
    """The root unit and one block's (every block has the same tensors, so the same unit), as
    rank ``rank`` of ``n`` stores them: the cost does not grow with the layers."""
    positive_int("devices", n)
    expect(0 <= rank < n, f"rank must be in 0..{n - 1} for {n} devices, got {rank}")
    before, after = arch.root_tensors()
    groups = {
        "root": [shape for _, shape in before + after],
        "0": [shape for _, shape in arch.block_tensors()],
    }
    out = []
    for unit, shapes in groups.items():
        stored = held = gathered = 0
        largest = 0
        for shape in shapes:
            per_row = math.prod(shape[1:])
            c = chunk_rows(shape[0], n)
            h = held_rows(shape[0], n, rank) * per_row
            stored, held, gathered = stored + c * per_row, held + h, gathered + n * c * per_row
            largest = max(largest, h)
        out.append(
            Unit(
                str(unit),
                stored,
                held,
                gathered,
                len(shapes),
                sum(math.prod(s) for s in shapes),
                largest,
            )
        )
    return out[0], out[1]
