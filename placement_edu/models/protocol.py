"""What the derivations ask of a model: the ``Model`` protocol.

Every kind of model -- ``ModelSpec`` (Ψ alone), ``TransformerSpec``, ``ConcreteModel`` (real
tensors) and ``experts.MoESpec`` -- answers these, so ``derive_memory``, ``derive_schedule``, the
checker and the time model read a model through them, whatever its kind ("go to definition" on a
model lands here). A model without attention answers the attention's questions with None (no
heads, no sequence) and "none" (nothing recomputed): ``NoAttention``.

A protocol, not a union of the kinds: ``experts.py`` builds on the models, so the models cannot
name its ``MoESpec`` without an import circle.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Protocol, Sequence

from placement_edu.models.splits import Coords, Degrees, Heads, Number, UnitRun


class Model(Heads, Protocol):
    """A model as every derivation reads it (SPEC §2-§4): its attention heads (``splits.Heads``),
    its size, how its states split over the mesh axes and its gather units, and what a step's
    activations and compute need."""

    @property
    def psi(self) -> int:
        """Ψ: the number of parameters."""
        ...

    @property
    def layers(self) -> int:
        """L: the layers (pipeline stages take whole layers)."""
        ...

    @property
    def gather_units(self) -> int:
        """How many units an SG state is gathered in (FSDP's wrapped modules)."""
        ...

    @property
    def boundary_elements(self) -> int:
        """Elements of one activation crossing a block or stage boundary (b·s·h; 0 without one)."""
        ...

    @property
    def tp_blocks_per_layer(self) -> int:
        """Column-then-row-parallel pairs per layer (2: attention and MLP)."""
        ...

    @property
    def reduces_per_unit(self) -> bool:
        """Whether a gradient reduction runs per gather unit (False: one per axis)."""
        ...

    @property
    def name(self) -> str:
        """The name it was given ("" for none)."""
        ...

    @property
    def description(self) -> str:
        """The model in words, for messages and reports."""
        ...

    @property
    def seq(self) -> int | None:
        """s: tokens in a sequence (None: a model without a sequence)."""
        ...

    @property
    def recompute(self) -> str:
        """The recomputation policy ("none", "selective", "full" or layer:K)."""
        ...

    @property
    def lookup_params(self) -> int:
        """Parameters read by lookup, not by a matmul (Llama's untied input embedding): no FLOPs."""
        ...

    def local_elements(self, split: Degrees, coords: Coords = None) -> Number:
        """Elements of a state on one device after dividing by each split axis' degree."""
        ...

    def traffic_elements(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> Number:
        """Full size of the tensor a data-axis collective moves."""
        ...

    def padding(self, n: int) -> int:
        """Elements of padding a sharding over ``n`` adds."""
        ...

    def unit_runs(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> list[UnitRun]:
        """Elements each gather unit's collective moves, in forward order, as runs of equal
        units."""
        ...

    def unit_elements(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> Sequence[Number]:
        """``unit_runs`` listed unit by unit."""
        ...

    def activation_bytes_per_microbatch(self, tensor: int, layers_here: Fraction) -> Number:
        """Activation bytes one device keeps for one micro-batch."""
        ...

    def tensor_replicated_elements(self, layers: range, last_stage: bool) -> Number:
        """Parameters of ``layers`` left whole on every tensor rank."""
        ...


class NoAttention:
    """The attention's answers of a model without attention (``ModelSpec``, ``ConcreteModel``): no
    heads, no sequence, nothing recomputed, no lookup."""

    @property
    def heads(self) -> int | None:
        return None

    @property
    def kv_heads(self) -> int | None:
        return None

    @property
    def seq(self) -> int | None:
        return None

    @property
    def recompute(self) -> str:
        return "none"

    @property
    def lookup_params(self) -> int:
        return 0
