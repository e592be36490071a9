"""The long-context chapter's derivations (issue 40, item 3): a ring round's bytes and FLOPs and the
chunk from which it hides, the causal count, zig-zag chunks, and Ulysses past c = K by repeating
key-value heads -- each against a hand count, and the hiding condition against the step times
notebook 13 prints."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from placement_edu.errors import PlacementError
from placement_edu.exercises import solution
from placement_edu.long_context import (
    ATTENTION_COUNTS,
    causal_blocks,
    long_context_model,
    ring_hides_from,
    ring_round,
    ulysses_replicated,
)
from placement_edu.timing import HARDWARE

pytestmark = pytest.mark.fast

H100 = HARDWARE["h100-nvlink-ib"]
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "13_long_context.ipynb"


def test_a_ring_round_moves_a_kv_chunk_under_one_block_of_attention():
    # Llama-3-8B's shape at s = 131,072, c = 8: a chunk of 16,384 tokens, h_kv = 8 × 128 = 1,024
    moved, flops = ring_round(long_context_model(131072), 8)
    assert moved == 2 * 16384 * 1024 * 2 == 67_108_864
    assert flops == 4 * 16384**2 * 4096
    # the (c - 1) rounds of forward are exercise long-context-ring-sent-gb's 469,762,048 B
    assert 7 * moved == solution("long-context-ring-sent-gb") * 10**9
    assert ring_round(long_context_model(131072), 8, "causal")[1] == flops / 2


def test_a_ring_round_hides_from_h_kv_over_h_times_f_over_w_tokens():
    gqa, mha = long_context_model(16384, 32, 8), long_context_model(16384, 32, 32)
    ib, nvlink = H100.network_link.bandwidth, H100.node_link.bandwidth
    assert ring_hides_from(mha, ib, H100.flops) == Fraction(395_600, 50) == 7912
    assert ring_hides_from(gqa, ib, H100.flops) == 1978
    assert ring_hides_from(gqa, ib, H100.flops, "causal") == 3956  # half a block to hide under
    assert ring_hides_from(mha, nvlink, H100.flops) == Fraction(395_600, 450)
    # at the threshold the round's transfer time equals its compute time
    c = 16384 // 1978
    moved, flops = ring_round(long_context_model(1978 * c), c)
    assert Fraction(moved) / Fraction(ib) == flops / Fraction(H100.flops)


def test_every_row_of_13s_table_hides_by_both_conditions_or_by_neither():
    """13 §4: the time model hides the ring's sends under the whole pass; the round-by-round
    condition is stricter. The sentence says every printed row meets both or neither."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    text = "".join(  # a cell's printout may come in several stream outputs: join them as printed
        "".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c["outputs"]
    )
    rows = 0
    for block in re.finditer(r"K = +(\d+), s = ([\d,]+)\n((?:  c = .*\n)+)", text):
        kv_heads, seq = int(block.group(1)), int(block.group(2).replace(",", ""))
        model = long_context_model(seq, 32, kv_heads)
        for c, exposed in re.findall(
            r"c = +(\d+): ring +[\d.]+ s \(exposed ([\d.]+) s\)", block[3]
        ):
            link = H100.node_link if int(c) <= 8 else H100.network_link  # 8 H100s to a node
            hides = seq // int(c) >= ring_hides_from(model, link.bandwidth, H100.flops)
            assert hides == (float(exposed) == 0), (kv_heads, seq, c, exposed)
            rows += 1
    assert rows == 10


def test_zig_zag_chunks_give_every_rank_the_same_causal_work():
    for c in range(1, 17):
        zigzag, contiguous = causal_blocks(c), causal_blocks(c, zigzag=False)
        assert zigzag == [2 * c] * c  # rank i: chunks i and 2c - 1 - i, (i + 1/2) + (2c - i - 1/2)
        assert sum(contiguous) == sum(zigzag) == 2 * c * c  # half the (2c)² blocks, either way
        assert contiguous[-1] == (2 * c - 1) * contiguous[0]
    assert causal_blocks(2, zigzag=False) == [
        2,
        6,
    ]  # chunks 0, 1: 1/2 + 3/2; chunks 2, 3: 5/2 + 7/2


def test_ulysses_past_c_equal_k_repeats_key_value_heads():
    model = long_context_model(131072)  # a = 32, K = 8, h = 4096, head width 128
    # c <= K: Ulysses as it is (exercise long-context-ulysses-sent-gb's 293,601,280 B)
    assert ulysses_replicated(model, 8) == (8, solution("long-context-ulysses-sent-gb") * 10**9)
    # c = 16: K/V repeated to 16 heads, 2,048 wide; Q 4,096 and the output 4,096
    assert ulysses_replicated(model, 16) == (16, 15 * 8192 * (4096 + 2 * 2048 + 4096) * 2 // 16)
    assert ulysses_replicated(model, 16)[1] == 188_743_680
    assert ulysses_replicated(model, 32) == (32, 31 * 4096 * (3 * 4096 + 4096) * 2 // 32)


@pytest.mark.parametrize("context", [12, 64])
def test_ulysses_past_c_equal_k_is_refused_where_heads_cannot_be_repeated(context):
    with pytest.raises(PlacementError) as refused:
        ulysses_replicated(long_context_model(131072), context)
    assert str(context) in str(refused.value) and "\n" not in str(refused.value)


def test_the_attention_counts_are_named_and_a_typo_is_refused():
    assert ATTENTION_COUNTS == {"full": 1, "causal": Fraction(1, 2)}
    with pytest.raises(PlacementError, match="count must be one of full, causal, got 'casual'"):
        ring_round(long_context_model(8192), 2, "casual")


def test_the_theorys_context_axis_states_the_packages_thresholds():
    theory = " ".join(
        (Path(__file__).resolve().parents[1] / "docs" / "theory.md").read_text().split()
    )
    mha, gqa = long_context_model(16384, 32, 32), long_context_model(16384, 32, 8)
    ib = H100.network_link.bandwidth
    mha_from, gqa_from = (int(ring_hides_from(m, ib, H100.flops)) for m in (mha, gqa))
    assert (
        f"across InfiniBand, {mha_from:,} for multi-head attention and {gqa_from:,} with" in theory
    )
    contiguous = causal_blocks(8, zigzag=False)
    assert contiguous[-1] / contiguous[0] == 2 * 8 - 1  # "the last rank does 2c − 1 times"
    assert "the last rank does 2c − 1 times the first's work" in theory
    assert "| c, e | degrees of the context axis" in theory


def test_a_zig_zag_run_holds_chunks_i_and_2c_minus_1_minus_i():
    from placement_edu.runtime.axes.context_config import ContextRun

    run = ContextRun("ring", 4, seq=16, zigzag=True)
    assert [run.held(i) for i in range(4)] == [
        [0, 1, 14, 15],
        [2, 3, 12, 13],
        [4, 5, 10, 11],
        [6, 7, 8, 9],
    ]
    assert ContextRun("ring", 4, seq=16).held(1) == [4, 5, 6, 7]
    for refused, said in (
        (ContextRun("ulysses", 2, zigzag=True), "zig-zag chunks balance the ring's causal work"),
        (ContextRun("ring", 4, seq=12, zigzag=True), "2c = 8 chunks, which must divide s = 12"),
    ):
        with pytest.raises(PlacementError, match=said):
            refused.validate()


def test_the_time_model_prices_the_causal_count_when_a_model_asks_for_it():
    from placement_edu.long_context import context_costs
    from placement_edu.timing import (
        attention_flops_per_token,
        megatron_flops_per_token,
        palm_flops_per_token,
    )

    full, causal = (long_context_model(131072, attention_count=n) for n in ("full", "causal"))
    halved = attention_flops_per_token(causal)
    assert halved == {k: v // 2 for k, v in attention_flops_per_token(full).items()}
    assert halved["forward"] == 2 * 32 * 4096 * 131072  # 4·L·h·s / 2
    # Megatron's own count takes its causal flag, whatever the model's count
    for flag in (False, True):
        assert megatron_flops_per_token(causal, flag) == megatron_flops_per_token(full, flag)
    # on c = 8 the ring hides everything: the step is compute, in the ratio of the counts
    ring_full, ring_causal = (context_costs(m, 8, "ring") for m in (full, causal))
    assert ring_full.exposed_s == ring_causal.exposed_s == 0
    ratio = palm_flops_per_token(causal) / palm_flops_per_token(full)
    assert ring_causal.step_s == pytest.approx(ring_full.step_s * ratio, rel=1e-12)
    assert ATTENTION_COUNTS["causal"] == Fraction(1, 2)


def test_an_unknown_attention_count_is_refused_in_one_line():
    with pytest.raises(
        PlacementError, match="attention_count must be one of full, causal, got 'half'"
    ):
        long_context_model(8192, attention_count="half")
