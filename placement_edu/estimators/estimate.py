"""What an estimate is: named terms of exact bytes and how they combine (a sum, or the largest).

Every tool's figure (``deepspeed.py``, ``megatron.py``, ``accelerate.py``) and ours
(``reconcile.ours``) is an ``Estimate`` of ``Term`` s, each of one kind of KINDS, so that
``reconcile`` lines the two sides up kind by kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Union

from placement_edu.errors import expect
from placement_edu.shown import Shown

Bytes = Union[int, Fraction]

#: What a term corresponds to on our side: one of our three model states, a transient term, or
#: something only the other tool counts. ``reconcile`` compares the two sides kind by kind.
KINDS = (
    "params",
    "grads",
    "optimizer",
    "window",
    "activations",
    "load",
    "step",
    "buffer",
    "rounding",
)


@dataclass(frozen=True)
class Term:
    """One named part of an estimate: ``bytes`` (exact), ``why`` (where it comes from), ``kind``
    (one of KINDS: what it is compared with on the other side)."""

    name: str
    bytes: Bytes
    why: str
    kind: str

    def __post_init__(self) -> None:
        expect(
            self.kind in KINDS,
            f"term {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}",
        )


@dataclass(frozen=True)
class Estimate(Shown):
    """One figure a tool prints (or we derive): its terms and how they combine.

    ``rule`` is "sum" (the terms add up: DeepSpeed, Megatron, ours) or "max" (the largest term is
    the figure: Accelerate prints the largest phase). ``printed`` is the figure as the tool prints
    it, and ``unit`` says what that unit really is."""

    convention: str
    quantity: str
    terms: tuple[Term, ...]
    printed: str
    unit: str
    rule: str = "sum"

    @property
    def total_bytes(self) -> Bytes:
        """The figure in bytes: the sum of the terms, or the largest one when ``rule`` is "max"."""
        sizes = [t.bytes for t in self.terms]
        return (max(sizes) if self.rule == "max" else sum(sizes)) if sizes else 0

    def kind_bytes(self, kind: str) -> Bytes:
        """Bytes of the terms of ``kind`` (summed: the parts of one phase or one state)."""
        return sum((t.bytes for t in self.terms if t.kind == kind), 0)
