"""Eager attention's memory-bound work in the time model (issue 27): the softmax and dropout over
the b·a·s² scores, priced at the device's memory bandwidth on the roofline
(``timing.eager_attention_bytes_per_token``, ``Hardware.memory_bandwidth``, ``roofline``), nothing
otherwise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from placement_edu.errors import PlacementError
from placement_edu.models import TransformerSpec
from placement_edu.timing import (
    EAGER_ATTENTION_BYTES,
    HBM_BANDWIDTH,
    compute_time,
    eager_attention_bytes_per_token,
    get_hardware,
)

pytestmark = pytest.mark.fast

#: Narayanan et al. 2021, Table 1's 1.7B row as run_table_1.sh launched it: L 24, h 2304, a 24,
#: s 2048, V 51200, micro-batch 16.
SMALL = TransformerSpec(layers=24, hidden=2304, heads=24, seq=2048, vocab=51200, micro_batch=16)


def test_the_bytes_per_score_as_counted_from_megatrons_kernels() -> None:
    # forward: the fused softmax reads 2 and writes 2, the dropout reads 2, writes 2 and a 1-byte
    # mask; backward: the dropout's gradient 2 + 1 + 2, the softmax's 2 + 2 + 2
    assert EAGER_ATTENTION_BYTES == {"forward": 9, "backward": 11}
    scores = 24 * 24 * 2048  # L·a·s scores meet one token
    assert eager_attention_bytes_per_token(SMALL) == {
        "forward": 9 * scores,
        "backward": 11 * scores,
        "step": 0,
    }
    # full and selective recomputation both replay the softmax and dropout in backward
    for recompute in ("full", "selective"):
        assert eager_attention_bytes_per_token(SMALL, recompute)["backward"] == 20 * scores


def test_flash_attention_and_abstract_models_move_nothing() -> None:
    zero = {"forward": 0, "backward": 0, "step": 0}
    assert eager_attention_bytes_per_token(replace(SMALL, attention="flash"), "full") == zero
    assert eager_attention_bytes_per_token(7e9) == zero


def test_off_the_roofline_the_compute_time_is_the_flops_alone() -> None:
    # Issue 42: the presets carry their HBM bandwidth and price on the roofline only when asked
    # (Hardware.roofline; time turns it on): off it, every preset's figure stands, FLOPs alone.
    hw = get_hardware("a100-nvlink-ib")
    assert (hw.memory_bandwidth, hw.roofline) == (HBM_BANDWIDTH["A100"], False)
    tokens = 16 * 2048
    bare = compute_time(SMALL, tokens, hw, "full")
    on = replace(hw, roofline=True)
    eager = compute_time(SMALL, tokens, on, "full")
    flash = compute_time(replace(SMALL, attention="flash"), tokens, on, "full")
    assert sum(bare.values()) == pytest.approx(
        sum(compute_time(replace(SMALL, attention="flash"), tokens, hw, "full").values())
    )
    # on the roofline, eager attention's softmax and dropout are what it adds over flash
    extra = eager_attention_bytes_per_token(SMALL, "full")
    for phase in ("forward", "backward", "step"):
        assert eager[phase] - flash[phase] == pytest.approx(
            extra[phase] * tokens / 2.039e12, rel=1e-9, abs=1e-12
        )
    # the 1.7B row's micro-batch: 0.55 s of softmax and dropout beside 2.8 s of matmuls at the
    # preset's 156e12 FLOP/s: a·s/h² makes it a large share at small h
    assert sum(eager.values()) - sum(flash.values()) == pytest.approx(0.550, abs=0.001)


def test_a_memory_bandwidth_is_bytes_per_second() -> None:
    hw = get_hardware("a100-nvlink-ib")
    for bad in (0, -1.0, float("inf"), "2e12"):
        with pytest.raises(PlacementError, match="memory_bandwidth is bytes per second"):
            replace(hw, memory_bandwidth=bad)
