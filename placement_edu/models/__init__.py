"""Model specifications: how big each state is before any placement divides it.

Three kinds, simplest first:
- ``ModelSpec``: abstract, Ψ parameters (what the ZeRO paper's tables use); ideal slices Ψ/N.
- ``TransformerSpec``: layers, hidden, heads, ffn, sequence, vocab, micro-batch; parameter count
  and the activation terms of Korthikanti et al. 2022 (SPEC §3).
- ``ConcreteModel``: the exact tensors of a torch ``nn.Module``; slices follow a real sharding
  rule (ZeRO's flat padded buffer, or FSDP2's per-tensor dim-0 chunks) and report their padding.

All sizes are in *elements*; the precision preset turns them into bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Union

from placement_edu.errors import (
    MAX_LISTED_OPS,
    PlacementError,
    expect,
    non_negative_int,
    positive_int,
)

if TYPE_CHECKING:  # torch is only needed to read a real module
    import torch

    from placement_edu.experts import MoESpec  # (experts.py builds on this module)

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["ConcreteModel", "ModelSpec", "TensorSpec", "TransformerSpec", "greedy_partition"]

Number = Union[int, Fraction]
#: A run of equal gather units, in forward order: (elements of one unit, how many in a row). A
#: model of 10^12 equal layers is one run, not a list of 10^12 sizes.
UnitRun = tuple[Number, int]
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


def unit_runs_of(sizes: list[Number]) -> list[UnitRun]:
    """``sizes`` (one per unit, in order) held as runs of equal neighbours: [3, 3, 5] ->
    [(3, 2), (5, 1)]."""
    runs: list[UnitRun] = []
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1] = (size, runs[-1][1] + 1)
        else:
            runs.append((size, 1))
    return runs


def prefetched_window(runs: list[UnitRun]) -> Number:
    """Elements gathered at once when units are gathered one at a time with one prefetched: the
    unit computing and the next one, whose all-gather runs beside it -- the largest two
    neighbours in forward order (backward walks the same pairs in reverse); a lone unit is
    itself. PyTorch FSDP's forward and backward prefetch (Zhao et al. 2023, "PyTorch FSDP",
    §3.3; PyTorch's FSDP Notes, "FSDP Prefetch Nuances": the next all-gather's output is
    allocated while the current one is in use) and FSDP2's defaults (pytorch/pytorch#128884:
    "allows two all-gather output tensors to be alive at once" in forward, one unit prefetched
    in backward) keep two units' parameters alive."""
    sizes = [size for size, _ in runs]
    pairs = [2 * size for size, times in runs if times > 1]  # two equal neighbours in one run
    pairs += [a + b for a, b in zip(sizes, sizes[1:])]  # the last of a run and the next run's
    return max(pairs, default=sizes[0] if sizes else 0)


def per_layer_units(model: Any) -> None:
    """Give ``model`` one gather unit per layer where its ``gather_units`` is 0, the default:
    FSDP's usual wrapping, ``fully_shard`` on each block (one definition for every model kind)."""
    if model.gather_units == 0 and not isinstance(model.gather_units, bool):
        object.__setattr__(model, "gather_units", model.layers)


def stage_units(units: int, layers: int, stages: int, stage: int) -> int:
    """Gather units on pipeline ``stage``: the model's ``units`` times the stage's share of its
    layers (``stage_layers``: a stage holds whole layers), at least 1."""
    if stages <= 1 or layers < stages:
        return units
    return max(1, units * len(stage_layers(layers, stages, stage)) // layers)


def listed_units(runs: list[UnitRun]) -> list[Number]:
    """``runs`` listed unit by unit; refused above ``MAX_LISTED_OPS`` units (the runs hold any
    number of them)."""
    n = sum(times for _, times in runs)
    expect(
        n <= MAX_LISTED_OPS,
        f"listing {n:,} gather units one by one stops at {MAX_LISTED_OPS:,}; unit_runs holds "
        "them as runs of equal units, (elements of one, how many)",
    )
    return [size for size, times in runs for _ in range(times)]


def heads_divide(model: object, tensor: int) -> bool:
    """Whether ``tensor`` ranks can each hold whole attention heads of ``model`` -- and, under
    grouped-query attention, whole key-value heads (Megatron asserts num_query_groups % t == 0):
    the rule that ``tensor_divides_heads`` enforces and the planner's search keeps to (True for a
    model without heads)."""
    heads = getattr(model, "heads", None)
    if not isinstance(heads, int) or tensor < 1:
        return True
    kv_heads = getattr(model, "kv_heads", heads)
    return heads % tensor == 0 and kv_heads % tensor == 0


def tensor_divides_heads(model: object, tensor: int) -> None:
    """Refuse a tensor degree that does not divide the model's attention heads: Megatron's tensor
    parallelism gives each tensor rank whole heads (Q, K and V split by head), so t must divide a.

    The one rule for the analyses (``analyze``, ``check``, Megatron's estimate) and the runs alike;
    ``model`` is anything with ``heads`` (a ``TransformerSpec``, the runtime's toy transformer) --
    a model without heads (Ψ alone, a list of tensors) has nothing to refuse here."""
    if heads_divide(model, tensor):
        return
    heads = getattr(model, "heads")
    kv_heads = getattr(model, "kv_heads", heads)
    if heads % tensor == 0:  # the key-value heads do not split
        raise PlacementError(
            f"tensor degree {tensor:,} does not divide the {kv_heads:,} key-value heads; expected "
            f"a divisor of {kv_heads:,}, because each tensor rank computes whole key-value heads "
            "(Megatron splits grouped-query attention by query groups)"
        )
    divisors = [d for d in range(1, min(heads, 4096) + 1) if heads % d == 0]
    listed = (
        f" ({', '.join(map(str, divisors[:-1]))} or {divisors[-1]})"
        if heads <= 4096 and len(divisors) <= 16
        else ""
    )
    raise PlacementError(
        f"tensor degree {tensor:,} does not divide the {heads:,} attention heads; expected a "
        f"divisor of {heads:,}{listed}, because each tensor rank computes whole heads "
        "(Megatron splits attention by heads)"
    )


def stage_layers(layers: int, stages: int, stage: int) -> range:
    """The contiguous layers of pipeline ``stage`` of ``stages`` (earlier stages take the extra
    layers): the one stage split every derivation and the runtime use."""
    expect(
        layers >= stages,
        f"{layers} layers cannot fill {stages} pipeline stages (one layer at least each)",
    )
    base, extra = divmod(layers, stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


class IdealSlices:
    """What the derivations ask of a model, for the Ψ-level formula: a state split over axes of
    degrees d1, d2, ... holds exactly Ψ/(d1·d2·...) elements per device, with no padding."""

    psi: int

    def local_elements(
        self, split: Mapping[str, int], coords: Mapping[str, int] | None = None
    ) -> Number:
        """Elements of a state on one device after dividing by each split axis' degree."""
        return Fraction(self.psi, math.prod(split.values()))

    def traffic_elements(
        self,
        split_other: Mapping[str, int],
        padded_for: int = 1,
        coords: Mapping[str, int] | None = None,
    ) -> Number:
        """Full size of the tensor a data-axis collective moves: Ψ over the other axes' splits."""
        return Fraction(self.psi, math.prod(split_other.values()))

    def padding(self, n: int) -> int:
        """Elements of padding a sharding over ``n`` adds: none for the ideal formula."""
        return 0

    def unit_runs(
        self,
        split_other: Mapping[str, int],
        padded_for: int = 1,
        coords: Mapping[str, int] | None = None,
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
        self,
        split_other: Mapping[str, int],
        padded_for: int = 1,
        coords: Mapping[str, int] | None = None,
    ) -> list[Number]:
        """``unit_runs`` listed unit by unit."""
        return listed_units(self.unit_runs(split_other, padded_for, coords))

    #: An abstract model is reduced in one collective per axis (its units are Ψ-level parts).
    reduces_per_unit = False


@dataclass(frozen=True)
class ModelSpec(IdealSlices):
    """An abstract model of ``psi`` parameters.

    ``layers``: units the parameters are split into (pipeline stages take whole layers).
    ``gather_units``: how many equal units an SG state is gathered in (0, the default: one per
    layer, FSDP wrapping each of L layers; 1 = the whole model at once, the worst case). The live
    gather window is two units: the one computing and the next, prefetched (``prefetched_window``).
    ``boundary_elements``: elements of one activation crossing a block or stage boundary for one
    micro-batch (b·s·h for a transformer); drives tensor- and pipeline-parallel traffic.
    ``activation_bytes``: activation bytes one device keeps for one micro-batch without parallelism.
    ``tp_blocks_per_layer``: column-then-row-parallel pairs per layer (2 for attention + MLP).
    ``replicated_elements``: parameters tensor parallelism leaves whole on every tensor rank (norms,
    row-parallel biases). The Ψ-level formula still divides all Ψ by t; this count only prices the
    all-reduce their gradients need on the tensor axis under sequence parallelism (SPEC §6 rule 3).
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


#: torchtitan's layer selective AC, ``selective_ac_option = "K"``: ``layer:K``, K at most this.
MAX_EVERY = 10_000
LAYER_K = (
    "layer:K: torchtitan's layer selective AC (selective_ac_option = 'K'): every K-th block "
    "checkpointed as full, the others kept (K from 1 to 10,000)"
)


def layer_k(text: str) -> str | None:
    """``layer:K`` as written once (``layer:02`` is ``layer:2``), K from 1 to ``MAX_EVERY``; None
    if ``text`` is not such a policy."""
    name, _, k = text.partition(":")
    if name == "layer" and k.isdigit() and len(k) <= 5 and 1 <= int(k) <= MAX_EVERY:
        return f"layer:{int(k)}"
    return None


def every_kth(recompute: str) -> int:
    """K of ``layer:K`` (every K-th block checkpointed), 0 for every other policy."""
    return int(recompute.partition(":")[2]) if recompute.startswith("layer:") else 0


@dataclass(frozen=True)
class TransformerSpec(IdealSlices):
    """A decoder: ``layers`` blocks of attention + MLP. ``block`` "gpt" (the default): GPT's,
    learned positions, tied embeddings, biases, LayerNorm, a 2-matrix MLP; "llama": Llama's,
    RoPE (no position table), untied embeddings, no biases, RMSNorm, SwiGLU (gate, up, down).

    Parameter count per layer: 4h² + 4h (QKV and output projections with biases) + 2hf + f + h
    (MLP with biases) + 4h (two layernorms); plus embeddings V·h + s·h and a final layernorm 2h.
    With f = 4h this is Megatron's 12h² + 13h per layer (Narayanan et al. 2021, §5.1).
    A Llama block: 2h² + 2h·K·h/a attention, 3hf SwiGLU, 2h for its two RMSNorm weights; plus
    2·V·h untied embeddings and a final RMSNorm h (Llama-3-8B: 8,030,261,248).

    ``kv_heads`` (0 means ``heads``): grouped-query attention's key-value heads K; the key and
    value projections are K·(h/a) wide, so attention's weights are 2h² + 2h·K·h/a (+ biases
    h + h + 2K·h/a) instead of 4h² + 4h. ``attention``: how attention is computed, apart from
    recomputation -- "eager" (softmax and dropout as separate ops: the 5as²b bytes Korthikanti et
    al. count) or "flash" (FlashAttention: no s² tensor is kept, only the logsumexp).
    """

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    micro_batch: int = 1
    ffn: int = 0  # 0 means 4 * hidden
    sequence_parallel: bool = False
    #: Activation recomputation (Korthikanti et al. 2022): "none"; "selective" (attention's
    #: softmax and dropout recomputed: the 5as/h term goes); "full" (only the layer input is kept,
    #: 2·s·b·h bytes per layer). True and False are read as "full" and "none".
    recompute: str = "none"
    gather_units: int = 0  # 0 means one unit per layer (FSDP's usual wrapping)
    name: str = ""
    kv_heads: int = 0  # 0 means heads (multi-head attention, no GQA)
    attention: str = "eager"
    block: str = "gpt"

    RECOMPUTE = ("none", "selective", "full")
    #: The blocks a transformer is built of: GPT's, and Llama's (SwiGLU, RMSNorm, RoPE, untied).
    BLOCKS = ("gpt", "llama")
    #: How attention is computed (apart from recomputation): see ``activation_terms_per_layer``.
    ATTENTION = ("eager", "flash")

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq", "vocab", "micro_batch"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        recompute = self.recompute
        if isinstance(recompute, bool):  # the old flag: True meant full recomputation
            recompute = "full" if recompute else "none"
        if isinstance(recompute, str) and recompute not in self.RECOMPUTE:
            recompute = layer_k(recompute) or recompute
        expect(
            isinstance(recompute, str) and (recompute in self.RECOMPUTE or every_kth(recompute)),
            f"recompute must be one of {', '.join(self.RECOMPUTE)} (or True = full, False = none) "
            f"or layer:K (K from 1 to {MAX_EVERY:,}), got {self.recompute!r}",
        )
        object.__setattr__(self, "recompute", recompute)
        if self.ffn == 0 and not isinstance(self.ffn, bool):
            object.__setattr__(self, "ffn", 4 * self.hidden)
        object.__setattr__(self, "ffn", positive_int("ffn", self.ffn))
        per_layer_units(self)
        expect(
            self.hidden % self.heads == 0,
            f"hidden ({self.hidden}) must be divisible by heads ({self.heads})",
        )
        if self.kv_heads == 0 and not isinstance(self.kv_heads, bool):
            object.__setattr__(self, "kv_heads", self.heads)
        kv = positive_int("kv_heads", self.kv_heads)
        expect(
            self.heads % kv == 0,
            f"kv_heads ({kv}) must divide heads ({self.heads}): each key-value head serves "
            "heads / kv_heads query heads",
        )
        expect(
            self.attention in self.ATTENTION,
            f"attention must be one of {', '.join(self.ATTENTION)}, got {self.attention!r}",
        )
        expect(
            self.block in self.BLOCKS,
            f"block must be one of {', '.join(self.BLOCKS)}, got {self.block!r}",
        )

    @property
    def llama(self) -> bool:
        return self.block == "llama"

    @property
    def kv_width(self) -> int:
        """K·h/a: the width of the key (and of the value) projection's output."""
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def psi(self) -> int:  # type: ignore[override]  # derived from the shape (ModelSpec's is a field)
        h, f, kv = self.hidden, self.ffn, self.kv_width
        if self.llama:  # no biases; SwiGLU's three matrices; two RMSNorm weights; untied, RoPE
            per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
            return self.layers * per_layer + 2 * self.vocab * h + h
        attention = 2 * h * h + 2 * h + 2 * h * kv + 2 * kv  # Q and out h² + h each; K, V h·kv + kv
        per_layer = attention + 2 * h * f + f + h + 4 * h
        return self.layers * per_layer + self.vocab * h + self.seq * h + 2 * h

    @property
    def checkpointed_layers(self) -> int:
        """Layers recomputation checkpoints whole: all under "full", L // K under torchtitan's
        layer:K (its every K-th block), none otherwise."""
        every = every_kth(self.recompute)
        return self.layers // every if every else self.layers if self.recompute == "full" else 0

    @property
    def lookup_params(self) -> int:
        """Parameters read by a lookup, not a matmul, that FLOP counts leave out: a Llama's
        untied input embedding V·h (torchtitan's ``get_num_flop_per_token`` excludes it). GPT's
        tied embedding is the logit layer's matmul, counted (as is its small position table,
        the package's convention since its first figures)."""
        return self.vocab * self.hidden if self.llama else 0

    @property
    def boundary_elements(self) -> int:
        """b·s·h: one activation at a block or stage boundary, for one micro-batch."""
        return self.micro_batch * self.seq * self.hidden

    tp_blocks_per_layer: int = field(default=2, init=False)

    def tensor_replicated_elements(self, layers: range, last_stage: bool) -> int:
        """Parameters Megatron leaves whole on every tensor rank: two layernorms (4h) and the biases
        of the two row-parallel layers (2h) per layer, and the final layernorm (2h) on the last
        stage. A Llama block: its two RMSNorm weights (2h), the final one (h)."""
        if self.llama:
            return 2 * self.hidden * len(layers) + (self.hidden if last_stage else 0)
        return 6 * self.hidden * len(layers) + (2 * self.hidden if last_stage else 0)

    def activation_bytes_per_layer(self, tensor: int = 1) -> Fraction:
        """Bytes of activations one layer keeps for backward, for one micro-batch on one of
        ``tensor`` tensor-parallel ranks: Korthikanti et al. 2022, "Reducing Activation
        Recomputation in Large Transformer Models", Table 2 (16-bit; the coefficients are already
        bytes, SPEC §3).

        ==================  ==========================  ====================
        recompute           tensor parallel t           with sequence parallel
        ==================  ==========================  ====================
        "none"              sbh(10 + 24/t + 5as/(ht))   sbh(34/t + 5as/(ht))
        "selective"         sbh(10 + 24/t)              sbh·34/t
        "full"              2sbh (the layer input)      2sbh/t
        ==================  ==========================  ====================

        At t = 1 the first column is sbh(34 + 5as/h); selective recomputation drops the 5as/h term
        (attention's softmax and dropout, recomputed in backward). That is eager attention with
        multi-head attention; flash attention keeps the logsumexp (4as·b/t bytes) in place of the
        5as²b/t, and grouped-query attention narrows the key and value flash attention keeps. The
        sum of ``activation_terms_per_layer``, where each term is derived."""
        return sum(self.activation_terms_per_layer(tensor).values(), Fraction(0))

    def activation_bytes_per_microbatch(self, tensor: int, layers_here: Fraction) -> Number:
        return self.activation_bytes_per_layer(tensor) * layers_here

    #: The named terms of ``activation_terms_per_layer``, in drawing order.
    ACTIVATION_TERMS = ("outside_tp", "inside_tp", "attention_scores", "layer_input")

    def activation_terms_per_layer(self, tensor: int = 1) -> dict[str, Fraction]:
        """``activation_bytes_per_layer`` split into Korthikanti et al.'s named terms (bytes, one
        micro-batch, one of ``tensor`` ranks); the values sum to it exactly, every key present:

        - ``outside_tp``: 10·sbh, what tensor parallelism leaves whole on every rank (the two
          layernorm inputs 4sbh, the attention and MLP block inputs 2sbh each, two dropout masks
          sbh each); sequence parallelism splits it over t: 10·sbh/t.
        - ``inside_tp``: 24·sbh/t, the tensors between a column- and a row-parallel layer: Q, K
          and V (2sbh each), the output projection's input 2sbh, the MLP's 8sbh twice. Under
          grouped-query attention flash attention keeps K and V at their K·h/a width:
          sbh(20 + 4K/a)/t; eager attention expands them to every head before QKᵀ (Megatron's
          local attention ``repeat_interleave``, HF's ``repeat_kv``) and keeps 24·sbh/t.
        - ``attention_scores``: eager attention, 5as²b/t: the softmax output 2as²b, its dropout
          mask as²b and the dropout output 2as²b (Korthikanti et al. 2022, §4.1). Flash attention
          keeps none of these, only the softmax's logsumexp, one fp32 per head and token: 4asb/t
          bytes (FlashAttention-2, Dao 2023, Algorithm 1 writes the logsumexp L to HBM; PyTorch's
          ``_scaled_dot_product_flash_attention`` saves ``logsumexp`` [b, a, s] fp32 beside
          q, k, v and the output). 0 under selective recomputation, whichever attention: what
          Megatron's ``--recompute-granularity selective`` recomputes is core attention.
        - ``layer_input``: 2sbh (2sbh/t with sequence parallelism), all full recomputation keeps
          (the layer being recomputed: ``recompute_working_set``).

        A Llama block (``block="llama"``, no dropout), as Megatron-LM runs it: ``outside_tp``
        8·sbh (two RMSNorm inputs, the attention and MLP inputs); ``inside_tp`` Q, K, V and the
        output projection's input as above, and the MLP's 6·sbf: its first matmul's [s, b, 2f]
        output (gate and up side by side), all Megatron's fused SwiGLU saves
        (megatron/core/fusions/fused_bias_swiglu.py: ``SwiGLUFunction`` saves its input and
        recomputes silu in backward), and the second matmul's [s, b, f] input. (HF's Llama, op by
        op, keeps gate, up, silu(gate) and their product: 8·sbf, as ``fit`` measures.) Eager
        ``attention_scores``: the softmax output alone, 2as²b/t (Megatron's fused softmax writes
        16 bits)."""
        s, b, h, a, t = (
            self.seq,
            self.micro_batch,
            self.hidden,
            self.heads,
            positive_int("tensor", tensor),
        )
        sbh = s * b * h
        terms = {name: Fraction(0) for name in self.ACTIVATION_TERMS}
        if every_kth(self.recompute):  # torchtitan's layer:K: k = L // K layers as under full
            k, L = self.checkpointed_layers, self.layers
            kept, full = (
                replace(self, recompute=r).activation_terms_per_layer(tensor)
                for r in ("none", "full")
            )
            return {n: (kept[n] * (L - k) + full[n] * k) / L for n in self.ACTIVATION_TERMS}
        if self.recompute == "full":
            terms["layer_input"] = Fraction(2 * sbh, t if self.sequence_parallel else 1)
            return terms
        outside = 8 if self.llama else 10
        terms["outside_tp"] = Fraction(outside * sbh, t if self.sequence_parallel else 1)
        flash = self.attention == "flash"
        kv_kept = self.kv_heads if flash else a  # eager expands K and V to every head
        if self.llama:  # Q, output input 2sbh each, K and V, then the MLP's 2f- and f-wide
            attention = sbh * Fraction(4 * a + 4 * kv_kept, a * t)
            terms["inside_tp"] = attention + Fraction(6 * s * b * self.ffn, t)
        else:
            terms["inside_tp"] = sbh * Fraction(20 * a + 4 * kv_kept, a * t)
        if self.recompute == "none":
            scores = 2 if self.llama else 5  # (no dropout in a Llama block)
            terms["attention_scores"] = (
                Fraction(4 * a * s * b, t) if flash else sbh * Fraction(scores * a * s, h * t)
            )
        return terms

    def recompute_working_set(self, tensor: int = 1) -> Fraction:
        """Bytes live on top of the kept activations while one layer's backward runs under full
        recomputation, one micro-batch on one of ``tensor`` ranks: the layer's forward is replayed
        and keeps everything a layer without recomputation keeps (``activation_bytes_per_layer``
        of "none", same attention) until its backward is done: the checkpointed inputs of every
        layer plus one layer's full activations. 0 under
        "none" and "selective", whose layers keep their activations already; under layer:K the
        same as "full" (a checkpointed layer replays), 0 where no layer is checkpointed (K > L)."""
        if not self.checkpointed_layers:
            return Fraction(0)
        return replace(self, recompute="none").activation_bytes_per_layer(tensor)

    @property
    def description(self) -> str:
        kv = f" K={self.kv_heads}" if self.kv_heads != self.heads else ""
        attention = f", {self.attention} attention" if self.attention != "eager" else ""
        kind = "Llama-block transformer" if self.llama else "transformer"
        return self.name or (
            f"{kind} L={self.layers} h={self.hidden} a={self.heads}{kv} "
            f"s={self.seq} V={self.vocab} b={self.micro_batch} (Ψ = {self.psi:,}){attention}"
        )


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
    shapes, read without importing torch (``runtime/toy_shapes.py``)."""

    def named_parameters(self) -> Iterable[tuple[str, Any]]: ...


@dataclass(frozen=True)
class ConcreteModel:
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
        expect(
            self.units in GATHER_UNITS,
            f"unknown gather units {self.units!r}; known: {', '.join(GATHER_UNITS)}",
        )
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
        self, split: Mapping[str, int], coords: Mapping[str, int] | None = None
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

    def local_elements(
        self, split: Mapping[str, int], coords: Mapping[str, int] | None = None
    ) -> int:
        """Exact elements on the device at ``coords``, padding included where the rule stores it."""
        coords = coords or {}
        local = self.local_tensors(split, coords)
        if split.get("data", 1) > 1:
            return self.data_shard(local, split["data"], coords.get("data", 0))[0]
        return sum(math.prod(s) for _, s in local)

    def traffic_elements(
        self,
        split_other: Mapping[str, int],
        padded_for: int = 1,
        coords: Mapping[str, int] | None = None,
    ) -> int:
        """Elements a data-axis collective over ``padded_for`` ranks moves (padded when > 1 and
        the collective works on equal slices)."""
        local = self.local_tensors(split_other, coords)
        if padded_for > 1:
            return self.data_shard(local, padded_for, 0)[1]
        return sum(math.prod(s) for _, s in local)

    def unit_elements(
        self,
        split_other: Mapping[str, int],
        padded_for: int = 1,
        coords: Mapping[str, int] | None = None,
    ) -> list[int]:
        """Elements each gather unit's data-axis collective moves (whole, exact, padded by the
        rule when ``padded_for`` > 1), in forward order."""
        units = self._grouped(self.local_tensors(split_other, coords))
        if padded_for > 1:
            return [self.data_shard(unit, padded_for, 0)[1] for unit in units]
        return [sum(math.prod(s) for _, s in unit) for unit in units]

    def unit_runs(
        self,
        split_other: Mapping[str, int],
        padded_for: int = 1,
        coords: Mapping[str, int] | None = None,
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


Model = Union[ModelSpec, TransformerSpec, ConcreteModel, "MoESpec"]


# --- the abstract model of a bare Ψ -------------------------------------------------------------
#: Published shapes (name, layers L, hidden h, heads a, sequence s, vocabulary V, source).
SHAPES: tuple[tuple[str, int, int, int, int, int, str], ...] = (
    ("GPT-2 small", 12, 768, 12, 1024, 50257, "Radford et al. 2019"),
    ("GPT-2 XL", 48, 1600, 25, 1024, 50257, "Radford et al. 2019"),
    ("Llama-2-7B", 32, 4096, 32, 4096, 32000, "Touvron et al. 2023, Table 1 and §2.2"),
    ("Llama-2-13B", 40, 5120, 40, 4096, 32000, "Touvron et al. 2023"),
    ("Llama-2-70B", 80, 8192, 64, 4096, 32000, "Touvron et al. 2023"),
    ("GPT-3 175B", 96, 12288, 96, 2048, 50257, "Brown et al. 2020, Table 2.1"),
    ("Megatron 1T", 128, 25600, 160, 2048, 51200, "Narayanan et al. 2021, Table 1"),
)


def nearest_shape(psi: int) -> tuple[str, int, int, int, int, int, str]:
    """The published shape (a row of ``SHAPES``) whose GPT-style model (f = 4h) is nearest to
    ``psi`` parameters, by ratio."""
    psi = positive_int("number of parameters (psi)", psi)

    def gpt_style_psi(shape) -> int:
        _, layers, h, a, s, v, _ = shape
        return TransformerSpec(layers=layers, hidden=h, heads=a, seq=s, vocab=v).psi

    return min(SHAPES, key=lambda shape: abs(math.log(gpt_style_psi(shape) / psi)))


def per_layer_model(psi: int) -> ModelSpec:
    """The abstract model of a bare Ψ (``as_model``, ``table --params``): ``psi`` parameters in the
    layers of the published shape nearest to it (``nearest_shape``), gathered one layer at a time
    -- FSDP's usual wrapping. (A single unit would gather the whole model at once: zero3's peak
    above zero2's. Ask for it explicitly: ``ModelSpec(psi)``.)"""
    psi = positive_int("number of parameters (psi)", psi)
    name, layers, *_ = nearest_shape(psi)
    return ModelSpec(
        psi, layers=layers, name=f"Ψ = {psi:,} parameters in {layers} layers ({name}'s L)"
    )


def as_model(model) -> Model:
    """A model, or Ψ (a number) for the abstract one of ``per_layer_model`` (Ψ in the layers of
    the nearest published shape, gathered a layer at a time); anything else is refused by name."""
    if isinstance(model, (IdealSlices, ConcreteModel)):  # MoESpec (experts.py) is IdealSlices
        return model  # type: ignore[return-value]
    if isinstance(model, (int, float)) and not isinstance(model, bool):
        return per_layer_model(model)  # type: ignore[arg-type]
    raise PlacementError(
        f"model must be a number of parameters (Ψ) or a ModelSpec, TransformerSpec, MoESpec "
        f"or ConcreteModel, got {model!r}"
    )
