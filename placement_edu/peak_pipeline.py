"""The peak of a real model's step on a pipeline axis (SPEC §3, §6), from one activation profile
measured on one device (``peak.ActivationProfile``): pipeline rank r of p (one device per stage,
fp32) holds its stage slices of the model (``pipeline_chunks``) and the micro-batches in flight
after every pass of its schedule, walked off the package's own schedule orders
(``derive_pipeline``), with what ``torch.distributed.pipelining`` adds (its receive buffers, the
outputs it holds), as ``runtime/axes/axis_tracker.py`` measures them. ``peak_axes.derive_on_mesh``
sends a pipeline mesh here. All figures are bytes.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.errors import expect
from placement_edu.strategies import PIPELINE_SCHEDULES, PipelineSchedule
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
    adam_temporaries,
    input_bytes,
)


def numel(shape: tuple[int, ...]) -> int:
    """Elements of a tensor of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return n


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
                sum(numel(s) for s in shapes),
                len(shapes),
                max(numel(s) for s in shapes),
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

    if schedule in PIPELINE_SCHEDULES:
        return [
            (kind, rank, k) for kind, k in pipeline_order(schedule, stages, rank, micro_batches)
        ]
    return looped_order(
        stages,
        rank,
        micro_batches,
        virtual_stages,
        zero_bubble=schedule == PipelineSchedule.ZERO_BUBBLE,
    )


def pipeline_micro_batches(stages: int, given: int) -> int:
    """The micro-batches of a pipeline's step: those ``given``, or 2p where 0 is given."""
    return given or 2 * stages


@dataclass(frozen=True)
class PipelineRank:
    """Rank ``rank`` of a pipeline of ``stages`` stages, one device each, under ``schedule``
    (``schedule.pipeline``: gpipe, 1f1b, interleaved, zero_bubble) with ``virtual_stages`` chunks
    a rank, over ``micro_batches`` micro-batches (0 is taken as the default, 2p). One value for
    what ``derive_pipeline`` predicts and ``axis_tracker.pipeline_measure`` measures; its fields
    in order are (p, rank, schedule, v, m)."""

    stages: int
    rank: int
    schedule: str = "1f1b"
    virtual_stages: int = 1
    micro_batches: int = 0

    def __post_init__(self) -> None:
        m = pipeline_micro_batches(self.stages, self.micro_batches)
        object.__setattr__(self, "micro_batches", m)


def derive_pipeline(
    arch: Architecture | str,
    profile: ActivationProfile,
    pipeline: PipelineRank,
    optimizer: str = "adam-foreach",
) -> StepPeak:
    """Pipeline rank ``pipeline.rank`` of ``pipeline.stages`` (one device per stage, fp32): its
    states (its chunks' tensors, ``pipeline_chunks``) and the live set after every pass of its
    schedule (``pipeline_passes``: the micro-batches in flight are counted off the package's own
    schedule, never assumed), ``pipeline.micro_batches`` of them.

    Persistent: its parameters, Adam's m, v and step, the batch's ids (first stage) and labels
    (last stage) for all m micro-batches, and the receive buffers ``torch.distributed.pipelining``
    makes once for every micro-batch: an input (b·s·h) on every chunk but the first, the output's
    gradient on every chunk but the last. Gradients appear at a chunk's first backward and stay
    (they accumulate over the micro-batches). A forward adds its micro-batch's keep; a backward
    adds its temporaries on top of everything in flight, then frees its micro-batch."""
    arch = get_architecture(arch)
    p, rank, schedule, v, m = astuple(pipeline)
    expect(
        profile.compute == "fp32",
        f"fit prices a pipeline stage in fp32 (one device per stage, no FSDP2), got a "
        f"{profile.compute} profile: give the fp32 precision",
    )
    chunks = {c.stage: c for c in pipeline_chunks(arch, profile, p, rank, v)}
    base = stage_states(arch, profile, chunks, m)
    passes = pipeline_passes(schedule, p, rank, m, v)
    events, losses = pass_events(passes, chunks, base, schedule, profile)
    # activations: what is live at the forward/backward peak besides the states and the buffers
    # (the micro-batches in flight, what the schedule holds, the running backward's temporaries)
    peak = max(events, key=lambda e: e.total)
    flight = sum(
        peak.terms.get(k, 0) for k in (IN_FLIGHT, HELD_BY_THE_SCHEDULE, BACKWARD_TRANSIENT)
    )
    all_grads = sum(c.params for c in chunks.values()) * 4
    largest = max(c.largest for c in chunks.values())
    step = {
        GRADS: all_grads,
        HELD_BY_THE_SCHEDULE: losses,
        OPTIMIZER_TEMPORARIES: adam_temporaries(optimizer, base[PARAMS] // 4, largest, 4),
    }
    events.append(Event(f"optimizer step ({optimizer})", "step", {**base, **step}))
    return StepPeak(
        base[PARAMS],
        all_grads,
        base[OPTIMIZER],
        flight,
        base[INPUTS],
        profile.buffers,
        tuple(events),
    )


def stage_states(
    arch: Architecture, profile: ActivationProfile, chunks: dict[int, Chunk], m: int
) -> dict[str, int]:
    """What the rank holds through the step (bytes): its chunks' parameters, Adam's m, v and
    step, the ids and labels of m micro-batches, the module's buffers, and the receive buffers."""
    params = sum(c.params for c in chunks.values()) * 4
    tensors = sum(c.tensors for c in chunks.values())
    firsts = sum(c.first for c in chunks.values()) + sum(c.last for c in chunks.values())
    unit = 4 * profile.micro_batch * profile.seq * arch.hidden
    return {
        PARAMS: params,
        OPTIMIZER: 2 * params + 4 * tensors,
        INPUTS: firsts * input_bytes(profile.micro_batch, profile.seq) // 2 * m,
        BUFFERS: profile.buffers,
        RECEIVE_BUFFERS: m * unit * sum((not c.first) + (not c.last) for c in chunks.values()),
    }


def pass_events(
    passes: list[tuple[str, int, int]],
    chunks: dict[int, Chunk],
    base: dict[str, int],
    schedule: str,
    profile: ActivationProfile,
) -> tuple[list[Event], int]:
    """The live set after every pass (``passes``: the schedule's, in order), and the bytes of the
    losses the schedule keeps until the step ends."""
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
    for kind, stage, k in passes:
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
            gradient_held = c.input_gradient if schedule in PIPELINE_SCHEDULES else 0
            output_held = c.output if (stage, k) == latest else output_held
            losses += labels if c.last else 0
        if kind == "W" or (kind == "B" and schedule != PipelineSchedule.ZERO_BUBBLE):
            in_flight[stage] -= 1
    return events, losses


_PASSES = {
    "F": "forward",
    "B": "backward",
    "I": "backward (input gradient)",
    "W": "backward (weight gradient)",
}


def _phase(kind: str) -> str:
    return "forward" if kind == "F" else "backward"
