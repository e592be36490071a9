"""Exercises of the notebook "Long context": context parallelism, ring attention against Ulysses
(``schedule.context``; Liu et al. 2023, Jacobs et al. 2023)."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.exercises import Exercise
from placement_edu.models import TransformerSpec
from placement_edu.long_context import context_costs, long_context_model
from placement_edu.schedule.context import kv_chunk_elements, ulysses_buffers
from placement_edu.schedule.costs import OpKind, ring_bytes
from placement_edu.units import GB

#: The questions' model: Llama-3-8B's shape (h = 4096, a = 32, K = 8) at s = 131,072, b = 1; bf16;
#: on a context axis of C ranks (each exercise's ``devices``: an answer C× off is named).
C = 8
BF16 = 2


def llama(kv_heads: int = 8, seq: int = 131072) -> TransformerSpec:
    return long_context_model(seq, 32, kv_heads)


def ring_sent(model: TransformerSpec, c: int) -> Fraction:
    """Bytes a rank sends per layer in forward: (c - 1) K/V chunks of 2·b·(s/c)·h_kv."""
    return (c - 1) * kv_chunk_elements(model, c, 1) * BF16


def ulysses_sent(model: TransformerSpec, c: int) -> Fraction:
    """Bytes a rank sends per layer in forward: (c - 1)/c of its Q/K/V and output buffers."""
    return sum(
        (ring_bytes(OpKind.ALL_TO_ALL, c, n * BF16) for n in ulysses_buffers(model, c, 1)), 0
    )


def largest_ulysses_degree(kv_heads: int) -> int:
    """The largest c in 2..64 on which the core derives Ulysses for ``llama(kv_heads)``."""
    return max(
        c
        for c in range(2, 65)
        if 131072 % c == 0 and not context_costs(llama(kv_heads), c, "ulysses").refused
    )


def faster(kv_heads: int, seq: int, c: int) -> str:
    """Which attention the core's time model gives the shorter step."""
    ring, ulysses = (context_costs(llama(kv_heads, seq), c, a) for a in ("ring", "ulysses"))
    return "ring" if ring.step_s <= ulysses.step_s else "ulysses"


EXERCISES = (
    Exercise(
        "long-context-ring-sent-gb",
        "Llama-3-8B's shape (h = 4096, a = 32 heads, K = 8 key-value heads), one sequence of "
        "s = 131,072 tokens, bf16, on a context axis of c = 8 with ring attention: how many GB "
        "(1e9 bytes) does one rank send per layer in forward?",
        lambda: ring_sent(llama(), C) / GB,
        "GB (1e9 bytes)",
        "(c - 1) rounds of one K/V chunk: 7 × 2·(s/c)·h_kv·2 B = 7 × 2 × 16,384 × 1,024 × 2 B "
        "= 469,762,048 B = 0.470 GB. h_kv = K·h/a = 1,024: grouped-query attention makes the "
        "chunks 4× smaller than the hidden width would.",
        mistakes=(
            (
                kv_chunk_elements(llama(), C, 1) * BF16 / GB,
                "that is one round; the chunk travels on (c - 1) = 7 rounds per layer.",
            ),
            (
                ring_sent(llama(kv_heads=32), C) / GB,
                "that counts keys and values h = 4096 wide; with K = 8 of 32 heads they are "
                "h_kv = 1,024 wide.",
            ),
            (
                C * kv_chunk_elements(llama(), C, 1) * BF16 / GB,
                "that is c rounds; a rank's own chunk needs no sending: (c - 1) = 7 rounds.",
            ),
            (
                3 * ring_sent(llama(), C) / GB,
                "that is forward and backward together (backward sends each K/V chunk again and "
                "its dK/dV: 2× forward); the question asks forward only.",
            ),
        ),
        hint="(c - 1) × 2·b·(s/c)·h_kv × 2 B, h_kv = K·h/a.",
        devices=C,
    ),
    Exercise(
        "long-context-ulysses-sent-gb",
        "The same model, sequence and c = 8 with Ulysses: how many GB (1e9 bytes) does one rank "
        "send per layer in forward (its two all-to-alls)?",
        lambda: ulysses_sent(llama(), C) / GB,
        "GB (1e9 bytes)",
        "Buffers of (s/c)·(h + 2h_kv) (Q, K, V) and (s/c)·h (the output) elements, of which an "
        "all-to-all keeps 1/c and sends (c - 1)/c: 7/8 × 16,384 × (6,144 + 4,096) × 2 B = "
        "293,601,280 B = 0.294 GB, less than ring attention's 0.470 GB here; but the ring's "
        "chunks hide under attention, the all-to-alls are on the critical path.",
        mistakes=(
            (
                sum(ulysses_buffers(llama(), C, 1)) * BF16 / GB,
                "that is the whole buffers; an all-to-all keeps 1/c of its buffer and sends "
                "(c - 1)/c.",
            ),
            (
                ring_bytes(OpKind.ALL_TO_ALL, C, ulysses_buffers(llama(), C, 1)[0] * BF16) / GB,
                "that is the Q/K/V all-to-all only; the attention output goes back by a second "
                "all-to-all of (s/c)·h.",
            ),
            (
                2 * ulysses_sent(llama(), C) / GB,
                "that is forward and backward together (backward runs both all-to-alls again, "
                "for the gradients); the question asks forward only.",
            ),
        ),
        hint="(c - 1)/c × [(s/c)(h + 2h_kv) + (s/c)h] × 2 B.",
        devices=C,
    ),
    Exercise(
        "long-context-ulysses-max-c",
        "With K = 8 key-value heads (a = 32 query heads) and no tensor parallelism, what is the "
        "largest context degree c on which Ulysses runs?",
        lambda: largest_ulysses_degree(8),
        "ranks",
        "8: Ulysses' all-to-all hands each rank whole heads, and each key-value head is one "
        "unit, so c·t must divide K. Ring attention has no such limit: it passes chunks of the "
        "sequence, c up to s (then it is limited by how little compute each chunk leaves to "
        "hide the transfer).",
        mistakes=((32, "32 is the query heads; the keys and values have only K = 8 heads."),),
        hint="what does the first all-to-all hand each rank?",
        exact=True,
    ),
    Exercise(
        "long-context-which-wins",
        "Multi-head attention (K = a = 32), s = 16,384, c = 32 (four nodes of 8 H100s: the ring "
        "crosses InfiniBand), 8 sequences a step: which attention gives the shorter step, ring "
        "or ulysses?",
        lambda: faster(32, 16384, 32),
        "",
        "ulysses: 1.21 s a step against ring's 4.74 s. Each rank's 512 tokens leave too little "
        "attention compute to hide 31 K/V rounds over InfiniBand (4.07 s exposed), while Ulysses "
        "sends 31/32 of a buffer that shrinks with c (0.54 s exposed). At c = 8 in one node the "
        "ring hides entirely and wins (2.68 s against 2.77 s).",
        hint="move s and c in the explorer; watch 'exposed'.",
        also=("DeepSpeed-Ulysses", "Ulysses attention", "DeepSpeed Ulysses"),
        mistakes=(
            (
                "ring",
                "at c = 32 each rank's 512 tokens leave too little attention to hide 31 K/V "
                "rounds over InfiniBand: the ring exposes seconds.",
            ),
            ("ring attention", "the ring exposes its 31 K/V rounds over InfiniBand at c = 32."),
        ),
    ),
)
