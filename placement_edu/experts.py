"""Mixture of experts and expert parallelism (issue 26, item 2): the model shape, the tokens the
router sends, and what an ``expert`` mesh axis does with them.

A mixture-of-experts (MoE) layer replaces the MLP by E expert MLPs and a router that sends each
token to its top-k experts (Shazeer et al. 2017; Switch Transformer, Fedus et al. 2021, k = 1;
Mixtral, Jiang et al. 2024, k = 2 of E = 8). Each expert takes at most C tokens, its capacity
(Switch Transformer, eq. 3: tokens per batch / E × capacity factor; for top-k, GShard's k·T/E ×
capacity factor): C = ⌈k · cf · T / E⌉.

The expert axis (Megatron-LM's EP, ``--order tp-cp-ep-dp-pp``) is carved from the data axis: its e
ranks read different tokens, like data ranks, but each holds only E/e of the experts. Its modes
are fixed, not chosen (``placement.EXPERT_AXIS``): the experts' params, grads and optimizer state
are S on it; the dense weights (attention, router, norms, embeddings) are R on it, as the data
axis places them (this package derives EP beside a data axis that keeps its states whole: dp).
What follows, per MoE layer and per micro-batch (``schedule/expert_parallel.py``):

- forward: an all-to-all sends each token to the rank of its experts (dispatch), another brings
  the expert outputs back (combine); backward: the same two, reversed: 4 all-to-alls, each of
  E·C·h elements (= T·k·cf·h when E divides k·cf·T), of which (e-1)/e leave the rank;
- the experts' gradients are whole on the expert axis (the all-to-alls brought every token that
  chose them) and partial on data: reduced over the d data replicas of each expert; the dense
  gradients are partial on every rank that read other tokens: reduced over the data × expert
  group, d·e ranks (Megatron's data-parallel group; its expert-data-parallel group is the d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Sequence, TypeGuard

from placement_edu.errors import PlacementError, expect, kv_heads_of, positive_int
from placement_edu.gemm import H100_CURVE, GemmCurve, curve_factor
from placement_edu.models.ideal import IdealSlices
from placement_edu.models.splits import Coords, Degrees, Number, stage_layers
from placement_edu.mesh import Mesh
from placement_edu.placement import EXPERT_AXIS
from placement_edu.units import wrapped
from placement_edu.shown import Shown
from placement_edu.strategies import Strategy

if TYPE_CHECKING:  # the schedule imports this module
    from placement_edu.schedule.ops import Schedule

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = [
    "MIXTRAL_8X7B",
    "MoESpec",
    "Routed",
    "all_to_all_elements",
    "expert_capacity",
    "expert_matmul_flops",
    "expert_matmul_rate",
    "imbalance_text",
    "rank_load",
    "route_tokens",
]


@dataclass(frozen=True)
class MoESpec(IdealSlices):
    """A decoder whose MLPs are mixtures of experts, Mixtral-style (Llama blocks): grouped-query
    attention without biases, RMSNorm, ``experts`` SwiGLU expert MLPs per layer (gate, up and
    down projections: 3·h·f each), a router (h·E), an untied head unless ``tied``.

    Parameters per layer: attention 2h² + 2h·K·h/a, experts E·3hf, router hE, two norms 2h; plus
    the embeddings V·h (twice when untied) and the final norm h. ``active_psi``: the parameters
    one token uses, k experts of E.

    ``attention``: "eager" keeps the s² attention scores for backward (Korthikanti et al.'s
    5as²b), "flash" only the softmax's logsumexp (4asb bytes), as ``TransformerSpec`` counts them.
    ``layer_only``: the MoE layers alone, as the gloo toy runs one (``runtime/axes/expert_layer``):
    a router and E experts per layer, no attention, norms, embeddings or head (dense: L·h·E).
    """

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    experts: int
    top_k: int
    seq: int = 4096
    micro_batch: int = 1
    kv_heads: int = 0  # 0 means heads
    capacity_factor: Fraction = Fraction(1)
    tied: bool = False
    gather_units: int = 0  # 0 means one unit per layer
    name: str = ""
    attention: str = "eager"
    layer_only: bool = False

    #: The attentions whose kept activations are counted (``TransformerSpec.ATTENTION``'s).
    ATTENTION = ("eager", "flash")

    #: Column-then-row pairs per layer (attention, MLP), read by tensor-parallel pricing.
    tp_blocks_per_layer: int = field(default=2, init=False)
    recompute: str = field(default="none", init=False)
    sequence_parallel: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn", "vocab", "experts", "top_k", "seq"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        object.__setattr__(self, "micro_batch", positive_int("micro_batch", self.micro_batch))
        object.__setattr__(self, "kv_heads", kv_heads_of(self.hidden, self.heads, self.kv_heads))
        expect(
            self.top_k <= self.experts,
            f"top_k ({self.top_k}) cannot exceed the number of experts ({self.experts}): a token "
            "goes to k distinct experts",
        )
        try:
            cf = Fraction(self.capacity_factor)
        except (TypeError, ValueError):
            cf = Fraction(0)
        expect(
            cf > 0,
            f"capacity_factor must be a positive number (1 = exactly the balanced share, 1.25 "
            f"Switch Transformer's usual), got {self.capacity_factor!r}",
        )
        object.__setattr__(self, "capacity_factor", cf)
        expect(
            self.attention in self.ATTENTION,
            f"attention must be one of {', '.join(self.ATTENTION)}, got {self.attention!r}",
        )
        if self.gather_units == 0:
            object.__setattr__(self, "gather_units", self.layers)

    # --- parameters (elements) --------------------------------------------------------------
    @property
    def lookup_params(self) -> int:
        """Parameters read by lookup (``Model.lookup_params``): none counted apart, the FLOPs count
        Ψ_active (``timing.flops_per_token``)."""
        return 0

    @property
    def kv_width(self) -> int:
        """K·h/a: the width of the key (and of the value) projection's output."""
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def expert_elements_per_expert(self) -> int:
        """One SwiGLU expert of one layer: gate and up h×f, down f×h."""
        return 3 * self.hidden * self.ffn

    @property
    def expert_elements(self) -> int:
        """Every expert of every layer: L·E·3hf (S on the expert axis)."""
        return self.layers * self.experts * self.expert_elements_per_expert

    @property
    def dense_elements(self) -> int:
        """Everything else, used by every token: attention, router, norms, embeddings, head (the
        router alone, L·h·E, for ``layer_only``)."""
        h = self.hidden
        if self.layer_only:
            return self.layers * h * self.experts
        per_layer = 2 * h * h + 2 * h * self.kv_width + h * self.experts + 2 * h
        embeddings = self.vocab * h * (1 if self.tied else 2)
        return self.layers * per_layer + embeddings + h

    @property
    def psi(self) -> int:  # type: ignore[override]  # derived from the shape
        return self.dense_elements + self.expert_elements

    @property
    def active_psi(self) -> int:
        """The parameters one token runs through: the dense ones and k experts per layer."""
        return self.dense_elements + self.layers * self.top_k * self.expert_elements_per_expert

    # --- what the derivations ask of a model -------------------------------------------------
    def local_elements(self, split: Degrees, coords: Coords = None) -> Number:
        """Elements of a state on one device: the dense part over the other split axes, the
        experts over those and the expert axis too (E/e experts each)."""
        e = split.get(EXPERT_AXIS, 1)
        other = math.prod(n for axis, n in split.items() if axis != EXPERT_AXIS)
        return Fraction(self.dense_elements, other) + Fraction(self.expert_elements, other * e)

    def traffic_elements(
        self, split_other: Degrees, padded_for: int = 1, coords: Coords = None
    ) -> Number:
        """Full size of the tensor a data-axis collective moves: this rank's dense part and its
        E/e experts (Ψ-level, no padding)."""
        return self.local_elements(split_other, coords)

    @property
    def boundary_elements(self) -> int:
        """b·s·h: one activation at a block or stage boundary, for one micro-batch."""
        return self.micro_batch * self.seq * self.hidden

    @property
    def tokens(self) -> int:
        """T = b·s: the tokens one rank routes per micro-batch."""
        return self.micro_batch * self.seq

    def tensor_replicated_elements(self, layers: range, last_stage: bool) -> int:
        """Parameters left whole on every tensor rank: two RMSNorms (2h) per layer, the router
        (hE) and the final norm (h) on the last stage."""
        h = self.hidden
        return (2 * h + h * self.experts) * len(layers) + (h if last_stage else 0)

    def activation_bytes_per_microbatch(self, tensor: int, layers_here: Fraction) -> Number:
        """Activation bytes one device keeps for one micro-batch, 16-bit: Korthikanti et al.
        2022's per-layer count with its MLP term run by each of the k experts a token visits --
        attention and norms 15·sbh + 5·a·s²·b, the MLP 19·sbh per expert copy (their §4.1, for an
        MLP of f = 4h; a SwiGLU expert keeps other tensors, SPEC §3). Flash attention keeps the
        logsumexp, 4·a·s·b bytes, in place of the 5·a·s²·b scores (``TransformerSpec``'s count).
        Split over t like theirs."""
        s, b, h, a = self.seq, self.micro_batch, self.hidden, self.heads
        scores = 4 * a * s * b if self.attention == "flash" else 5 * a * s * s * b
        per_layer = s * b * h * (15 + 19 * self.top_k) + scores
        return Fraction(per_layer, tensor) * layers_here

    def recompute_working_set(self, tensor: int = 1) -> Fraction:
        """No recomputation is modelled for an MoE layer: nothing is replayed."""
        return Fraction(0)

    @property
    def description(self) -> str:
        attention = ", flash attention" if self.attention == "flash" else ""
        return self.name or (
            f"MoE: {self.layers} layers, E = {self.experts}, top-{self.top_k}, "
            f"Ψ = {self.psi:,} ({self.active_psi:,} active){attention}"
        )


#: Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, h = 4096, 32 heads, 8 kv
#: heads, intermediate_size 14336, vocab 32000, 8 local experts, 2 per token, untied head).
#: Mistral AI and Jiang et al. 2024 (arXiv 2401.04088) print 46.7B total, 12.9B active.
MIXTRAL_8X7B = MoESpec(
    layers=32,
    hidden=4096,
    heads=32,
    ffn=14336,
    vocab=32000,
    experts=8,
    top_k=2,
    seq=4096,
    kv_heads=8,
    name="Mixtral 8x7B",
)

#: A small MoE every mesh can derive: the checker's model when a mesh has an expert axis.
SMALL_MOE = MoESpec(
    layers=8,
    hidden=64,
    heads=4,
    ffn=128,
    vocab=256,
    experts=8,
    top_k=2,
    seq=32,
    name="the checker's small MoE (8 layers, E = 8, top-2)",
)


# --- the tokens the router sends ------------------------------------------------------------------
def expert_capacity(model: MoESpec) -> int:
    """C = ⌈k · cf · T / E⌉: the tokens each expert takes per micro-batch (Switch Transformer
    eq. 3, with GShard's k for top-k); routed tokens beyond it are dropped."""
    return math.ceil(model.top_k * model.capacity_factor * model.tokens / model.experts)


def all_to_all_elements(model: MoESpec) -> int:
    """S of each MoE all-to-all, for one micro-batch: E·C slots of h (the capacity buffer the
    router fills; T·k·cf·h when E divides k·cf·T). The rank keeps the 1/e of it bound for its
    own experts and sends the rest: (e-1)/e · S."""
    return model.experts * expert_capacity(model) * model.hidden


def expert_matmul_flops(model: MoESpec, e: int = 1) -> int:
    """FLOPs of one call of one of an expert's three matmuls (gate and up h → f, down f → h) in
    one micro-batch's forward: 2·(e·C)·h·f, the e·C buffer slots its rank receives for it (C
    from each of the e expert ranks; e = 1, plain data parallelism: its own C). The size a
    GEMM-size term reads (``gemm.curve_factor``): a larger expert axis runs the same expert FLOPs
    as fewer, larger matmuls."""
    return 2 * e * expert_capacity(model) * model.hidden * model.ffn


def expert_matmul_rate(model: MoESpec, e: int = 1, curve: GemmCurve = H100_CURVE) -> float:
    """The share of the curve's best FLOP/s at which one expert matmul runs (``gemm.curve_factor``
    at ``expert_matmul_flops``; default the H100's measured curve, ``gemm.H100_CURVE``). The time
    model does not apply it to a mixture of experts (``gemm.gemm_factor`` reads a dense
    transformer's matmuls): what a GEMM-size term would change is read from here."""
    return curve_factor(curve, expert_matmul_flops(model, e))


@dataclass(frozen=True)
class Routed(Shown):
    """Where one rank's tokens go, per expert (``route_tokens``): ``chosen``, the tokens whose
    top-k includes it; ``kept``, those its capacity takes; ``dropped``, the routed copies over
    capacity, summed over the experts."""

    chosen: tuple[int, ...]
    kept: tuple[int, ...]
    dropped: int


def route_tokens(logits: Sequence[Sequence[float]], top_k: int, capacity: int) -> Routed:
    """The router's rule on one rank's gate logits, T rows of E: each token goes to the k experts
    of largest logit (top-k; the gates, a softmax over those k logits, weigh the outputs and do
    not move a token), and each expert keeps the first C tokens that chose it, in token order
    (GShard's capacity; Switch Transformer's for k = 1); the rest are dropped. A tie at the k-th
    logit is refused: which expert wins it is the kernel's choice, not the rule's."""
    chosen = [0] * len(logits[0]) if logits else []
    for t, row in enumerate(logits):
        ranked = sorted(range(len(row)), key=lambda i: -row[i])
        expect(
            top_k == len(row) or row[ranked[top_k - 1]] != row[ranked[top_k]],
            f"token {t} ties at its top-{top_k} logit ({row[ranked[top_k - 1]]!r}): the rule does "
            "not say which expert takes it",
        )
        for i in ranked[:top_k]:
            chosen[i] += 1
    kept = tuple(min(n, capacity) for n in chosen)
    return Routed(tuple(chosen), kept, sum(chosen) - sum(kept))


def moe_layers_on_stage(model: MoESpec, stages: int, stage: int) -> int:
    """Every layer is an MoE layer (Mixtral; Switch Transformer puts one in every other)."""
    return len(stage_layers(model.layers, stages, stage))


def has_experts(model: object) -> TypeGuard[MoESpec]:
    """Whether ``model`` is a mixture of experts (an expert axis splits its experts)."""
    return isinstance(model, MoESpec)


def check_expert_axis(model: object, mesh: Mesh, strategy: Strategy) -> None:
    """Refuse, in one line, an expert axis that cannot be derived: on a model without experts,
    with E not divisible by e, or beside a data axis that does not keep its states whole."""
    e = mesh.degree(EXPERT_AXIS)
    if e == 1:
        return
    if not has_experts(model):
        raise PlacementError(
            f"the mesh ({mesh}) has an expert axis of {e} ranks, but the model has no experts: "
            "an expert axis splits the experts of a mixture-of-experts model (an MoESpec); put "
            "those devices on the data axis"
        )
    expect(
        model.experts % e == 0,
        f"{model.experts} experts cannot be split evenly over an expert axis of {e} ranks: each "
        f"rank holds E/e experts, so e must divide E (e.g. expert="
        f"{max(k for k in range(1, e + 1) if model.experts % k == 0)})",
    )
    from placement_edu.placement import MODEL_STATES, WHOLE

    kept = all(strategy.placement.mode(s, "data") in WHOLE for s in MODEL_STATES)
    alone = all(mesh.degree(axis) == 1 for axis in ("tensor", "replica", "context"))
    expect(
        kept and alone,
        f"{strategy.name!r} on {mesh}: expert parallelism is derived beside a data axis that "
        "keeps params, grads and optimizer state whole (dp) and pipeline stages, without tensor, "
        "replica or context axes; sharding the dense and the expert states over their two data "
        "groups (Megatron's distributed optimizer) is not derived yet",
    )


# --- load imbalance ----------------------------------------------------------------------------
@dataclass(frozen=True)
class RankLoad(Shown):
    """What one expert rank receives per MoE layer per micro-batch: tokens (routed copies), the
    bytes the dispatch all-to-all brings it from the other e - 1 ranks (an equal part of its
    tokens comes from each rank, its own stays), the FLOPs its experts run (forward, 2·3hf per
    token: three h×f matmuls) and the routed tokens its capacity drops."""

    tokens: Fraction
    received_bytes: Fraction
    forward_flops: Fraction
    dropped: Fraction


def rank_load(
    model: MoESpec,
    e: int,
    share: Fraction | int = 0,
    element_bytes: int = 2,
    dropless: bool = False,
) -> RankLoad:
    """The load of the busiest of ``e`` expert ranks when it is chosen by ``share`` of all the
    routed tokens (the routing skew; 0 or 1/e: balanced). The e ranks route e·T·k copies in all;
    the busiest receives share·e·T·k of them, an equal part from each rank. Under a capacity it
    runs at most (E/e)·C·e of them (its E/e experts take C from each of the e ranks) and drops the
    rest; ``dropless`` (Megatron's default, no capacity factor) runs them all."""
    share = Fraction(share) if share else Fraction(1, e)
    expect(
        Fraction(1, e) <= share <= 1,
        f"the busiest rank's share of the routed tokens is between 1/e = 1/{e} (balanced) and 1, "
        f"got {share}",
    )
    routed = e * model.tokens * model.top_k  # copies sent by all e ranks
    wanted = share * routed
    slots = Fraction(model.experts * expert_capacity(model))  # E/e experts, C from each of e ranks
    kept = wanted if dropless else min(wanted, slots)
    # Dropless, the buffers carry exactly the kept tokens; under a capacity they are padded to
    # the E·C slots whatever the routing, so the bytes and the experts' matmuls stay those of the
    # full buffer, and the skew shows as dropped tokens.
    carried = kept if dropless else slots
    return RankLoad(
        tokens=kept,
        received_bytes=carried * Fraction(e - 1, e) * model.hidden * element_bytes,
        forward_flops=carried * 2 * model.expert_elements_per_expert,
        dropped=wanted - kept,
    )


# --- the checker's reading of the routing ------------------------------------------------------
def routing_problems(schedule: Schedule, model: object) -> list[str]:
    """SPEC §5 (gradient integrity) for the router's tokens: every MoE all-to-all of
    ``schedule`` (a derived ``Schedule``) must carry the whole E·C·h buffer the router filled. A
    smaller one has lost a routed token: its expert never sees it, so the expert's gradient (and,
    through the combine, the dense gradients behind it) lack that token's contribution."""
    if not has_experts(model):
        return []
    from placement_edu.schedule.costs import OpKind  # the schedule imports this module

    whole = all_to_all_elements(model)  # type: ignore[arg-type]
    for op, _, _ in schedule.held():
        if op.op == OpKind.ALL_TO_ALL and op.axis == EXPERT_AXIS and op.elements < whole:
            sent = Fraction(op.elements)
            lost = Fraction(whole - sent, model.hidden)  # type: ignore[attr-defined]
            return [
                f"the {op.phase} all-to-all on the expert axis carries {_count(sent)} of the "
                f"{whole:,} "
                f"elements the router filled ({lost} token slots of h lost): routed tokens never "
                "reach their experts, so the gradient misses their contribution; send every "
                "routed token (the capacity C decides what is dropped, before the all-to-all)"
            ]
    return []


def _count(n: Fraction) -> str:
    """A whole count with thousands separators, a fraction as itself."""
    return f"{int(n):,}" if n.denominator == 1 else str(n)


def imbalance_text(model: MoESpec, e: int, share: Fraction | int, element_bytes: int = 2) -> str:
    """The busiest expert rank beside the balanced one, per MoE layer and micro-batch, dropless
    (bytes and FLOPs grow with the skew) and under the capacity (they stay, tokens drop)."""
    lines = [
        f"{model.description}, e = {e} expert ranks, busiest rank chosen by {Fraction(share)} of "
        f"the routed tokens (balanced: 1/{e}); per MoE layer and micro-batch, {element_bytes}-byte "
        "activations:"
    ]
    for label, dropless in (
        ("dropless", True),
        (f"capacity factor {model.capacity_factor}", False),
    ):
        even = rank_load(model, e, 0, element_bytes, dropless)
        busy = rank_load(model, e, share, element_bytes, dropless)
        lines.append(
            f"  {label}: tokens {_count(busy.tokens)} vs {_count(even.tokens)} balanced "
            f"({float(busy.tokens / even.tokens):.3g}x), received {_count(busy.received_bytes)} B "
            f"vs {_count(even.received_bytes)} B, expert FLOPs {_count(busy.forward_flops)} vs "
            f"{_count(even.forward_flops)}, dropped {_count(busy.dropped)} tokens"
        )
    return wrapped("\n".join(lines))
