"""Long context: what one device keeps, sends and exposes under context parallelism, ring attention
against Ulysses (``schedule.context``), for a model of Llama-3-8B's shape at any sequence length.
Read by the long-context notebook's widget (``presentation.context_explorer``) and exercises.
Every byte and second is the core's: ``derive_schedule`` and ``derive_memory`` (through
``analyze``) and ``price_configuration``, on H100s 8 to a node, so a context group of more than 8
ranks crosses InfiniBand (``mesh.LAYOUT``)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from placement_edu.pricing import price_configuration
from placement_edu.errors import PlacementError
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.report import analyze
from placement_edu.strategies import COMPOSITIONS
from placement_edu.timing import HARDWARE
from placement_edu.shown import Shown

HARDWARE_NAME = "h100-nvlink-ib"
#: A step of 8 sequences on one data replica: 8 micro-batches of 1.
GLOBAL_BATCH = 8


def long_context_model(seq: int, heads: int = 32, kv_heads: int = 8) -> TransformerSpec:
    """Llama-3-8B's shape (architectures.py: L = 32, h = 4096, ffn 14336, V = 128256) at ``seq``
    tokens, ``heads`` heads of which ``kv_heads`` key-value heads, flash attention, b = 1, no
    recomputation (a replayed forward would send its K/V again)."""
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
