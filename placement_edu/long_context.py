"""Long context: what one device keeps, sends and exposes under context parallelism, ring attention
against Ulysses (``schedule.context``), for a model of Llama-3-8B's shape at any sequence length.
Read by the long-context notebook's widget (``presentation.context_explorer``) and exercises.
Every byte and second is the core's: ``derive_schedule`` and ``derive_memory`` (through
``analyze``) and ``price_configuration``, on H100s 8 to a node, so a context group of more than 8
ranks crosses InfiniBand (``mesh.LAYOUT``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from placement_edu.pricing import price_configuration
from placement_edu.errors import PlacementError, expect
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.report import analyze
from placement_edu.schedule.context import kv_fraction, ulysses_buffers
from placement_edu.strategies import COMPOSITIONS
from placement_edu.timing import HARDWARE
from placement_edu.shown import Shown

HARDWARE_NAME = "h100-nvlink-ib"
#: A step of 8 sequences on one data replica: 8 micro-batches of 1.
GLOBAL_BATCH = 8


def long_context_model(
    seq: int, heads: int = 32, kv_heads: int = 8, attention_count: str = "full"
) -> TransformerSpec:
    """Llama-3-8B's shape (architectures.py: L = 32, h = 4096, ffn 14336, V = 128256) at ``seq``
    tokens, ``heads`` heads of which ``kv_heads`` key-value heads, flash attention, b = 1, no
    recomputation (a replayed forward would send its K/V again); attention's FLOPs counted
    ``attention_count`` ("full" or "causal", ``ATTENTION_COUNTS``)."""
    return TransformerSpec(
        layers=32,
        hidden=4096,
        heads=heads,
        kv_heads=kv_heads,
        ffn=14336,
        vocab=128256,
        seq=seq,
        micro_batch=1,
        attention="flash",
        name="llama-8b",
        attention_count=attention_count,
    )


@dataclass(frozen=True)
class ContextCosts(Shown):
    """One device's figures for one way of attention on a context axis of degree ``context``:
    ``activations`` (bytes a layer keeps for backward, its s/c tokens), ``buffers`` (bytes of
    K/V or Q/K/V in flight), ``forward_sent`` and ``backward_sent`` (bytes it sends per layer, ring
    bytes), ``exposed_s`` and ``step_s`` (seconds per step); ``refused``: the core's reason where
    this way does not apply (then the figures are 0)."""

    attention: str
    context: int
    activations: int = 0
    buffers: int = 0
    forward_sent: int = 0
    backward_sent: int = 0
    exposed_s: float = 0.0
    step_s: float = 0.0
    refused: str = ""


def context_costs(model: TransformerSpec, context: int, attention: str) -> ContextCosts:
    """``model`` on ``data=1,context=c`` (dp×cp) with ``attention``: the core's bytes per layer
    and seconds per step on rank 0."""
    mesh = Mesh.of(data=1, context=context)
    strategy = COMPOSITIONS["dp×cp"].with_(context_attention=attention)
    try:
        report = analyze(strategy, model, mesh=mesh)
        priced = price_configuration(
            model,
            mesh,
            "dp",
            GLOBAL_BATCH,
            HARDWARE[HARDWARE_NAME],
            get_precision("mixed_adam"),
            recompute=model.recompute,
            context_attention=attention,
        )
    except PlacementError as refused:
        return ContextCosts(attention, context, refused=str(refused).split(": ", 1)[-1])
    sent = {"forward": Fraction(0), "backward": Fraction(0)}
    for op in report.schedule.per_step:
        if op.axis == "context" and op.state is State.ACTIVATIONS and op.phase in sent:
            sent[op.phase] += op.ring_bytes
    forward = report.memory.transient["forward"]
    time = priced.choice.time
    assert time is not None
    return ContextCosts(
        attention,
        context,
        int(model.activation_bytes_per_layer(1) / context),
        int(forward["context_buffers"]),
        int(sent["forward"] / model.layers),
        int(sent["backward"] / model.layers),
        time.exposed_comm_s,
        time.total_s,
    )


# --- what the table's seconds rest on: the ring's hiding condition, the causal count, zig-zag
# chunks and Ulysses past c = K -----------------------------------------------------------------

#: How attention's s² FLOPs are counted (``TransformerSpec.ATTENTION_COUNTS``, one definition):
#: "full", PaLM's 12·L·h·s per token, the count ``time`` and ``plan`` price by default; "causal",
#: Megatron-LM's, half of it -- a model's ``attention_count`` chooses, and the time model prices
#: it (``long_context_model(s, attention_count="causal")``).
ATTENTION_COUNTS = TransformerSpec.ATTENTION_COUNTS


def ring_round(model: TransformerSpec, context: int, count: str = "full") -> tuple[int, Fraction]:
    """One rank's ring round of one layer in forward: (bytes it moves, FLOPs it computes while they
    move). It sends its K/V chunk, 2·b·(s/c)·h_kv elements of 2 B (bf16), while it computes its
    s/c queries against the chunk it holds: QKᵀ and attention over V, 2·b·(s/c)²·h FLOPs each,
    4·b·(s/c)²·h in all -- times ``ATTENTION_COUNTS[count]`` (a causal round, zig-zag balanced,
    computes half a block on average)."""
    expect(
        count in ATTENTION_COUNTS,
        f"count must be one of {', '.join(ATTENTION_COUNTS)}, got {count!r}",
    )
    chunk = model.seq // context
    kv_width = model.hidden * kv_fraction(model)
    moved = int(2 * model.micro_batch * chunk * kv_width * 2)
    return moved, 4 * model.micro_batch * chunk**2 * model.hidden * ATTENTION_COUNTS[count]


def ring_hides_from(
    model: TransformerSpec, bandwidth: float, flops: float, count: str = "full"
) -> Fraction:
    """The chunk s/c (tokens a rank) from which a ring round's transfer hides under its block:
    2·b·(s/c)·h_kv·2 B / W ≤ 4·b·(s/c)²·h·f / F, that is s/c ≥ (h_kv/h) · (F/W) / f, with f = 1
    for the full count and 1/2 for the causal one (``ATTENTION_COUNTS``). W: the link's bytes per
    second, F: the device's achieved FLOP/s. Latency (α per round) left out."""
    expect(
        count in ATTENTION_COUNTS,
        f"count must be one of {', '.join(ATTENTION_COUNTS)}, got {count!r}",
    )
    return kv_fraction(model) * Fraction(flops) / Fraction(bandwidth) / ATTENTION_COUNTS[count]


def causal_blocks(context: int, zigzag: bool = True) -> list[Fraction]:
    """Each context rank's attention work under a causal mask, in blocks of (s/2c)² query-key
    pairs: the sequence cut into 2c chunks, rank i holding chunks i and 2c − 1 − i (zig-zag:
    Megatron-Core's load balancing) or 2i and 2i + 1 (contiguous). Chunk j attends to the j chunks
    before it and to half of itself (the diagonal): j + 1/2 blocks. Zig-zag gives every rank 2c
    blocks; contiguous chunks give rank c − 1 4c − 2 blocks, 2c − 1 times rank 0's 2."""
    expect(isinstance(context, int) and context >= 1, f"context is a degree >= 1, got {context!r}")
    held = [(i, 2 * context - 1 - i) if zigzag else (2 * i, 2 * i + 1) for i in range(context)]
    return [sum((j + Fraction(1, 2) for j in chunks), Fraction(0)) for chunks in held]


def ulysses_replicated(model: TransformerSpec, context: int) -> tuple[int, int]:
    """Ulysses past c = K: (key-value heads after replication, bytes one rank sends per layer in
    forward, bf16). The all-to-all hands each rank whole key-value heads, so c must divide K --
    unless each of the K heads is repeated c/K times before it, as verl does
    (verl/models/transformers/monkey_patch.py: ``repeat_kv(key_states, ulysses_sp_size //
    nheads_k)``): the K/V buffers then carry max(K, c) heads, c/K times the bytes, and everything
    else is Ulysses' own (``schedule.context.ulysses_buffers`` on the repeated heads)."""
    kv_heads = model.kv_heads or model.heads
    expect(
        context % kv_heads == 0 or kv_heads % context == 0,
        f"Ulysses repeats K = {kv_heads} key-value heads to c = {context} ranks only when one "
        "divides the other",
    )
    expect(
        model.heads % context == 0,
        f"Ulysses gives each of c = {context} ranks whole query heads: c must divide a = "
        f"{model.heads}",
    )
    repeated = replace(model, kv_heads=max(kv_heads, context))
    qkv, out = ulysses_buffers(repeated, context, 1)
    return max(kv_heads, context), int((qkv + out) * Fraction(context - 1, context) * 2)
