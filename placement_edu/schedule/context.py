"""Context parallelism (the ``context`` mesh axis, degree c): each sequence is cut into c chunks of
s/c tokens, one per context rank. Parameters, gradients and optimizer state stay whole on the axis
(or sliced with the data axis, as Megatron's distributed optimizer does); activations are the
chunk's, 1/c of the layer's. Every module but attention works token by token and needs nothing
from the other chunks; attention's queries need the keys and values of the whole sequence. Two
ways to bring them, each a schedule of its own:

- ``"ring"`` (Liu et al. 2023, "Ring Attention with Blockwise Transformers"; Megatron-Core's
  context parallelism): the K/V chunks travel around the ring of c ranks, (c - 1) send/recv
  rounds per attention layer in forward. Backward sends them round again and, beside them, the
  dK/dV each rank adds to the chunk it holds, so that each chunk's gradient comes home summed:
  Megatron's documentation describes it as "all-gather across GPUs to collect the full sequence
  of KV ... reduce-scatter ... to the activation gradients of KV in backward ... each GPU only
  stores the KV of a sequence chunk in forward and gathers KV again in backward. The all-gather
  and reduce-scatter are transformed to point-to-point communications in ring topology"
  (NVIDIA/Megatron-LM, docs/source/api-guide/context_parallel.rst). Per layer and per pass each
  rank sends (c - 1) chunks of 2·b·(s/c)·h_kv elements: 2(c - 1)/c · b·s·h_kv, an all-gather's
  ring bytes (h_kv = K·h/a, the key-value width under grouped-query attention).
- ``"ulysses"`` (Jacobs et al. 2023, "DeepSpeed Ulysses", §3.2): an all-to-all turns Q, K, V from
  sequence-split (s/c tokens, all a heads) into head-split (all s tokens, a/c heads); attention
  runs on whole heads; a second all-to-all turns the output back. Backward runs the two in
  reverse. The paper's volume: "aggregate message size of 3Nh [QKV] ... Nh [output] ... per link
  communication volume of 4Nh/P": each device's buffers are 3Nh/P and Nh/P, of which it keeps
  1/P and sends the rest (``all_to_all`` in ``costs.OP_COSTS``).

Which one a strategy runs is ``Strategy.context_attention`` (``strategies.CONTEXT_ATTENTIONS``).

Under a causal mask the bytes do not depend on which tokens a rank holds, the work does: with
contiguous chunks rank c-1's queries see every chunk and rank 0's only its own. Megatron-Core gives
each rank two chunks of s/(2c), i and 2c-1-i, so every rank does the same attention work; the time
model prices that balanced split (the tokens divided evenly), the gloo run
(``runtime.context_attention``) uses contiguous chunks: the same messages, unequal compute.

One function per fact: ``context_degree``, ``context_applies`` (the axis refused where it does not
apply, with the reason), ``kv_chunk_elements``, ``ulysses_buffers``,
``context_attention_collectives`` (the schedule's ops) and ``context_buffer_bytes`` (the K/V in
flight, a transient term of ``memory``)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from placement_edu.errors import PlacementError
from placement_edu.mesh import Mesh
from placement_edu.models import Model, stage_layers
from placement_edu.placement import State
from placement_edu.schedule.ops import Op, Repeat, held
from placement_edu.schedule.costs import OpKind
from placement_edu.units import exact


def context_degree(mesh: Mesh) -> int:
    """c: the context axis' degree (1 without one). Every state but activations is whole (or
    sliced with the data axis) there, so c splits the tokens, never the model."""
    return mesh.degree("context")


def kv_fraction(model: Model) -> Fraction:
    """h_kv / h: how wide keys (and values) are next to the hidden size -- K/a under grouped-query
    attention (K key-value heads of a), 1 for multi-head attention or a model without heads."""
    heads = model.heads
    if heads is None:
        return Fraction(1)
    return Fraction(model.kv_heads or heads, heads)


def context_applies(attention: str, model: Model, mesh: Mesh, tensor: int) -> None:
    """Refuse the context axis where it does not apply, in one line with the reason: a model
    without a sequence; a sequence that c does not split into equal chunks; Ulysses on heads that
    c·t does not divide (each of the c·t ranks of a tensor × context group computes whole heads,
    and whole key-value heads). ``attention``: the strategy's ``context_attention``."""
    c = context_degree(mesh)
    if c == 1:
        return
    if model.boundary_elements <= 0:
        raise PlacementError(
            f"the context axis ({c} ranks) splits each sequence, but {model.description} has no "
            "sequence (no boundary_elements b·s·h); give a transformer (--layers --hidden --heads "
            "--seq --vocab) or drop the context axis"
        )
    seq = model.seq
    if seq is not None and seq % c:
        raise PlacementError(
            f"context degree {c:,} does not divide the sequence of {seq:,} tokens; expected a "
            f"divisor of {seq:,}, because each context rank holds an equal chunk of s/c tokens"
        )
    heads = model.heads
    if attention == "ulysses" and heads is not None:
        kv_heads = model.kv_heads or heads
        for what, count in (("attention heads", heads), ("key-value heads", kv_heads)):
            if count % (c * tensor):
                raise PlacementError(
                    f"Ulysses on context {c:,} × tensor {tensor:,} = {c * tensor:,} ranks does "
                    f"not divide the {count:,} {what}; expected c·t to divide {count:,}, because "
                    "its all-to-all hands each rank whole heads (ring attention has no such rule)"
                )


def kv_chunk_elements(model: Model, c: int, tensor: int) -> Fraction:
    """Elements of one rank's K and V chunk, the message ring attention passes on each round:
    2·b·(s/c)·h_kv/t (keys and values of s/c tokens, this tensor rank's 1/t of the heads)."""
    return 2 * model.boundary_elements * kv_fraction(model) / (c * tensor)


def ulysses_buffers(model: Model, c: int, tensor: int) -> tuple[Fraction, Fraction]:
    """Elements of this device's buffer in Ulysses' two all-to-alls: (Q, K and V together,
    b·(s/c)·(h + 2h_kv)/t; the attention output, b·(s/c)·h/t). The buffer after the exchange is
    as large: all s tokens of a/(c·t) heads."""
    bsh = Fraction(model.boundary_elements, c * tensor)
    return bsh * (1 + 2 * kv_fraction(model)), bsh


def ring_message(dev: Any, kind: str, name: str) -> list[Op]:
    """One ring step of one message in pass ``kind``: send it on to the next context rank,
    receive the previous rank's. ``name``: "K/V" (a rank's chunk of keys and values) or "dK/dV"
    (the gradient of a chunk's keys and values summed so far, travelling beside it)."""
    c, t = context_degree(dev.mesh), dev.tensor
    phase = "forward" if kind == "forward" else "backward"
    chunk = exact(kv_chunk_elements(dev.model, c, t))  # (an int where whole: cheaper to price)
    return [
        dev.op(
            op,
            State.ACTIVATIONS,
            "context",
            phase,
            chunk,
            c,
            f"{kind}: ring attention, {verb} a {name} chunk to the next context rank",
        )
        for op, verb in ((OpKind.SEND, "send on"), (OpKind.RECV, "receive"))
    ]


def ring_layer(dev: Any, kind: str) -> list[Op | Repeat]:
    """Ring attention's messages of one layer in pass ``kind``, in the order they travel.
    Forward: (c - 1) rounds, each passing the K/V chunk in hand on (a rank meets every chunk).
    Backward: the chunks go round again, and from its first visitor on each chunk's dK/dV travels
    beside it, summing what each rank adds, until the last visitor sends it home (the owner adds
    its own part there): round 1 passes K/V, rounds 2 .. c-1 K/V and a dK/dV, a last step the
    dK/dV alone -- (c - 1) of each."""
    c = context_degree(dev.mesh)
    kv = ring_message(dev, kind, "K/V")
    if kind != "backward":
        return held(kv, c - 1)
    dkv = ring_message(dev, kind, "dK/dV")
    middle: list[Op | Repeat] = held(kv + dkv, c - 2) if c > 2 else []
    return [*kv, *middle, *dkv]


def ulysses_exchange(dev: Any, kind: str) -> list[Op]:
    """Ulysses' two all-to-alls of one attention layer in pass ``kind``: forward (and its replay)
    Q/K/V sequence -> heads, then the output heads -> sequence; backward the output gradient
    sequence -> heads, then the Q/K/V gradients heads -> sequence."""
    c, t = context_degree(dev.mesh), dev.tensor
    qkv, out = ulysses_buffers(dev.model, c, t)
    phase = "forward" if kind == "forward" else "backward"  # a replayed forward runs in backward
    if kind == "backward":
        steps = [
            (out, "the output gradient: sequence-split -> head-split"),
            (qkv, "the Q, K, V gradients: head-split -> sequence-split"),
        ]
    else:
        steps = [
            (qkv, "Q, K, V: sequence-split -> head-split (every token, a/c heads)"),
            (out, "the attention output: head-split -> sequence-split"),
        ]
    return [
        dev.op(OpKind.ALL_TO_ALL, State.ACTIVATIONS, "context", phase, size, c, f"{kind}: {why}")
        for size, why in steps
    ]


def context_attention_collectives(dev: Any, phase: str) -> list[Op | Repeat]:
    """The context axis' ops of one pass (``phase``: "forward" or "backward") on this rank's
    layers: per layer, ring attention's (c - 1) rounds or Ulysses' two all-to-alls. Full
    recomputation replays forward's in backward (as it does tensor parallelism's). The axis is
    refused here where it does not apply (``context_applies``)."""
    c = context_degree(dev.mesh)
    if c == 1:
        return []
    context_applies(dev.strategy.context_attention, dev.model, dev.mesh, dev.tensor)
    layers = len(stage_layers(dev.model.layers, dev.stages, dev.stage))
    kinds = [phase]
    if phase == "backward" and dev.model.recompute == "full":
        kinds = ["forward (recomputed)", "backward"]
    ops: list[Op | Repeat] = []
    for kind in kinds:
        if dev.strategy.context_attention == "ulysses":
            layer: list[Op | Repeat] = list(ulysses_exchange(dev, kind))
        else:
            layer = ring_layer(dev, kind)
        ops += layer if layers == 1 else [Repeat(tuple(layer), layers, unit=True)]
    return ops


def context_buffer_bytes(
    attention: str, model: Model, mesh: Mesh, tensor: int, activation_bytes: int
) -> dict[str, Fraction]:
    """Bytes of the attention inputs in flight on the context axis, one layer at a time, per
    phase: ring attention holds the K/V chunk it computes with and the one arriving (2 chunks),
    and in backward their dK/dV beside them (4); Ulysses holds the head-split Q, K, V it received
    (b·s·(h + 2h_kv)/(c·t): every token, a/(c·t) heads) and, in backward, their gradients on
    their way back. ``attention``: the strategy's ``context_attention``."""
    c = context_degree(mesh)
    if c == 1:
        return {}
    if attention == "ulysses":
        qkv, _ = ulysses_buffers(model, c, tensor)
        forward, backward = qkv, 2 * qkv
    else:
        chunk = kv_chunk_elements(model, c, tensor)
        forward, backward = 2 * chunk, 4 * chunk
    return {"forward": forward * activation_bytes, "backward": backward * activation_bytes}
