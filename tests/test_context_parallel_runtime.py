"""Context parallelism run on gloo (issue 26 item 1): one causal attention layer on c ranks, ring
attention and Ulysses, measured against the core's schedule entry by entry and against one
process (``placement_edu.runtime.axes.context_attention``)."""

from __future__ import annotations

import pytest

from placement_edu.runtime.axes.context_config import ContextRun
from placement_edu.runtime.axes.context_launch import launch

pytestmark = pytest.mark.runtime


@pytest.mark.parametrize(
    "attention,ranks,ops",
    [
        # ring: (c-1) send/recv rounds forward; backward (c-1) K/V and (c-1) dK/dV rounds
        ("ring", 2, 2 * (1 + 2)),
        ("ring", 4, 2 * (3 + 6)),
        # Ulysses: two all-to-alls forward, two backward, whatever c
        ("ulysses", 2, 4),
        ("ulysses", 4, 4),
    ],
)
def test_the_toy_attention_layer_runs_as_the_core_derives_and_as_one_process(
    attention: str, ranks: int, ops: int
) -> None:
    run = ContextRun(attention, ranks)
    predicted = run.predicted()
    assert len(predicted) == ops
    measured = launch(run)
    for result in measured:
        assert result["ledger"] == predicted  # op, pass, payload bytes, group: entry by entry
        assert result["deviation"] < 1e-12  # float64: rounding only (measured: ≤ 3e-16)
    # K/V chunk: 2·b·(s/c)·h float64 = 2·2·(8/c)·8·8 B (ring); Ulysses' buffers 3·b·(s/c)·h and
    # b·(s/c)·h float64
    sizes = {size for _, _, size, _ in predicted}
    assert sizes == ({2048 // ranks} if attention == "ring" else {3072 // ranks, 1024 // ranks})


@pytest.mark.parametrize("ranks,seq", [(2, 8), (4, 16)])
def test_zig_zag_chunks_send_the_same_messages_and_even_the_causal_work(
    ranks: int, seq: int
) -> None:
    """Rank i holds chunks i and 2c - 1 - i of 2c (Megatron-Core's load balancing): the ledger is
    the contiguous ring's, the layer equals one process, and every rank computes as many
    query-key pairs. A query at position p attends to p + 1 keys, so a rank's pairs are the sum
    of p + 1 over the tokens it holds: m²·(its causal blocks, ``long_context.causal_blocks``) + m
    for chunks of m = s/2c tokens (each of its two chunks' diagonals holds m(m + 1)/2 pairs)."""
    from placement_edu.long_context import causal_blocks

    m = seq // (2 * ranks)
    for zigzag in (False, True):
        run = ContextRun("ring", ranks, seq=seq, zigzag=zigzag)
        measured = launch(run)
        pairs = [r["pairs"] for r in measured]
        for result in measured:
            assert result["ledger"] == run.predicted()
            assert result["deviation"] < 1e-12
        assert pairs == [sum(p + 1 for p in run.held(k)) for k in range(ranks)]
        assert pairs == [m * m * blocks + m for blocks in causal_blocks(ranks, zigzag)]
        assert sum(pairs) == seq * (seq + 1) // 2
        assert (len(set(pairs)) == 1) is zigzag  # contiguous: the last rank does the most


def test_a_run_the_core_cannot_derive_is_refused_before_any_rank_starts() -> None:
    from placement_edu.errors import PlacementError

    with pytest.raises(PlacementError, match="context degree 3 does not divide the sequence"):
        launch(ContextRun("ring", 3))
    with pytest.raises(PlacementError, match="Ulysses on context 8 × tensor 1 = 8 ranks"):
        launch(ContextRun("ulysses", 8, seq=8))


def test_run_executes_a_strategy_on_a_context_axis(capsys) -> None:
    from placement_edu.cli import main

    assert main(["run", "dp×cp_ulysses", "--world-size", "2", "--mesh", "data=1,context=2"]) == 0
    out = capsys.readouterr().out
    assert "ulysses attention on context=2" in out
    assert "forward all_to_all ×2, backward all_to_all ×2; 2048 B sent" in out  # (1536 + 512)·2·1/2
    assert "measured = predicted on every rank: yes" in out
    # the layer alone on the context axis: a data axis is refused in one line, no process started
    assert main(["run", "dp×cp", "--world-size", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give --mesh data=1,context=2" in err
