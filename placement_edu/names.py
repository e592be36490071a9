"""The package's names: ``Word``, the kind of ``str`` enum a vocabulary is made of (op kinds,
faults), and the grammar of a composed strategy's name: one printer (``composed_name``), one
parser (``parts``, and what it reads: ``data_part``, ``sequence_parallel``), one reading of what a
user types (``spelled``).

A composition is named by its parts joined by ``×``: the data placement first (``dp``, ``zero1``,
...; on a replica axis too, ``hsdp`` for zero3 and ``zero1+replica`` for the others), then one
part per model axis, in the mesh's order: ``cp`` (ring attention; ``cp_ulysses`` for Ulysses'
all-to-alls), ``ep``, ``tp`` (``tp+sp`` with Megatron's sequence parallelism), ``pp``. So
``zero1×tp×pp``, ``zero1×tp+sp``, ``zero1×cp×tp``, ``dp×cp_ulysses``; ``single`` when no axis has
more than one device. Typed, ``x`` and ``*`` stand for ``×`` (no part's name has an x).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol, TypeVar


class Word(StrEnum):
    """A word of a vocabulary (an op kind, a fault): a ``str`` enum, so it equals, hashes, prints
    and is written to JSON as its string, in a message too (``repr`` is the string's), and a
    misspelt member is an ``AttributeError`` where a misspelt string was a silent ``False``."""

    def __repr__(self) -> str:
        return repr(self.value)


class Named(Protocol):
    """Anything with a name: a strategy, a fault, an implementation."""

    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def by_name(*items: N) -> Mapping[str, N]:
    """A read-only table of ``items``, each under its ``name`` (``STRATEGIES``, ``FAULTS``)."""
    return MappingProxyType({item.name: item for item in items})


#: What joins the parts of a composed name.
SEPARATOR = "×"
#: The name of a strategy on one device (no axis of degree > 1).
SINGLE = "single"
#: The model axes' parts, in the order a name lists them.
MODEL_AXES = ("context", "expert", "tensor", "pipeline")
#: What marks sequence parallelism on the tensor part.
SEQUENCE_PARALLEL = "+sp"


def axis_part(axis: str, sequence_parallel: bool = False, context_attention: str = "ring") -> str:
    """A model axis' part of a name: cp (cp_ulysses), ep, tp (tp+sp), pp."""
    if axis == "context":
        return "cp" if context_attention == "ring" else f"cp_{context_attention}"
    if axis == "tensor":
        return "tp" + SEQUENCE_PARALLEL * sequence_parallel
    return {"expert": "ep", "pipeline": "pp"}[axis]


def composed_name(
    data: str,
    axes: Iterable[str],
    sequence_parallel: bool = False,
    context_attention: str = "ring",
) -> str:
    """The name of ``data``'s placement composed over the mesh axes ``axes`` (those of degree
    > 1): the data part when a batch axis is there, then each model axis' part."""
    axes = tuple(axes)
    first = (
        [("hsdp" if data == "zero3" else f"{data}+replica")]
        if "replica" in axes
        else [data]
        if "data" in axes
        else []
    )
    rest = [axis_part(a, sequence_parallel, context_attention) for a in MODEL_AXES if a in axes]
    return SEPARATOR.join(first + rest) or SINGLE


def spelled(text: str, names: Collection[str] = ()) -> str:
    """``text`` as the package spells names: trimmed, lower case, ``x`` and ``*`` read as ``×``;
    but one of ``names`` typed with an x of its own stays as typed."""
    key = str(text).strip().lower()
    return key if key in names else key.replace("*", SEPARATOR).replace("x", SEPARATOR)


def parts(name: str) -> list[str]:
    """The parts of a (typed) name, in order: "zero1xtp+sp" -> ["zero1", "tp+sp"]."""
    return spelled(name).split(SEPARATOR)


def data_part(name: str) -> str:
    """The first part of a composed name: its data placement ("zero3×tp+sp" -> "zero3")."""
    return parts(name)[0]


def sequence_parallel(name: str) -> bool:
    """Whether the name's tensor part carries sequence parallelism ("zero1×tp+sp")."""
    return any(part.endswith(SEQUENCE_PARALLEL) for part in parts(name))
