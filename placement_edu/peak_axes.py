"""The peak of a real model's step on every axis of a mesh (SPEC §3, §6), from one activation
profile measured on one device (``peak.ActivationProfile``) -- scaled, never measured again.

``peak.derive`` prices one rank of an FSDP2 group. A mesh adds axes, and each changes what a rank
holds in its own way; read top to bottom:

- **tensor** (t, Megatron's column- then row-parallel pairs in every block, as
  ``runtime/axes/axis_tracker.py`` applies them with ``parallelize_module``): a block's weights are
  split (``TensorRank``: the widening layers by output column, the narrowing ones by input row;
  norms and the row-parallel biases whole), and of what a block keeps for backward the part
  between a pair (``block_tp_split``) is split over t; the rest -- norms, the pairs' inputs,
  dropout after them -- stays whole. With **sequence parallelism** the residual stream in the
  blocks is cut along the sequence, so everything but the pairs' inputs (PyTorch's
  ``ColwiseParallel`` saves the input it all-gathered, whole) is split too. The embeddings, the
  head and the loss stay whole on every tensor rank in this plan, plain tensors: the optimizer
  steps them and the DTensors as two groups, so foreach Adam's temporaries are the larger
  group's (``two_group_temporaries``);
- **data** (d): FSDP2 over the data axis, as ``peak.derive`` places it, on the tensor rank's
  shapes; HSDP's **replica** axis (r) repeats the data axis's shards, so a rank holds what its data
  group of d gives it, whatever r.

- **context** (c): a rank holds s/c tokens of every sequence, so its profile is the one measured at
  s/c (``context_seq``), and its blocks carry ring attention's K/V chunks or Ulysses' Q, K, V in
  flight (``with_context_buffers``, as ``time`` counts them);
- **pipeline** (p, on its own, one device per stage, fp32): a rank's stage slices of the model and
  the micro-batches in flight after every pass of its schedule, walked off the package's own
  schedule orders (``derive_pipeline``), with what ``torch.distributed.pipelining`` adds (its
  receive buffers, the outputs it holds), as ``runtime/axes/axis_tracker.py`` measures them.

Refused in one line: an **expert** axis (these models are dense), a pipeline with other axes.

All figures are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.errors import expect
from placement_edu.mesh import Mesh
from placement_edu.peak import (
    OPTIMIZER_TEMPORARIES,
    ActivationProfile,
    Event,
    FSDPPrecision,
    StepPeak,
    derive,
    fsdp2_applies,
)
from placement_edu.peak_pipeline import (  # noqa: F401 (the pipeline's peak, imported from here too)
    BACKWARD_TRANSIENT,
    HELD_BY_THE_SCHEDULE,
    IN_FLIGHT,
    RECEIVE_BUFFERS,
    Chunk,
    PipelineRank,
    derive_pipeline,
    numel,
    pipeline_chunks,
    pipeline_passes,
)

# --- tensor parallelism ---------------------------------------------------------------------------
#: The layers that widen (column-parallel) and those that narrow back (row-parallel), by name in
#: a block, for each kind of model.
COLUMN = {
    "gpt2": ("attn.c_attn", "mlp.c_fc"),
    "llama": (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
    ),
}
ROW = {"gpt2": ("attn.c_proj", "mlp.c_proj"), "llama": ("self_attn.o_proj", "mlp.down_proj")}


def _split_shape(kind: str, name: str, shape: tuple[int, ...], t: int) -> tuple[int, ...]:
    """One block tensor's shape on a tensor rank of t. GPT-2's Conv1D stores [in, out]: a column
    split is its dim 1 (and its bias), a row split its dim 0 (its bias whole); an ``nn.Linear``
    stores [out, in]: a column split is dim 0, a row split dim 1."""
    layer, _, param = name.rpartition(".")
    conv = kind == "gpt2"
    if layer in COLUMN[kind]:
        dim = 0 if param == "bias" or not conv else 1
    elif layer in ROW[kind] and param == "weight":
        dim = 0 if conv else 1
    else:
        return shape  # norms, row-parallel biases: whole
    expect(
        shape[dim] % t == 0,
        f"tensor parallelism over {t} splits {name} ({shape[dim]} along dim {dim}) evenly: "
        f"give a tensor degree that divides it",
    )
    return shape[:dim] + (shape[dim] // t,) + shape[dim + 1 :]


@dataclass(frozen=True)
class TensorRank(Architecture):
    """The shape one tensor rank of ``tensor`` holds: every block tensor as ``_split_shape`` cuts
    it, the embeddings, the final norm and the head whole. ``peak.derive`` reads its tensors as it
    reads any model's."""

    tensor: int = 1

    def block_tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        return [
            (name, _split_shape(self.kind, name, shape, self.tensor))
            for name, shape in super().block_tensors()
        ]


def tensor_rank(arch: Architecture | str, tensor: int) -> Architecture:
    """``arch`` as one rank of a tensor group of ``tensor`` holds it (``arch`` itself at 1)."""
    arch = get_architecture(arch)
    if tensor == 1:
        return arch
    expect(
        arch.heads % tensor == 0 and arch.kv_heads % tensor == 0,
        f"tensor parallelism over {tensor} gives each rank whole heads: {arch.name or arch.kind}"
        f" has {arch.heads} heads ({arch.kv_heads} key/value heads); give a tensor degree that "
        "divides both",
    )
    fields = {f: getattr(arch, f) for f in Architecture.__dataclass_fields__}
    rank = TensorRank(**fields, tensor=tensor)
    rank.block_tensors()  # (refused here, in one line, if a width does not divide)
    return rank


def block_on_tensor_rank(profile: ActivationProfile, kind: str, t: int, sp: bool) -> Fraction:
    """Bytes one block keeps on a tensor rank of t: the part between the pairs over t, the rest
    whole -- or, with sequence parallelism, everything but the column-parallel layers' inputs over
    t."""
    if not sp:
        return Fraction(profile.block_tp_split, t) + profile.block - profile.block_tp_split
    inputs = sum(profile.by_module.get(f"block.{name}", 0) for name in COLUMN[kind])
    return Fraction(profile.block - inputs, t) + inputs


def tensor_profile(
    profile: ActivationProfile, arch: Architecture | str, t: int, sp: bool = False
) -> ActivationProfile:
    """``profile`` as one rank of a tensor group of t keeps it (``TensorRank``'s plan).

    A block keeps ``block_on_tensor_rank``; outside the blocks nothing changes (the stream is cut
    entering the first block, and gathered entering the final norm). The moments: those
    outside the blocks see the two blocks' smaller keeps and, in backward, the blocks' smaller
    gradients; those of a block see everything the blocks hold -- all but what was kept before the
    first block -- shrink as one block's keep does (a block's transients are its attention scores,
    its widened MLP and their gradients, split alike)."""
    arch = get_architecture(arch)
    if t == 1 and not sp:
        return profile
    kind = arch.kind
    a, a_t = profile.block, block_on_tensor_rank(profile, kind, t, sp)
    after = ("loss", "lm_head", "transformer.ln_f" if kind == "gpt2" else "model.norm")
    before = profile.outside - sum(profile.by_module.get(k, 0) for k in after)
    full = sum(numel(s) for _, s in get_architecture(arch).block_tensors())
    local = sum(numel(s) for _, s in tensor_rank(arch, t).block_tensors())
    moments = []
    for m in profile.moments:
        live: Fraction | int
        grads: Fraction | int
        if m.block is None:
            kept_blocks = 0 if m.name.startswith("backward, embedding") else 2
            live = m.live - kept_blocks * (a - a_t)
            grads = m.grads
        else:
            live = before + (m.live - before) * a_t / a
            grads = Fraction(m.grads * local, full)
        moments.append(replace(m, live=_whole(live), grads=_whole(grads)))
    return replace(
        profile,
        block=_whole(a_t),
        block_tp_split=_whole(Fraction(profile.block_tp_split, t)),
        moments=tuple(moments),
    )


def _whole(x: int | Fraction) -> int:
    return round(x)


def two_group_temporaries(arch: Architecture, t: int, sp: bool) -> int:
    """Foreach Adam's temporaries on a tensor rank stepping two groups, the DTensors (the pairs'
    tensors; with sequence parallelism the norms too) and the plain tensors, one after the other
    (fp32): sqrt(v) of the larger group. (Fused Adam makes none, the for-loop variant two of one
    tensor's size: grouped or not, as ``peak.derive`` has them.)"""
    split_layers = COLUMN[arch.kind] + ROW[arch.kind]
    dtensor = plain = 0
    for name, shape, unit in tensor_rank(arch, t).tensors():
        layer = name.split(".", 3)[-1].rpartition(".")[0] if unit != "root" else ""
        if layer in split_layers or (sp and unit != "root"):
            dtensor += numel(shape)
        else:
            plain += numel(shape)
    return 4 * max(dtensor, plain)


def derive_on_mesh(
    arch: Architecture | str,
    profile: ActivationProfile,
    mesh: Mesh,
    rank: int = 0,
    precision: str | FSDPPrecision = "fp32",
    optimizer: str = "adam-foreach",
    reshard_after_forward: bool = True,
    sequence_parallel: bool = False,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
    micro_batches: int = 0,
    context_attention: str = "ring",
    every_kth: tuple[int, ActivationProfile] | None = None,
) -> StepPeak:
    """Rank ``rank`` of ``mesh``'s states and the live set at every event of a step: its tensor
    rank's shapes and profile (``tensor_rank``, ``tensor_profile``), FSDP2 over the data axis as
    ``peak.derive`` places it; a replica axis (HSDP) repeats the data axis's shards, so a rank holds
    what its data group gives it. On a context axis ``profile`` is the one measured at the rank's
    s/c tokens (``context_seq``), and its attention buffers are added (``context_buffers``). A
    pipeline axis, on its own, is ``derive_pipeline``'s (``schedule``, ``virtual_stages``,
    ``micro_batches``). An expert axis is refused: these models have no experts."""
    arch = get_architecture(arch)
    expect(
        mesh.degree("expert") == 1,
        f"an expert axis splits a mixture-of-experts layer's experts over its ranks; "
        f"{arch.name or arch.kind} is a dense model (no experts): leave the expert axis out of "
        f"the mesh {mesh} (time and plan price a mixture of experts by the formula)",
    )
    p, c = mesh.degree("pipeline"), mesh.degree("context")
    at = mesh.coords(rank)
    if p > 1:
        alone = mesh.world_size == p
        expect(
            alone,
            f"fit prices a pipeline axis on its own (a mesh pipeline={p}: one device per stage), "
            f"got the mesh {mesh}; price the other axes without it",
        )
        where = PipelineRank(p, at["pipeline"], schedule, virtual_stages, micro_batches)
        return derive_pipeline(arch, profile, where, optimizer)
    t, d = mesh.degree("tensor"), mesh.degree("data")
    expect(
        not sequence_parallel or t > 1,
        "sequence parallelism cuts the stream over the tensor axis: give a mesh with tensor > 1",
    )
    expect(
        profile.seq % t == 0 or not sequence_parallel,
        f"sequence parallelism over {t} cuts s = {profile.seq} evenly: give s divisible by {t}",
    )
    peak = derive(
        arch=tensor_rank(arch, t),
        profile=tensor_profile(profile, arch, t, sequence_parallel),
        devices=d,
        rank=at["data"],
        precision=precision,
        optimizer=optimizer,
        reshard_after_forward=reshard_after_forward,
        # torchtitan's layer:K: its checkpointed blocks as the full-recomputation profile says
        every_kth=every_kth
        and (every_kth[0], tensor_profile(every_kth[1], arch, t, sequence_parallel)),
    )
    if c > 1:
        peak = with_context_buffers(peak, arch, profile, c, t, context_attention)
    if t == 1 or fsdp2_applies(d, precision) or optimizer != "adam-foreach":
        return peak  # (FSDP2 makes every parameter a DTensor: one group)
    *rest, step = peak.events
    terms = dict(step.terms)
    terms[OPTIMIZER_TEMPORARIES] = two_group_temporaries(arch, t, sequence_parallel)
    return replace(peak, events=(*rest, Event(step.name, step.phase, terms)))


# --- context parallelism --------------------------------------------------------------------------
#: The attention inputs in flight on a context axis (``schedule.context.context_buffer_bytes``).
CONTEXT_BUFFERS = "context buffers (K/V or Q/K/V in flight)"


def context_seq(seq: int, context: int) -> int:
    """The tokens of each sequence a context rank holds, s/c (refused in one line where c does
    not divide s): its profile is measured at these. Every module but attention works token by
    token; attention, under either way of bringing the other chunks, keeps what SDPA keeps for
    s/c queries -- ring attention its own chunk's q, k, v, output and logsumexp (the other chunks'
    K/V pass through, and come round again in backward); Ulysses the same bytes head-split, all s
    tokens of a/c heads."""
    expect(
        seq % context == 0,
        f"context degree {context} cuts each sequence into equal chunks: s = {seq} does not "
        f"divide by {context}; give a sequence length that is a multiple of {context}",
    )
    return seq // context


def with_context_buffers(
    peak: StepPeak,
    arch: Architecture,
    profile: ActivationProfile,
    context: int,
    tensor: int,
    attention: str,
) -> StepPeak:
    """``peak`` with the context axis's attention buffers added to every block's event (they live
    while a block's attention runs, one layer at a time): ring attention's K/V chunk in hand and
    the one arriving (and their dK/dV beside them in backward), or Ulysses' head-split Q, K, V (and
    their gradients), as ``schedule.context.context_buffer_bytes`` counts them, on the sequence of
    s = c · (the profile's s/c) tokens, in the profile's compute dtype."""
    from placement_edu.schedule.context import context_applies, context_buffer_bytes

    expect(
        profile.attention == "sdpa",
        "a context axis runs attention blockwise (ring) or on whole heads (Ulysses), as "
        f"scaled_dot_product_attention does; got {profile.attention} attention: give sdpa",
    )
    model = arch.formula(profile.seq * context, profile.micro_batch, attention="flash")
    mesh = Mesh.of(context=context, tensor=tensor)
    context_applies(attention, model, mesh, tensor)
    unit = {"fp32": 4, "bf16": 2}[profile.compute]
    sizes = context_buffer_bytes(attention, model, mesh, tensor, unit)
    events = []
    for e in peak.events:
        if "block" in e.name and e.phase in sizes:
            e = Event(e.name, e.phase, {**e.terms, CONTEXT_BUFFERS: int(sizes[e.phase])})
        events.append(e)
    return replace(peak, events=tuple(events))
