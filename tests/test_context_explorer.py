"""The long-context explorer (notebook 13) and ``long_context.context_costs``: every figure is the
core's, checked against hand calculations for Llama-3-8B's shape (h = 4096, a = 32, K = 8 key-value
heads: h_kv = 1024, bf16) -- ring attention's (c - 1) K/V chunks of 2·(s/c)·h_kv (Liu et al.
2023), Ulysses' all-to-alls of (s/c)·(h + 2h_kv) and (s/c)·h, (c - 1)/c of each sent (Jacobs et
al. 2023 §3.2) -- and the time model's two regimes."""

from __future__ import annotations

import pytest

from placement_edu.long_context import context_costs, long_context_model
from placement_edu.presentation import ContextExplorer

pytestmark = pytest.mark.fast


def test_ring_and_ulysses_bytes_per_layer_by_hand() -> None:
    llama, c = long_context_model(131072), 8
    ring = context_costs(llama, c, "ring")
    chunk = 2 * (131072 // c) * 1024 * 2  # K and V of s/c tokens, h_kv wide, 2 B: 67,108,864 B
    assert ring.forward_sent == (c - 1) * chunk == 469_762_048
    assert ring.backward_sent == 2 * (c - 1) * chunk  # K/V again and dK/dV beside them
    assert ring.buffers == 2 * chunk  # the chunk computing and the one arriving
    ulysses = context_costs(llama, c, "ulysses")
    qkv, out = (131072 // c) * (4096 + 2 * 1024) * 2, (131072 // c) * 4096 * 2
    assert ulysses.forward_sent == (qkv + out) * (c - 1) // c == 293_601_280
    assert ulysses.backward_sent == ulysses.forward_sent
    assert ulysses.buffers == qkv  # the head-split Q, K, V: all s tokens of a/c heads
    # a context axis keeps 1/c of a layer's activations, either way
    assert ring.activations == ulysses.activations == llama.activation_bytes_per_layer(1) // c


def test_ulysses_is_refused_past_the_key_value_heads_ring_is_not() -> None:
    llama = long_context_model(131072)
    refused = context_costs(llama, 16, "ulysses")
    assert "does not divide the 8 key-value heads" in refused.refused
    assert refused.forward_sent == 0 and refused.step_s == 0
    assert not context_costs(llama, 16, "ring").refused


def test_the_ring_hides_inside_a_node_and_loses_on_short_chunks_across_nodes() -> None:
    # c = 8 (one node, NVLink), s = 131072: 16,384 tokens a rank hide every K/V round
    long = long_context_model(131072)
    assert context_costs(long, 8, "ring").exposed_s == 0
    assert context_costs(long, 8, "ulysses").exposed_s > 0  # on the critical path
    # MHA, s = 16384, c = 32 (InfiniBand): 512 tokens a rank cannot hide 31 rounds
    short = long_context_model(16384, heads=32, kv_heads=32)
    ring, ulysses = (context_costs(short, 32, a) for a in ("ring", "ulysses"))
    assert ring.exposed_s > 1 and ulysses.step_s < ring.step_s / 3


def test_moving_a_control_moves_the_figures_and_the_figure() -> None:
    explorer = ContextExplorer(seq=131072, context=8, kv_heads=8)
    before, (ring, ulysses) = explorer.image.value, explorer.costs
    assert (ring.attention, ulysses.attention) == ("ring", "ulysses")
    assert ring.forward_sent == 469_762_048
    explorer.context.value = 2
    assert explorer.costs[0].forward_sent == 2 * 65536 * 1024 * 2  # one round of a bigger chunk
    assert explorer.image.value != before
    explorer.context.value = 16
    assert explorer.costs[1].refused and "key-value heads" in explorer.readout.value
    explorer.kv_heads.value = 32  # no grouped-query attention: Ulysses runs at 16
    assert not explorer.costs[1].refused
