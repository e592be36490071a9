"""The toy MoE layer's description and its comparison with the core, without torch (a kernel
that describes a run imports no torch until ranks start): ``ExpertRun``, the core's prediction
for it (``ExpertRun.predicted``), and ``measured_is_predicted``. The run itself:
``runtime/axes/expert_layer.py``."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from placement_edu.errors import expect, positive_int
from placement_edu.experts import MoESpec
from placement_edu.mesh import Mesh
from placement_edu.precision import get_precision
from placement_edu.runtime.axes.toy_layer import ToyLayer
from placement_edu.schedule import derive_schedule
from placement_edu.strategies import STRATEGIES

#: (phase, op, state, axis, group, payload bytes, ring bytes): what the ledger and the core's
#: ``Op`` both say of one collective.
Key = tuple[str, str, str, str | None, int, int, int]
#: How long a collective may wait for the other ranks (seconds).
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ExpertRun(ToyLayer):
    """The toy layer (``ToyLayer``: ``batch`` sequences of ``seq`` tokens per rank, width
    ``hidden``), ``experts`` SwiGLU experts of width ``ffn``, top-``top_k``, float64, on ``ranks``
    expert ranks, times
    ``data`` replicas of each expert (mesh ``data=d,expert=e``: d·e ranks, each its own tokens).
    Faults: ``drop`` (drop-routed-tokens: the block bound for the last expert rank is left out)
    and ``skip_expert_reduce`` (skip-expert-grad-reduce: the experts' grads are not summed over
    their data replicas)."""

    ranks: int
    top_k: int
    experts: int = 4
    ffn: int = 16
    capacity_factor: Fraction = Fraction(1)
    drop: bool = False
    data: int = 1
    skip_expert_reduce: bool = False

    @property
    def world(self) -> int:
        """d·e ranks: expert inside data (``mesh.LAYOUT``): rank = data index · e + expert index."""
        return self.data * self.ranks

    @property
    def world_size(self) -> int:
        """The launcher's name for ``world``."""
        return self.world

    def validate(self) -> None:
        """Refused in one line before any process starts: fewer than 2 expert ranks, a top-k
        outside 1..E, a shape the core cannot derive on them (``experts.check_expert_axis``)."""
        expect(
            positive_int("ranks", self.ranks) >= 2,
            f"an expert-parallel run needs at least 2 expert ranks, got {self.ranks}",
        )
        expect(
            1 <= positive_int("top_k", self.top_k) <= self.experts,
            f"top_k must be 1 to {self.experts} (the experts), got {self.top_k}",
        )
        positive_int("data", self.data)
        self.predicted()

    def spec(self) -> MoESpec:
        """The core's model of the layer: one MoE layer of the toy's shape, alone (a router and
        its experts: ``MoESpec.layer_only``), so the core's dense grads are the toy's router."""
        return self.one_layer(
            MoESpec,
            heads=1,
            ffn=self.ffn,
            experts=self.experts,
            top_k=self.top_k,
            capacity_factor=self.capacity_factor,
            layer_only=True,
        )

    def predicted(self) -> list[Key]:
        """The core's collectives for rank 0 after start-up, in order (float64: 8 B): four
        all-to-alls on the expert axis, the dense all-reduce, the experts' all-reduce on data."""
        mesh = Mesh.of(data=self.data, expert=self.ranks)
        schedule = derive_schedule(STRATEGIES["dp"], self.spec(), mesh, get_precision("fp64_adam"))
        return [key(o) for o in schedule.per_step if o.is_collective]


def key(o: Any) -> Key:
    """An ``Op``'s or a ledger ``Entry``'s fields that both have."""
    ring = int(o.ring_bytes)
    return (o.phase, o.op, str(o.state), o.axis, o.group, int(o.payload_bytes), ring)


def measured_is_predicted(measured: list[Key], predicted: list[Key]) -> bool:
    """The ledger against the core, entry by entry, every field: the all-to-alls, the dense
    all-reduce (the toy's router: the core's model is the layer alone) and the experts'
    all-reduce on data."""
    return list(measured) == list(predicted)
