"""A device mesh: named axes (data, tensor, pipeline, replica for hybrid sharding, context for
context parallelism) with degrees that multiply to the world size."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Mapping

from placement_edu.errors import (
    MAX_DEVICES,
    PlacementError,
    positive_int,
    show_limit,
    shown,
    within_device_limit,
)
from placement_edu.placement import AXES, known_axes

#: Where ranks sit (SPEC §9): the axes from outermost to innermost. Tensor is innermost, so a
#: tensor group is t consecutive ranks -- inside one node whenever t divides the GPUs per node --
#: then context, data, pipeline, replica:
#: rank = (((r_index * p + p_index) * d + d_index) * c + c_index) * t + t_index.
#: This is Megatron-LM's order (``--order tp-cp-ep-dp-pp``: tensor fastest, then context, pipeline
#: slowest) and what ``init_device_mesh(shape=(r, p, d, c, t))`` builds (its last dimension is
#: contiguous); replica sits outside pipeline, as SPEC §9 orders it (torchtitan puts its
#: dp_replicate inside pp).
#: The expert axis sits between data and context (Megatron's ep between cp and dp): an expert
#: group is e neighbours at stride c·t, carved from what was the data axis.
LAYOUT: tuple[str, ...] = ("replica", "pipeline", "data", "expert", "context", "tensor")


@dataclass(frozen=True)
class Mesh:
    """Degrees per named axis, written in the fixed order replica, data, context, tensor,
    pipeline.

    Rank layout (``LAYOUT``, SPEC §9): tensor innermost, then context, data, pipeline, replica,
    so rank = (((r_index * p + p_index) * d + d_index) * c + c_index) * t + t_index. The written
    order is only how a mesh prints ("data=4,tensor=8,pipeline=2"); where its ranks sit is
    ``LAYOUT``'s.
    """

    degrees: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        """Every mesh, however built (``Mesh.of``, ``Mesh.parse``, ``Mesh(...)``), is checked here
        once: (axis, degree) pairs, each axis known and named once, each degree a whole number
        >= 1, at most 2^40 devices in all; the axes are put in the fixed order, so two meshes
        that mean the same are equal."""
        pairs = self.degrees
        if not isinstance(pairs, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 for pair in pairs
        ):
            raise PlacementError(
                f"a Mesh holds (axis, degree) pairs, e.g. Mesh.of(data=2, tensor=2), got "
                f"{shown(pairs)} of type {type(pairs).__name__}"
            )
        known_axes((axis for axis, _ in pairs), "the mesh")
        degrees: dict[str, int] = {}
        for axis, degree in pairs:
            if axis in degrees:
                repeated_axis(",".join(f"{a}={d}" for a, d in pairs), axis, degrees[axis], degree)
            degrees[axis] = within_device_limit(
                f"axis {axis!r} of the mesh",
                positive_int(f"degree of mesh axis {axis!r}", degree),
            )
        object.__setattr__(self, "degrees", tuple((a, degrees[a]) for a in AXES if a in degrees))
        # the same degrees by axis, what ``degree`` reads (not a field: no part of the value)
        object.__setattr__(self, "_by_axis", dict(self.degrees))
        within_device_limit(f"mesh {self}", self.world_size)

    @classmethod
    def of(cls, **degrees: int) -> "Mesh":
        """``Mesh.of(data=2, tensor=2)``."""
        return cls(tuple(degrees.items()))

    @classmethod
    def parse(cls, text: str) -> "Mesh":
        """Read ``"data=2,tensor=2"``."""
        if not isinstance(text, str):
            raise PlacementError(
                f'a mesh is text like "data=2,tensor=2", got {text!r} of type {type(text).__name__}'
            )
        degrees: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            axis, sep, value = (s.strip() for s in part.partition("="))
            if not sep:
                raise PlacementError(
                    f"mesh entry {shown(part)} is not AXIS=DEGREE (e.g. data=2,tensor=2)"
                )
            try:
                degree = int(value)
            except ValueError:  # also a number of more than 4,300 digits (Python's own limit)
                raise PlacementError(
                    f"mesh degree {shown(value)} for axis {shown(axis)} is "
                    + (
                        f"more than {show_limit(MAX_DEVICES)} devices"
                        if value.isdigit()
                        else "not a whole number"
                    )
                ) from None
            if axis in degrees:
                repeated_axis(text, axis, degrees[axis], degree)
            degrees[axis] = degree
        if not degrees:
            raise PlacementError(f"mesh {text!r} names no axis; expected e.g. data=2,tensor=2")
        return cls.of(**degrees)

    def degree(self, axis: str) -> int:
        """The degree of ``axis`` (1 when the mesh does not have it)."""
        return self._by_axis.get(axis, 1)  # type: ignore[attr-defined, no-any-return]

    @property
    def world_size(self) -> int:
        return math.prod(d for _, d in self.degrees)

    def coords(self, rank: int) -> dict[str, int]:
        """The index of ``rank`` along data, tensor and pipeline (and replica or context when the
        mesh has them)."""
        return dict(_coords(self, rank))

    def stride(self, axis: str) -> int:
        """How far apart two neighbours along ``axis`` sit: the product of the degrees of the axes
        inside it in ``LAYOUT`` (1 for tensor)."""
        known_axes((axis,), "Mesh.stride")
        return math.prod(self.degree(a) for a in LAYOUT[LAYOUT.index(axis) + 1 :])

    def group(self, rank: int, axis: str) -> list[int]:
        """The ranks that share every coordinate with ``rank`` except along ``axis``."""
        # A step along ``axis`` moves the rank by ``stride(axis)``: the group is an arithmetic
        # run of ranks (computed, not searched, so a mesh of 2^40 devices costs no more than one
        # of 4).
        mine = self.coords(rank)
        stride = self.stride(axis) if axis in AXES else 1
        first = rank - mine.get(axis, 0) * stride
        return [first + i * stride for i in range(self.degree(axis))]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.degrees)

    def __str__(self) -> str:
        return ",".join(f"{a}={d}" for a, d in self.degrees)


@lru_cache(maxsize=4096)  # (the planner asks rank 0's of each of thousands of meshes many times)
def _coords(mesh: Mesh, rank: int) -> tuple[tuple[str, int], ...]:
    """``Mesh.coords``, as pairs."""
    if not 0 <= rank < mesh.world_size:
        raise PlacementError(f"rank {rank} is outside a mesh of {mesh.world_size} devices")
    out: dict[str, int] = {}
    for axis in reversed(LAYOUT):
        out[axis] = rank % mesh.degree(axis)
        rank //= mesh.degree(axis)
    optional = ("replica", "expert", "context")  # listed only on a mesh that has them
    on_mesh = dict(mesh.degrees)
    return tuple((axis, out[axis]) for axis in AXES if axis not in optional or axis in on_mesh)


def repeated_axis(text: str, axis: str, first: object, second: object) -> None:
    """Refuse a mesh that names ``axis`` twice (``"data=4,data=2"``): the one rule, for every mesh
    read from text (the command line, ``Mesh.parse``, ``analyze``, ``RunConfig``, torchrun)."""
    whole = all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in (first, second))
    merged = f"{axis}={first * second}" if whole else f"{axis}=N"  # type: ignore[operator]
    raise PlacementError(
        f"mesh {shown(text)} names axis {shown(axis)} twice; expected each axis at most once, "
        f"because an axis has one degree (e.g. {merged})"
    )


def as_mesh(mesh: Mesh | Mapping[str, int] | str) -> Mesh:
    if isinstance(mesh, Mesh):
        return mesh
    if isinstance(mesh, str):
        return Mesh.parse(mesh)
    if isinstance(mesh, (int, float)):  # refused everywhere (the door, ``setting.resolve``, too)
        raise PlacementError(
            f'mesh must be a Mesh, text like "data=4" or a mapping {{axis: degree}}, got '
            f"{shown(mesh)}, a bare number (for N devices on the strategy's own axis: devices=N)"
        )
    if not isinstance(mesh, Mapping) or not all(isinstance(axis, str) for axis in mesh):
        raise PlacementError(
            f'mesh must be a Mesh, text like "data=2,tensor=2" or a mapping '
            f"{{axis: degree}}, got {mesh!r} of type {type(mesh).__name__}"
        )
    return Mesh.of(**mesh)
