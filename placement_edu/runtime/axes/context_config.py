"""What a context-parallel run is (``context_attention.py`` runs it): plain data, torch-free, so a
notebook kernel can make, check and launch one without importing torch; and the core's
prediction of its ops."""

from __future__ import annotations

from dataclasses import dataclass

from placement_edu.errors import expect, one_of, positive_int
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.precision import get_precision
from placement_edu.runtime.axes.toy_layer import ToyLayer
from placement_edu.schedule import derive_schedule
from placement_edu.strategies import COMPOSITIONS, CONTEXT_ATTENTIONS

#: (op, phase, payload bytes, group): what a measurement sees of a context-axis op (``Op.key``'s
#: fields that a toy layer has).
Key = tuple[str, str, int, int]


@dataclass(frozen=True)
class ContextRun(ToyLayer):
    """The toy layer (``ToyLayer``: ``batch`` sequences of ``seq`` tokens, width ``hidden``),
    ``heads`` heads, float64, on ``ranks`` context ranks, attention ``attention`` ("ring" or
    "ulysses").
    ``zigzag`` (the ring only): the sequence cut into 2c chunks and rank i holding chunks i and
    2c − 1 − i (Megatron-Core's load balancing), not chunk i of c: the same messages, and every
    rank the same causal work (``held``)."""

    attention: str
    ranks: int
    heads: int = 4
    zigzag: bool = False

    def validate(self) -> None:
        """Refused in one line before any process starts: an unknown attention, fewer than 2
        ranks, a shape the core cannot derive on them (``schedule.context.context_applies``)."""
        one_of("context attention", self.attention, CONTEXT_ATTENTIONS)
        expect(
            positive_int("ranks", self.ranks) >= 2,
            f"a context-parallel run needs at least 2 ranks, got {self.ranks}",
        )
        expect(
            not self.zigzag or self.attention == "ring",
            "zig-zag chunks balance the ring's causal work; Ulysses gathers whole heads and needs "
            "none: give zigzag=False",
        )
        expect(
            not self.zigzag or self.seq % (2 * self.ranks) == 0,
            f"zig-zag cuts the sequence into 2c = {2 * self.ranks} chunks, which must divide "
            f"s = {self.seq}",
        )
        self.predicted()

    def held(self, rank: int) -> list[int]:
        """The token positions ``rank`` holds, in the order it holds them: chunk ``rank`` of c, or
        under ``zigzag`` chunks ``rank`` and 2c − 1 − ``rank`` of 2c."""
        if not self.zigzag:
            size = self.seq // self.ranks
            return list(range(rank * size, (rank + 1) * size))
        size = self.seq // (2 * self.ranks)
        chunks = (rank, 2 * self.ranks - 1 - rank)
        return [k * size + i for k in chunks for i in range(size)]

    @property
    def world_size(self) -> int:
        return self.ranks

    def spec(self) -> TransformerSpec:
        """The core's model of the layer: one layer, b·s·h of the toy's shape."""
        return self.one_layer(TransformerSpec, heads=self.heads)

    def predicted(self) -> list[Key]:
        """The core's context-axis activation ops for rank 0, in order (float64: 8 B)."""
        strategy = COMPOSITIONS["dp×cp"].with_(context_attention=self.attention)
        mesh = Mesh.of(data=1, context=self.ranks)
        schedule = derive_schedule(strategy, self.spec(), mesh, get_precision("fp64_adam"))
        return [
            (o.op, o.phase, int(o.payload_bytes), o.group)
            for o in schedule.ops
            if o.axis == "context" and o.state.value == "activations"
        ]
