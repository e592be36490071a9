"""The peak of a real model's step (SPEC §3, "The peak of a real model"), derived without torch.

Inputs are plain data: the model's tensors (``placement_edu.architectures``), an activation profile
measured from the module (``ActivationProfile``, filled by
``placement_edu.runtime.measurement.activation_profile``), the rank of an FSDP2 group of N
(``fully_shard`` on every block, then on the root), a precision with storage, compute and reduce
dtypes, and the optimizer's variant. Output: the bytes of every state on that rank, and the live set
at every event of the step; the peak is the largest, named by its event. All figures are bytes; GB =
10^9 bytes, GiB = 2^30 bytes where shown.

FSDP2's storage, as PyTorch lays it out:
- every tensor is split along dim 0 into chunks of ceil(rows/N) rows; every rank *stores* a padded
  chunk (the last ranks hold fewer rows, or none, in the same storage);
- a unit's all-gather fills one flat buffer of N padded chunks in the compute dtype; the unsharded
  parameters are copied out of it (padded per tensor); the root unit stays gathered from forward
  into backward (``reshard_after_forward`` is False for the root), blocks are freed after their
  forward and gathered again in backward, one block ahead (the implicit backward prefetch) -- or,
  with ``reshard_after_forward=False`` on every block (ZeRO-2-like: no all-gather in backward),
  each block stays gathered from its forward until its own backward is done;
- a unit's gradients are reduce-scattered from one padded flat buffer in the reduce dtype, and the
  sharded gradient is a view into the padded output chunk; the last input buffer lives until the
  next reduce-scatter is issued;
- Adam's m and v are ``zeros_like`` the local shard (unpadded: the rows this rank holds), plus one
  fp32 ``step`` scalar per tensor (4 B each, on a CPU group);
- foreach Adam (PyTorch's default on GPUs) makes ``sqrt(v)`` for every local element at the step:
  +4 B per local parameter in fp32. Fused Adam makes none; the for-loop variant makes two
  temporaries the size of one tensor at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.errors import PlacementError, expect, one_of, positive_int
from placement_edu.fsdp_storage import (  # noqa: F401 (FSDP2's storage, imported from here too)
    PRECISIONS,
    ZERO_MIXED,
    FSDPPrecision,
    Unit,
    chunk_rows,
    fsdp_precision,
    held_rows,
    root_and_block,
    units,
)
from placement_edu.models import LAYER_K, layer_k
from placement_edu.placement import PHASES
from placement_edu.shown import Shown
from placement_edu.units import fmt_bytes

OPTIMIZERS = ("adam-foreach", "adam-fused", "adam-for")
#: The attention a profile is measured with: PyTorch's fused ``scaled_dot_product_attention``, or
#: HF's eager softmax(q·kᵀ)·v (which keeps the [b, heads, s, s] scores).
ATTENTION = ("sdpa", "eager")
#: The recomputation policies a profile is measured under, and which trainer ships each
#: (``runtime/measurement/reference_models.py`` applies them to the module).
RECOMPUTE: Mapping[str, str] = MappingProxyType(
    {
        "none": "every activation autograd saves is kept (no checkpointing)",
        "selective": "torch.utils.checkpoint per block with a policy that saves every matmul's and "
        "the fused attention's outputs and recomputes the rest (torchtitan's op policy without "
        "its every-second-mm rule)",
        "megatron-selective": "Megatron-LM's selective recomputation (Korthikanti et al. 2022): "
        "only the core attention (q·kᵀ, softmax, dropout, ·v) checkpointed, q, k, v kept",
        "torchtitan-op": "torchtitan's selective op AC (selective_ac_option = 'op'): saves mm, "
        "SDPA, reduce-scatter outputs, but recomputes every second mm of a block",
        "full": "torch.utils.checkpoint on every block: a block keeps only its input "
        "(torchtitan's and Megatron's full AC, HF's gradient checkpointing)",
    }
)


def read_recompute(text: str) -> str:
    """A recomputation policy: a name of ``RECOMPUTE``, or ``layer:K`` (``models.layer_k``);
    else a PlacementError in one line."""
    if text in RECOMPUTE:
        return text
    policy = layer_k(text)
    if policy is None:
        raise PlacementError(
            f"unknown recomputation {text[:40]!r}; accepted: {', '.join(RECOMPUTE)}, or {LAYER_K}"
        )
    return policy


#: The FSDP2 strategies, by ``fully_shard``'s ``reshard_after_forward`` on every block: fsdp2 frees
#: a block's gathered parameters after its forward and gathers them again for its backward (ZeRO-3);
#: fsdp2_no_reshard keeps them gathered until its backward (ZeRO-2-like: more memory, no all-gather
#: in backward).
RESHARD_AFTER_FORWARD: Mapping[str, bool] = MappingProxyType(
    {"fsdp2": True, "fsdp2_no_reshard": False}
)


@dataclass(frozen=True)
class Moment:
    """One measured moment of the profile's two-block step: ``live`` bytes of activations and
    temporaries (``MemTracker``'s Activation + Temp) at the peak of one module's forward or
    backward, and ``grads`` bytes of gradients of the root and of the running block made by then
    (compute dtype).

    ``block``: None for a moment outside the blocks; -1 the last block's forward; 1 a block's
    backward (it stands for every block k >= 1 of an L-block step: block k sees k - 1 more blocks'
    activations than the profile's block 1); 0 the first block's. Moments after the blocks see L - 2
    more blocks."""

    name: str
    phase: str
    live: int
    grads: int
    block: int | None = None


@dataclass(frozen=True)
class ActivationProfile:
    """What a model's forward keeps for backward, and its measured moments (bytes, one micro-batch).

    ``block``: bytes one block keeps; ``outside``: bytes kept outside the blocks (embeddings, final
    norm, head, the loss's fp32 log-softmax, tensors the blocks share). ``block_by_dtype`` and
    ``by_module`` break them down. ``kept_after_forward``: what ``MemTracker`` saw live after the
    profile's two-block forward (a cross-check of ``outside + 2 * block``)."""

    model: str
    micro_batch: int
    seq: int
    compute: str
    attention: str
    recompute: str
    block: int
    outside: int
    block_by_dtype: Mapping[str, int] = field(default_factory=dict)
    by_module: Mapping[str, int] = field(default_factory=dict)
    kept_after_forward: int = 0
    moments: tuple[Moment, ...] = ()
    #: Bytes of the forward's result, the loss (an fp32 scalar the caller holds until backward).
    result: int = 4
    #: Bytes of the module's buffers (Llama's RoPE inverse frequencies), which every rank keeps.
    buffers: int = 0
    #: Bytes of ``block`` that tensor parallelism (Megatron's column- then row-parallel pairs) would
    #: split over t: what is saved between the pair. The rest of ``block`` -- norms, the inputs of
    #: the column-parallel layers, dropout after the row-parallel one -- stays whole on every tensor
    #: rank, and is what sequence parallelism splits too.
    block_tp_split: int = 0

    def activations(self, layers: int) -> int:
        """Bytes live after the forward of ``layers`` blocks: outside + L · block + the loss."""
        return self.outside + layers * self.block + self.result

    def to_dict(self) -> dict:
        """Everything, as JSON-ready plain data (``from_dict`` reads it back)."""
        return {
            "model": self.model,
            "micro_batch": self.micro_batch,
            "seq": self.seq,
            "compute": self.compute,
            "attention": self.attention,
            "recompute": self.recompute,
            "block": self.block,
            "outside": self.outside,
            "block_by_dtype": dict(self.block_by_dtype),
            "by_module": dict(self.by_module),
            "kept_after_forward": self.kept_after_forward,
            "result": self.result,
            "buffers": self.buffers,
            "block_tp_split": self.block_tp_split,
            "moments": [vars(m).copy() for m in self.moments],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "ActivationProfile":
        fields = dict(data)
        fields["moments"] = tuple(Moment(**m) for m in fields.get("moments", ()))
        return cls(**fields)


# --- FSDP2's per-rank storage -------------------------------------------------------------------
def input_bytes(micro_batch: int, seq: int) -> int:
    """Token ids and labels: two int64 [b, s] tensors."""
    return 2 * micro_batch * seq * 8


# --- the step -------------------------------------------------------------------------------------
# The terms of a live set, by name. Persistent through the step: the states this rank stores (its
# shards under FSDP2), the batch's inputs and the module's buffers.
SHARDED_PARAMS, PARAMS = "sharded params", "params"
SHARDED_GRADS, GRADS = "sharded grads", "grads"
OPTIMIZER, INPUTS, BUFFERS = "optimizer", "inputs", "buffers"
#: The persistent terms; every other term of an event is transient.
PERSISTENT_TERMS = frozenset(
    {SHARDED_PARAMS, PARAMS, SHARDED_GRADS, GRADS, OPTIMIZER, INPUTS, BUFFERS}
)
# Transient: a unit's parameters gathered for use (the root's from forward into backward, a
# block's for its pass), the collectives' flat buffers, what the profile measured at the moment
# (activations and temporaries, the gradients made so far), the loss, and Adam's temporaries.
ROOT_GATHERED, BLOCK_GATHERED = "root gathered", "block gathered"
ALL_GATHER_BUFFER, REDUCE_SCATTER_BUFFER = "all gather buffer", "reduce scatter buffer"
ACTIVATIONS_AND_TEMPORARIES = "activations and temporaries"
ROOT_GRADIENTS, GRADIENTS_BEING_MADE = "root gradients", "gradients being made"
LOSS, OPTIMIZER_TEMPORARIES = "loss", "optimizer temporaries"


@dataclass(frozen=True)
class Event:
    """The live bytes at one event of the step, by term; ``total`` is their sum."""

    name: str
    phase: str
    terms: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.terms.values())


@dataclass(frozen=True)
class StepPeak(Shown):
    """One rank's memory through a step: persistent states, activations, every event's live set."""

    params: int
    grads: int
    optimizer: int
    activations: int
    inputs: int
    buffers: int
    events: tuple[Event, ...]

    def _max(self, phases: tuple[str, ...]) -> Event:
        return max((e for e in self.events if e.phase in phases), key=lambda e: e.total)

    @property
    def peak(self) -> Event:
        return self._max(PHASES)

    @property
    def forward_backward_peak(self) -> Event:
        return self._max(("forward", "backward"))

    @property
    def step_peak(self) -> Event:
        return self._max(("step",))

    def transients(self) -> dict[str, int]:
        """The terms of the peak event that are neither persistent states nor kept activations."""
        return {k: v for k, v in self.peak.terms.items() if k not in PERSISTENT_TERMS and v}

    def to_dict(self) -> dict[str, Any]:
        """What ``placement-edu fit --json`` prints for the rank (``breakdown``)."""
        return breakdown(self)

    def __str__(self) -> str:
        p = self.peak
        terms = [(term, v) for term, v in p.terms.items() if v]
        width = max(len(term) for term, _ in terms)
        return "\n".join(
            [
                f"peak {fmt_bytes(p.total)} at {p.name} ({p.phase}):",
                *(f"  {term.ljust(width)}  {fmt_bytes(v)}" for term, v in terms),
                f"forward/backward peak {fmt_bytes(self.forward_backward_peak.total)}, "
                f"optimizer step peak {fmt_bytes(self.step_peak.total)}",
            ]
        )


def accumulated(step: StepPeak, micro_batches: int) -> StepPeak:
    """``step`` with ``micro_batches`` micro-batches of gradient accumulation, FSDP2 syncing each
    (its default: every micro-batch's backward reduce-scatters, and the result is added to the
    sharded gradient). From the second micro-batch on, every rank holds its whole sharded
    gradient from the start of forward: each forward and backward event's gradient term becomes
    ``step.grads``. Those events are the peak's candidates then (the first micro-batch's are no
    larger); the optimizer step is unchanged."""
    if positive_int("micro_batches", micro_batches) == 1:
        return step
    events = []
    for e in step.events:
        if e.phase == "step":
            events.append(e)
            continue
        key = SHARDED_GRADS if SHARDED_GRADS in e.terms or GRADS not in e.terms else GRADS
        terms = {k: v for k, v in e.terms.items() if k not in (SHARDED_GRADS, GRADS)}
        events.append(
            Event(
                f"{e.name} (micro-batches 2..{micro_batches}: gradients accumulated)",
                e.phase,
                MappingProxyType({**terms, key: step.grads}),
            )
        )
    return replace(step, events=tuple(events))


def breakdown(peak: StepPeak) -> dict[str, Any]:
    """The per-rank breakdown under ``placement-edu fit --json``'s keys (bytes): ``memory``
    {``params``, ``grads``, ``optimizer``, ``activations``, ``transients``}, ``peak_bytes``,
    ``peak_at``, ``forward_backward_peak_bytes``, ``step_peak_bytes``."""
    return {
        "memory": {
            "params": peak.params,
            "grads": peak.grads,
            "optimizer": peak.optimizer,
            "activations": peak.activations,
            "transients": peak.transients(),
        },
        "peak_bytes": peak.peak.total,
        "peak_at": peak.peak.name,
        "forward_backward_peak_bytes": peak.forward_backward_peak.total,
        "step_peak_bytes": peak.step_peak.total,
    }


def tracker_peak_phase(forward_backward_peak: int, step_peak: int) -> str:
    """Where PyTorch's trackers put a step's peak: they name a phase, not an event (``derive``
    names the event): "forward/backward", or "optimizer step" where that peak is higher."""
    return "forward/backward" if forward_backward_peak >= step_peak else "optimizer step"


def fsdp2_applies(devices: int, precision: str | FSDPPrecision) -> bool:
    """Whether the step is placed under FSDP2 (more than one device, or mixed precision) rather
    than as plain single-device training."""
    name = precision if isinstance(precision, str) else precision.name
    return devices > 1 or name != "fp32"


def adam_temporaries(optimizer: str, held: int, largest: int, storage: int) -> int:
    """Bytes Adam allocates during its step on ``held`` local elements: foreach makes sqrt(v) for
    all of them at once; fused makes none; the for-loop makes sqrt(v) and its quotient for one
    tensor."""
    one_of("optimizer", optimizer, OPTIMIZERS)
    return {"adam-foreach": held, "adam-fused": 0, "adam-for": 2 * largest}[optimizer] * storage


#: Blocks whose backward is listed event by event (``derive``); past this many, only the ends of
#: each run of alike blocks (the blocks whose index has one residue mod K under layer selective
#: recomputation; all of them otherwise). Every term of a block's backward event is affine in its
#: index along such a run (the activations kept before it, the gradients finished, the blocks still
#: gathered), except the reduce-scatter buffer, absent at block L-1 alone: so the largest live set
#: of a run is at one of its ends, and the peak is the one every block listed gives -- at a cost
#: that does not grow with L.
MAX_LISTED_BLOCKS = 64


def backward_blocks(L: int, every: int = 0) -> list[int]:
    """The blocks k = L-1 .. 1 whose backward ``derive`` lists, in that order: every one up to
    ``MAX_LISTED_BLOCKS``; else L - 1 and, of each run of alike blocks among 1 .. L-2 (one residue
    of k mod ``every``; one run when ``every`` is 0), its first and its last."""
    if L - 1 <= MAX_LISTED_BLOCKS:
        return list(range(L - 1, 0, -1))
    period = every or 1
    ends = {L - 1}
    for r in range(period):
        first = 1 + (r - 1) % period  # the first k >= 1 with k % period == r
        last = L - 2 - (L - 2 - r) % period  # the last k <= L - 2 with k % period == r
        if first <= last:
            ends |= {first, last}
    return sorted(ends, reverse=True)


def derive(
    arch: Architecture | str,
    profile: ActivationProfile,
    devices: int,
    rank: int = 0,
    precision: str | FSDPPrecision = "fp32",
    optimizer: str = "adam-foreach",
    reshard_after_forward: bool = True,
    every_kth: tuple[int, ActivationProfile] | None = None,
) -> StepPeak:
    """Rank ``rank``'s states and the live set at every event of one steady-state step (optimizer
    state present, gradients freed by ``zero_grad``), under FSDP2 per block and on the root when
    ``devices`` > 1 or precision is mixed, plain single-device training when ``devices`` == 1 and
    fp32. ``reshard_after_forward`` is ``fully_shard``'s for every block: False keeps a block
    gathered from its forward to its backward (L blocks gathered at the start of backward, no
    all-gather in backward).

    ``every_kth = (K, checkpointed)``: torchtitan's layer selective AC (``selective_ac_option =
    "K"``): blocks K-1, 2K-1, ... (torchtitan counts them from 1) are checkpointed, and keep and
    replay as ``checkpointed`` (the profile under full recomputation) says; the others as
    ``profile`` (none) says."""
    arch = get_architecture(arch)
    prec = fsdp_precision(precision)
    expect(
        profile.compute == prec.compute_name,
        f"the profile was measured in {profile.compute}, the precision {prec.name} computes in "
        f"{prec.compute_name}",
    )
    expect(
        arch.layers >= 2,
        "the step is placed from a two-block profile: give a model of 2 layers or more",
    )
    every, full = every_kth or (0, profile)
    kept = Checkpoints(profile, full, every, arch.layers)
    rank_step = place(arch, profile, devices, rank, prec, reshard_after_forward)
    events = [e for m in profile.moments for e in moment_events(m, rank_step, kept)]
    events.append(optimizer_step(rank_step, profile.result, optimizer))
    activations = profile.outside + kept.inputs_held + kept.before(arch.layers) + profile.result
    r = rank_step
    return StepPeak(r.params, r.grads, r.optimizer, activations, r.inputs, r.buffers, tuple(events))


@dataclass(frozen=True)
class Checkpoints:
    """What the blocks keep under torchtitan's layer selective AC: block k is checkpointed where
    (k + 1) % ``every`` == 0 and keeps and replays as ``full`` (the profile under full
    recomputation) says, the others as ``profile`` says; ``every`` = 0: none is."""

    profile: ActivationProfile
    full: ActivationProfile
    every: int
    layers: int

    def kind(self, k: int) -> ActivationProfile:
        """The profile block k keeps and replays as."""
        return self.full if self.every and (k + 1) % self.every == 0 else self.profile

    def before(self, k: int) -> int:
        """What blocks 0 .. k-1 keep, bytes: k blocks, k // K of them checkpointed."""
        extra = k // self.every * (self.full.block - self.profile.block) if self.every else 0
        return k * self.profile.block + extra

    def moment(self, m: Moment, k: int) -> Moment:
        """``m``, measured where block k's own kind was profiled (the same name there)."""
        return next(n for n in self.kind(k).moments if n.name == m.name)

    @property
    def inputs_held(self) -> int:
        """What a checkpoint holds outside the blocks (the inputs every block is given: the
        causal mask, RoPE's cos and sin), alive while a checkpointed block is not yet through its
        backward; the profile without recomputation holds them only where an op saves them."""
        if self.every and self.layers // self.every:
            return self.full.outside - self.profile.outside
        return 0

    def held(self, source: ActivationProfile, below: int) -> int:
        """``inputs_held``, where the moment was measured without recomputation and a
        checkpointed block below block ``below`` is still to run its backward."""
        return self.inputs_held if source is self.profile and below >= self.every else 0


@dataclass(frozen=True)
class RankStep:
    """One rank's states through the step (bytes), and what every event of it holds: ``base``
    (the persistent states, inputs, buffers) and, under FSDP2, the root gathered. ``ag`` and
    ``rs``: a block's all-gather and reduce-scatter buffers (0 in a group of one)."""

    layers: int
    root: Unit
    block: Unit
    prec: FSDPPrecision
    fsdp: bool
    kept: bool  # blocks stay gathered from forward to backward (no resharding)
    params: int
    grads: int
    optimizer: int
    inputs: int
    buffers: int
    ag: int
    rs: int

    @property
    def base(self) -> dict[str, int]:
        return {
            SHARDED_PARAMS if self.fsdp else PARAMS: self.params,
            OPTIMIZER: self.optimizer,
            INPUTS: self.inputs,
            BUFFERS: self.buffers,
        }

    @property
    def ag_backward(self) -> int:
        """Backward's all-gather buffer: none when blocks were kept gathered from forward."""
        return 0 if self.kept else self.ag

    def gathered(self, blocks: int) -> int:
        """Bytes of ``blocks`` blocks' parameters gathered in the compute dtype."""
        return self.block.gathered * self.prec.compute * blocks

    def event(self, name: str, phase: str, terms: dict[str, int]) -> Event:
        root = {ROOT_GATHERED: self.root.gathered * self.prec.compute} if self.fsdp else {}
        return Event(name, phase, MappingProxyType({**self.base, **root, **terms}))


def place(
    arch: Architecture,
    profile: ActivationProfile,
    devices: int,
    rank: int,
    prec: FSDPPrecision,
    reshard_after_forward: bool,
) -> RankStep:
    """The rank's units (``root_and_block``) and states: params, gradients, Adam's m and v and
    its step scalars, and the collectives' buffers."""
    root, blk = root_and_block(arch, devices, rank)
    fsdp = fsdp2_applies(devices, prec.name)
    L, s = arch.layers, prec.storage
    stored, held = root.stored + L * blk.stored, root.held + L * blk.held
    params = stored * s
    # A group of one issues no collective: no all-gather or reduce-scatter buffer (bf16 copies
    # remain).
    ag, rs = (blk.gathered * prec.compute, blk.gathered * prec.reduce) if devices > 1 else (0, 0)
    return RankStep(
        layers=L,
        root=root,
        block=blk,
        prec=prec,
        fsdp=fsdp,
        # Without resharding, blocks gathered in forward stay so until their backward; backward
        # then gathers nothing (no all-gather buffer).
        kept=not reshard_after_forward,
        params=params,
        grads=stored * prec.reduce if fsdp else params,
        optimizer=2 * held * s + 4 * (root.tensors + L * blk.tensors),
        inputs=input_bytes(profile.micro_batch, profile.seq),
        buffers=profile.buffers,
        ag=ag,
        rs=rs,
    )


def moment_events(m: Moment, step: RankStep, kept: Checkpoints) -> list[Event]:
    """The events one measured moment stands for in the L-block step: the embedding's backward,
    the end of forward or the start of backward, or the backward of blocks L-1 .. 0."""
    if m.block is None and m.name.startswith("backward, embedding"):
        return [embedding_backward(m, step)]
    if m.block is None or m.block == -1:  # after the blocks in forward, or the start of backward
        return [around_the_blocks(m, step, kept)]
    blocks = backward_blocks(step.layers, kept.every) if m.block == 1 else (0,)
    return [block_backward(m, k, step, kept) for k in blocks]


def embedding_backward(m: Moment, step: RankStep) -> Event:
    """The embedding's backward: every block's gradients made (and, under FSDP2, sharded)."""
    L, blk, r = step.layers, step.block, step.prec.reduce
    done = (
        {SHARDED_GRADS: blk.stored * r * L, REDUCE_SCATTER_BUFFER: step.rs}
        if step.fsdp
        else {GRADS: blk.numel * step.prec.storage * L}
    )
    return step.event(
        m.name, m.phase, {ACTIVATIONS_AND_TEMPORARIES: m.live, ROOT_GRADIENTS: m.grads, **done}
    )


def around_the_blocks(m: Moment, step: RankStep, kept: Checkpoints) -> Event:
    """The last block's forward (blocks 0 .. L-2 kept, as its kind says), or a moment after the
    blocks, where the profile's two blocks stand for all L."""
    L = step.layers
    if m.block == -1:
        m = kept.moment(m, L - 1)
        shift = kept.before(L - 1) - kept.kind(L - 1).block
        shift += kept.held(kept.kind(L - 1), L - 1)
    else:
        shift = kept.before(L) - 2 * kept.profile.block + kept.held(kept.profile, L)
    fsdp_terms: dict[str, int] = {}
    if step.fsdp:
        fsdp_terms[ALL_GATHER_BUFFER] = step.ag if m.phase == "forward" else step.ag_backward
        if step.kept or m.block == -1:
            fsdp_terms[BLOCK_GATHERED] = step.gathered(L if step.kept else 1)
    return step.event(
        f"{m.name}" if m.block is None else f"forward, block {L - 1}",
        m.phase,
        {ACTIVATIONS_AND_TEMPORARIES: m.live + shift, ROOT_GRADIENTS: m.grads, **fsdp_terms},
    )


def block_backward(m: Moment, k: int, step: RankStep, kept: Checkpoints) -> Event:
    """Block k's backward: blocks 0 .. k-1 still keep their activations (the profile's block 0
    stands for them), blocks k+1 .. L-1 have their gradients made."""
    finished, here = step.layers - 1 - k, kept.moment(m, k)
    before = kept.before(k) - kept.kind(k).block if k else 0
    before += kept.held(kept.kind(k), k)
    terms = {ACTIVATIONS_AND_TEMPORARIES: here.live + before, GRADIENTS_BEING_MADE: here.grads}
    if step.fsdp:
        terms[BLOCK_GATHERED] = step.gathered(k + 1 if step.kept else 1)
        terms[ALL_GATHER_BUFFER] = step.ag_backward if k > 0 else 0
        terms[REDUCE_SCATTER_BUFFER] = step.rs if finished else 0
        terms[SHARDED_GRADS] = step.block.stored * step.prec.reduce * finished
    else:
        terms[GRADS] = step.block.numel * step.prec.storage * finished
    return step.event(f"backward, block {k}", m.phase, terms)


def optimizer_step(step: RankStep, loss: int, optimizer: str) -> Event:
    """The optimizer step: every gradient made, the loss, and Adam's temporaries."""
    L, root, blk = step.layers, step.root, step.block
    largest = max(root.largest_held, blk.largest_held)
    held = root.held + L * blk.held
    terms = {
        SHARDED_GRADS if step.fsdp else GRADS: step.grads,
        LOSS: loss,
        OPTIMIZER_TEMPORARIES: adam_temporaries(optimizer, held, largest, step.prec.storage),
    }
    name = f"optimizer step ({optimizer})"
    return Event(name, "step", MappingProxyType({**step.base, **terms}))
