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
    BUFFERS,
    GRADS,
    INPUTS,
    OPTIMIZER,
    OPTIMIZER_TEMPORARIES,
    PARAMS,
    ActivationProfile,
    Event,
    StepPeak,
    derive,
    fsdp2_applies,
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
    full = sum(_numel(s) for _, s in get_architecture(arch).block_tensors())
    local = sum(_numel(s) for _, s in tensor_rank(arch, t).block_tensors())
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


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


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
            dtensor += _numel(shape)
        else:
            plain += _numel(shape)
    return 4 * max(dtensor, plain)


def derive_on_mesh(
    arch: Architecture | str,
    profile: ActivationProfile,
    mesh: Mesh,
    rank: int = 0,
    precision: str = "fp32",
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
        return derive_pipeline(
            arch, profile, p, at["pipeline"], schedule, virtual_stages, micro_batches, optimizer
        )
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
    from types import SimpleNamespace

    from placement_edu.models import TransformerSpec
    from placement_edu.schedule.context import context_applies, context_buffer_bytes

    expect(
        profile.attention == "sdpa",
        "a context axis runs attention blockwise (ring) or on whole heads (Ulysses), as "
        f"scaled_dot_product_attention does; got {profile.attention} attention: give sdpa",
    )
    model = TransformerSpec(
        layers=arch.layers,
        hidden=arch.hidden,
        heads=arch.heads,
        seq=profile.seq * context,
        vocab=arch.vocab,
        micro_batch=profile.micro_batch,
        ffn=arch.ffn,
        kv_heads=arch.kv_heads,
        attention="flash",
        block="llama" if arch.kind == "llama" else "gpt",
    )
    mesh, strategy = (
        Mesh.of(context=context, tensor=tensor),
        SimpleNamespace(context_attention=attention),
    )
    context_applies(strategy, model, mesh, tensor)
    unit = {"fp32": 4, "bf16": 2}[profile.compute]
    sizes = context_buffer_bytes(strategy, model, mesh, tensor, unit)
    events = []
    for e in peak.events:
        if "block" in e.name and e.phase in sizes:
            e = Event(e.name, e.phase, {**e.terms, CONTEXT_BUFFERS: int(sizes[e.phase])})
        events.append(e)
    return replace(peak, events=tuple(events))


# --- pipeline parallelism -------------------------------------------------------------------------
#: Where a profile charges what lies outside the blocks, by kind of model: the embeddings (first
#: stage), the final norm, the head and the loss (last stage).
EMBEDDINGS = {
    "gpt2": ("transformer.wte", "transformer.wpe", "transformer.drop"),
    "llama": ("model.embed_tokens",),
}
FINAL_NORM = {"gpt2": "transformer.ln_f", "llama": "model.norm"}
#: Tensors made once per forward and saved by every block (GPT-2's causal mask, Llama's RoPE cos
#: and sin): each stage makes its own, for each micro-batch.
SHARED = "shared by the blocks"
#: The transient terms of a pipeline rank's events, by name (``peak``'s others beside them).
IN_FLIGHT = "micro-batches in flight"
RECEIVE_BUFFERS = "receive buffers"
HELD_BY_THE_SCHEDULE = "held by the schedule"
BACKWARD_TRANSIENT = "the backward's temporaries"


@dataclass(frozen=True)
class Chunk:
    """One model chunk a pipeline rank runs (its whole stage, or one of v under interleaving), per
    micro-batch, in bytes: ``keep`` (what a micro-batch leaves from its forward to its backward),
    ``transient`` (what its backward makes on top, at its peak) and ``making`` (its parameters'
    gradients made by then, at its first backward), ``output`` (its output: the logits on the last
    chunk, else b·s·h) and ``input_gradient`` (what its backward sends back: b·s·h, none on the
    first chunk)."""

    stage: int
    layers: range
    first: bool
    last: bool
    keep: int
    transient: int
    making: int
    output: int
    input_gradient: int
    params: int
    tensors: int
    largest: int


def pipeline_chunks(
    arch: Architecture, profile: ActivationProfile, stages: int, rank: int, virtual_stages: int = 1
) -> list[Chunk]:
    """The chunks of pipeline rank ``rank``: stages rank, rank + p, ... of the v·p
    (``models.stage_layers`` splits the layers), as ``torch.distributed.pipelining`` runs them
    (``runtime/axes/axis_tracker.py``'s ``StageModule``), each micro-batch's bytes read off the one
    profile:

    - a chunk keeps its blocks' (L_c · block) and the blocks' shared tensors (it makes its own);
      the first its embeddings' keeps; the last the final norm's, the head's and the loss's
      (the fp32 log-softmax), and its logits, which the schedule holds from the forward to the
      backward as the stage's output. Any other chunk's output (b·s·h) is held so too; any chunk
      but the first receives its input into a buffer of its own (``RECEIVE_BUFFERS``), which its
      first block keeps: not counted twice;
    - its backward makes on top: on the last chunk, the loss's backward (the logits' gradient and
      the log-softmax's: the profile's "backward, loss" moment less everything kept); on the
      others a block's backward (the profile's "backward, first block" moment less what is kept
      then -- the embeddings', the shared tensors, one block -- and, for a tied head, its gradient,
      which on one device waits for the embedding's in autograd's buffer and here is the last
      stage's own). Llama's eager stages make exactly this; GPT-2's and SDPA's stages one b·s·h
      less (3,145,728 B, 0.07 % of GPT-2's 2-stage peak; 0.3 % of Llama-3-8B's under SDPA). Not
      the arriving gradient (a receive buffer here, counted apart): given as a fresh copy instead,
      it is live at the peak in both, and raises both by one b·s·h. Not yet traced, so the
      prediction is the larger;
    - its first backward has made, at that peak, the gradients the profile's moment names (the
      block's backward: "backward, first block" less what "backward, final norm" had made)."""
    arch = get_architecture(arch)
    from placement_edu.models import stage_layers

    kind, by = arch.kind, profile.by_module
    p, v = stages, virtual_stages
    tokens = profile.micro_batch * profile.seq
    unit = {"fp32": 4, "bf16": 2}[profile.compute]
    stream, logits = tokens * arch.hidden * unit, tokens * arch.vocab * unit
    embeddings = sum(by.get(k, 0) for k in EMBEDDINGS[kind])
    shared = by.get(SHARED, 0)
    head = sum(by.get(k, 0) for k in (FINAL_NORM[kind], "lm_head", "loss"))
    moment = {m.name: m for m in profile.moments}
    kept = profile.outside + 2 * profile.block
    loss_backward = moment["backward, loss (logits' gradient)"].live - kept
    tied = arch.vocab * arch.hidden * unit if arch.tied else 0
    first_block = moment["backward, first block"]
    block_backward = first_block.live - embeddings - shared - profile.block - tied
    making = first_block.grads - moment["backward, final norm"].grads
    tensors = {name: (shape, unit_) for name, shape, unit_ in arch.tensors()}
    root = [(n, s) for n, (s, u) in tensors.items() if u == "root"]
    out = []
    for stage in range(rank, v * p, p):
        first, last = stage == 0, stage == v * p - 1
        layers = stage_layers(arch.layers, v * p, stage)
        shapes = [s for _, s, u in arch.tensors() if u in layers]
        shapes += [
            s
            for n, s in root
            if (first and _is_embedding(kind, n)) or (last and not _is_embedding(kind, n))
        ]
        if last and arch.tied:
            shapes.append((arch.vocab, arch.hidden))  # the head: the last stage's own copy
        keep = len(layers) * profile.block + shared
        keep += embeddings if first else -stream
        keep += head + logits if last else stream
        out.append(
            Chunk(
                stage,
                layers,
                first,
                last,
                keep,
                max(loss_backward, block_backward) if last else block_backward,
                making if not last or block_backward > loss_backward else 0,
                logits if last else stream,
                0 if first else stream,
                sum(_numel(s) for s in shapes),
                len(shapes),
                max(_numel(s) for s in shapes),
            )
        )
    return out


def _is_embedding(kind: str, name: str) -> bool:
    return name.rpartition(".")[0] in EMBEDDINGS[kind]


def pipeline_passes(
    schedule: str, stages: int, rank: int, micro_batches: int, virtual_stages: int = 1
) -> list[tuple[str, int, int]]:
    """The passes rank ``rank`` runs, in order, as (pass, stage, micro-batch): the package's own
    schedules (``schedule.pipeline``: ``pipeline_order`` for GPipe and 1F1B, ``looped_order`` for
    interleaved 1F1B and zero bubble). Zero bubble's input-gradient pass "I" is taken as the
    backward, and its weight-gradient pass "W" as where the micro-batch's activations are freed
    (its matmuls' inputs are kept for it): an upper bound."""
    from placement_edu.schedule.pipeline import looped_order, pipeline_order

    if schedule in ("gpipe", "1f1b"):
        return [
            (kind, rank, k) for kind, k in pipeline_order(schedule, stages, rank, micro_batches)
        ]
    return looped_order(
        stages, rank, micro_batches, virtual_stages, zero_bubble=schedule == "zero_bubble"
    )


def derive_pipeline(
    arch: Architecture | str,
    profile: ActivationProfile,
    stages: int,
    rank: int,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
    micro_batches: int = 0,
    optimizer: str = "adam-foreach",
) -> StepPeak:
    """Pipeline rank ``rank`` of ``stages`` (one device per stage, fp32): its states (its chunks'
    tensors, ``pipeline_chunks``) and the live set after every pass of its schedule
    (``pipeline_passes``: the micro-batches in flight are counted off the package's own schedule,
    never assumed), ``micro_batches`` of them (default 2p).

    Persistent: its parameters, Adam's m, v and step, the batch's ids (first stage) and labels
    (last stage) for all m micro-batches, and the receive buffers ``torch.distributed.pipelining``
    makes once for every micro-batch: an input (b·s·h) on every chunk but the first, the output's
    gradient on every chunk but the last. Gradients appear at a chunk's first backward and stay
    (they accumulate over the micro-batches). A forward adds its micro-batch's keep; a backward
    adds its temporaries on top of everything in flight, then frees its micro-batch."""
    from placement_edu.peak import input_bytes, adam_temporaries

    arch = get_architecture(arch)
    p, v = stages, virtual_stages
    m = micro_batches or 2 * p
    expect(
        profile.compute == "fp32",
        f"fit prices a pipeline stage in fp32 (one device per stage, no FSDP2), got a "
        f"{profile.compute} profile: give the fp32 precision",
    )
    chunks = {c.stage: c for c in pipeline_chunks(arch, profile, p, rank, v)}
    params = sum(c.params for c in chunks.values()) * 4
    tensors = sum(c.tensors for c in chunks.values())
    optimizer_state = 2 * params + 4 * tensors
    firsts = sum(c.first for c in chunks.values()) + sum(c.last for c in chunks.values())
    inputs = firsts * input_bytes(profile.micro_batch, profile.seq) // 2 * m
    unit = 4 * profile.micro_batch * profile.seq * arch.hidden
    receive = m * unit * sum((not c.first) + (not c.last) for c in chunks.values())
    base = {PARAMS: params, OPTIMIZER: optimizer_state, INPUTS: inputs, BUFFERS: profile.buffers}
    base[RECEIVE_BUFFERS] = receive
    in_flight = {s: 0 for s in chunks}
    grads = {s: 0 for s in chunks}
    # What the schedule's loop holds in its locals (``held``): the output of the latest forward
    # (``output``) once that micro-batch's backward has run, until the next forward returns; and,
    # in the one-stage schedules (GPipe, 1F1B), the input gradient the latest backward sent
    # (``bwd_sends``), until the next backward's replaces it.
    latest, output_held, gradient_held = (-1, -1), 0, 0
    # ... and the losses it keeps until the step ends, each with its shifted labels (b·s int64)
    losses, labels = 0, input_bytes(profile.micro_batch, profile.seq) // 2
    events: list[Event] = []
    for kind, stage, k in pipeline_passes(schedule, p, rank, m, v):
        c = chunks[stage]
        if kind == "F":
            in_flight[stage] += 1
            latest, output_held = (stage, k), 0
        live = sum(in_flight[s] * chunks[s].keep for s in chunks)
        terms = {IN_FLIGHT: live, HELD_BY_THE_SCHEDULE: output_held + gradient_held + losses}
        terms[GRADS] = sum(grads.values())
        if kind in ("B", "I"):
            terms[BACKWARD_TRANSIENT] = c.transient
            terms[GRADS] += 0 if grads[stage] else c.making
        name = f"{_PASSES[kind]}, stage {stage}, micro-batch {k}"
        events.append(Event(name, _phase(kind), {**base, **terms}))
        if kind in ("B", "I"):
            grads[stage] = c.params * 4
            gradient_held = c.input_gradient if schedule in ("gpipe", "1f1b") else 0
            output_held = c.output if (stage, k) == latest else output_held
            losses += labels if c.last else 0
        if kind == "W" or (kind == "B" and schedule != "zero_bubble"):
            in_flight[stage] -= 1
    all_grads = sum(c.params for c in chunks.values()) * 4
    largest = max(c.largest for c in chunks.values())
    step = {
        GRADS: all_grads,
        HELD_BY_THE_SCHEDULE: losses,
        OPTIMIZER_TEMPORARIES: adam_temporaries(optimizer, params // 4, largest, 4),
    }
    # activations: what is live at the forward/backward peak besides the states and the buffers
    # (the micro-batches in flight, what the schedule holds, the running backward's temporaries)
    peak = max(events, key=lambda e: e.total)
    flight = sum(
        peak.terms.get(k, 0) for k in (IN_FLIGHT, HELD_BY_THE_SCHEDULE, BACKWARD_TRANSIENT)
    )
    events.append(Event(f"optimizer step ({optimizer})", "step", {**base, **step}))
    return StepPeak(
        params, all_grads, optimizer_state, flight, inputs, profile.buffers, tuple(events)
    )


_PASSES = {
    "F": "forward",
    "B": "backward",
    "I": "backward (input gradient)",
    "W": "backward (weight gradient)",
}


def _phase(kind: str) -> str:
    return "forward" if kind == "F" else "backward"
