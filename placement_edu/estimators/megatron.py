"""Megatron-LM's ``report_theoretical_memory``, as its source computes and prints it, term by term.

Megatron prints MiB (2^20 bytes) labelled "MB"; every ``bytes`` here is exact.
"""

from __future__ import annotations

from fractions import Fraction

from placement_edu.errors import positive_int, expect
from placement_edu.estimators.estimate import Estimate, Term
from placement_edu.models import TransformerSpec, tensor_divides_heads
from placement_edu.units import MiB


def megatron_theoretical_memory(
    model: TransformerSpec,
    tensor: int = 1,
    pipeline: int = 1,
    data: int = 1,
    distributed_optimizer: bool = False,
    micro_batches: int | None = None,
) -> Estimate:
    """Megatron-LM ``report_theoretical_memory`` (megatron/training/theoretical_memory_usage.py) for
    a dense GPT with LayerNorm, tied embeddings, no GQA/MoE/SwiGLU, no virtual pipeline; in bytes.

    Weights and optimizer: the most loaded shard -- the first pipeline stage: (L/p layers of
    2h·(f + 2) + 4h² parameters, plus the final 2h layernorm, all over p) + the whole V·h embedding,
    over t -- times 18 B per parameter (bf16 params 2, fp32 grads 4, fp32 master + m + v 12), or
    6 + 12/d with the distributed optimizer. Megatron counts no biases and no position embeddings.

    Activations (first stage, Korthikanti et al. 2022, Table 2): with sequence parallelism and
    selective recomputation (``compute_activation_memory``) s·b·h·(18 + 4f/h) per layer × L (L/p
    layers × p micro-batches in flight), + 8·s·b·p (embedding input) + s·b·h·p (embedding dropout),
    × min(1, m/p) when m < p, + 4·s·b·h·(1 + V/h) (output layer and loss, when p = 1), all over t.
    Otherwise (``compute_activation_memory_without_sp``, which assumes selective recomputation):
    s·b·h·(10 + 24/t) per layer × L + the same embedding terms, × min(1, m/p), + 2·(s·b·V/t + s·b·h)
    when p = 1, then × 1.05 overhead. Printed in MiB labelled "MB"."""
    t, p, d = (
        positive_int(n, v) for n, v in (("tensor", tensor), ("pipeline", pipeline), ("data", data))
    )
    expect(model.layers >= p, f"{model.layers} layers cannot fill {p} pipeline stages")
    tensor_divides_heads(model, t)
    weights = weights_and_optimizer(model, t, p, d, distributed_optimizer)
    act, branch = activation_terms(model, t, p, micro_batches)
    w = sum((x.bytes for x in weights), Fraction(0))
    a = sum((x.bytes for x in act), Fraction(0))
    printed = (
        f"Theoretical memory footprints: weight and optimizer={float(w / MiB):.2f} MB, "
        f"activation={float(a / MiB):.2f} MB, total={float((w + a) / MiB):.2f} MB"
    )
    return Estimate(
        f"Megatron-LM report_theoretical_memory ({branch})",
        "per GPU, first pipeline stage",
        tuple(weights + act),
        printed,
        'MiB (2^20 bytes), printed as "MB"',
    )


def weights_and_optimizer(
    model: TransformerSpec, t: int, p: int, d: int, distributed_optimizer: bool
) -> list[Term]:
    """The first stage's shard of the weights, times 2 (bf16 params), 4 (fp32 main grads) and 12
    (fp32 master, m, v; over d with the distributed optimizer) bytes per parameter."""
    h, f, L, V = model.hidden, model.ffn, model.layers, model.vocab
    per_layer_params = 2 * h * (f + 2) + 4 * h * h
    block = L * per_layer_params + 2 * h
    shard = Fraction(Fraction(block, p) + V * h, t)
    why = (
        "the first stage holds (L·(2h(f+2) + 4h²) + 2h)/p + V·h = "
        f"{float(shard * t):,.0f} parameters (the whole embedding, no biases, no position "
        f"embeddings), / t = {float(shard):,.0f}"
    )
    return [
        Term("bf16 params (2 B)", 2 * shard, why, "params"),
        Term("fp32 main grads (4 B)", 4 * shard, why, "grads"),
        Term(
            "fp32 master + Adam m + v (12 B" + (f" / d = {d})" if distributed_optimizer else ")"),
            Fraction(12, d if distributed_optimizer else 1) * shard,
            why
            + ("; the distributed optimizer shards these over d" if distributed_optimizer else ""),
            "optimizer",
        ),
    ]


def activation_terms(
    model: TransformerSpec, t: int, p: int, micro_batches: int | None
) -> tuple[list[Term], str]:
    """The first stage's activations, by the branch Megatron takes (sequence parallel with
    selective recomputation, or not), and the branch's name. The two branches differ in the
    per-layer term, in dividing everything over t, and in the output layer; the embedding terms are
    the same formula in both."""
    s, b, h = model.seq, model.micro_batch, model.hidden
    in_flight = (
        min(Fraction(1), Fraction(micro_batches, p))
        if micro_batches is not None and p > 1
        else Fraction(1)
    )
    flight = f" × min(1, m/p) = {in_flight}" if in_flight != 1 else ""
    sp_selective = model.sequence_parallel and model.recompute == "selective"
    if sp_selective:
        scale, note = in_flight / t, f"{flight}, / t"
        layers, output = _with_sp(model, t, scale, note)
        branch = "compute_activation_memory (sequence parallel + selective recomputation)"
    else:
        scale, note = in_flight, flight
        layers, output = _without_sp(model, t, scale, note)
        branch = "compute_activation_memory_without_sp"
    act = [
        layers,
        Term("embedding input (token ids)", 8 * s * b * p * scale, f"8·s·b·p{note}", "activations"),
        Term("embedding dropout mask", s * b * h * p * scale, f"s·b·h·p{note}", "activations"),
    ] + ([output] if p == 1 else [])
    if not sp_selective:
        base = sum((x.bytes for x in act), Fraction(0))
        act.append(
            Term(
                "overhead factor 1.05",
                Fraction(base) / 20,
                "Megatron adds 5% for optimizer and other temporaries",
                "buffer",
            )
        )
    return act, branch


def _with_sp(model: TransformerSpec, t: int, scale: Fraction, note: str) -> tuple[Term, Term]:
    """``compute_activation_memory``: the transformer layers and the output layer, over t."""
    s, b, h, f, L, V = (
        model.seq,
        model.micro_batch,
        model.hidden,
        model.ffn,
        model.layers,
        model.vocab,
    )
    layers = Term(
        "transformer layers",
        s * b * h * (18 + Fraction(4 * f, h)) * L * scale,
        "s·b·h·(18 + 4f/h) per layer (= 34·s·b·h when f = 4h) × L layers (L/p layers × p "
        f"micro-batches in flight){note}",
        "activations",
    )
    output = Term(
        "output layer and loss",
        Fraction(4 * s * b * h + 4 * s * b * V, t),
        "4·s·b·h·(1 + V/h): inputs to the output layer and the fp32 logits, / t",
        "activations",
    )
    return layers, output


def _without_sp(model: TransformerSpec, t: int, scale: Fraction, note: str) -> tuple[Term, Term]:
    """``compute_activation_memory_without_sp`` (selective recomputation assumed)."""
    s, b, h, L, V = model.seq, model.micro_batch, model.hidden, model.layers, model.vocab
    layers = Term(
        "transformer layers",
        s * b * h * (10 + Fraction(24, t)) * L * scale,
        "s·b·h·(10 + 24/t) per layer × L (selective recomputation assumed, no sequence "
        f"parallelism){note}",
        "activations",
    )
    output = Term(
        "output layer and loss",
        2 * (Fraction(s * b * V, t) + s * b * h),
        "2·(s·b·V/t + s·b·h): logits and final layernorm output",
        "activations",
    )
    return layers, output
