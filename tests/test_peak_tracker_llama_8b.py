"""The Llama-3-8B shape (s = 4096, b = 1) on its widths at ``BLOCKS`` blocks, predicted against
PyTorch's own accounting, live: FSDP2 at N = 8, rank 0, FSDP2's bf16 mixed precision
(``tracker_cases.SUITE``), and FSDP2 without resharding after forward at N = 8
(``tests/tracker_cases.py`` says what each case checks). Its rows at its own 32 blocks (12-50 s
each on this 2-core machine) are measured by ``benchmarks/bench_tracker_matrix.py``; the suite
checks the full depth on GPT-2 and Llama-3.2-1B."""

from __future__ import annotations

import pytest

from placement_edu.runtime.measurement.peak_tracker import TrackerProcess
from tests.tracker_cases import BLOCKS, compare, suite_cases
from placement_edu.step_case import StepCase

pytestmark = pytest.mark.runtime
MODEL = "llama-8b"


@pytest.mark.parametrize("devices, rank, precision, blocks", suite_cases(MODEL))
def test_fsdp2_matches_fsdpmemtracker(
    tracker: TrackerProcess, devices: int, rank: int, precision: str, blocks: int | None
) -> None:
    compare(tracker, MODEL, devices, rank, precision, blocks=blocks)


def test_fsdp2_without_resharding_keeps_the_blocks_not_yet_backwarded_gathered(
    tracker: TrackerProcess,
) -> None:
    # reshard_after_forward=False on every block, under full recomputation: the peak is the
    # second-last block's backward (its replayed attention), every block before it still gathered
    # -- at 32 blocks, block 30's with blocks 0..30 (56.1 GB measured). (Without recomputation the
    # peak moves from block 31's backward to the logits' gradient, all 32 blocks gathered: 170.9 GB
    # measured, 144.3 GB with resharding; benchmarks/bench_tracker_matrix.py.) Here on BLOCKS.
    compare(tracker, MODEL, 8, 0, "fp32", "full", strategy="fsdp2_no_reshard", blocks=BLOCKS)


@pytest.mark.parametrize("rank", [0, 7])
def test_torchtitan_op_recomputation_matches_fsdpmemtracker(
    tracker: TrackerProcess, rank: int
) -> None:
    # torchtitan's selective op AC (reference_models.TorchtitanOp, its policy at commit 9dec370):
    # mm, SDPA and reduce-scatter outputs saved, every second mm of a block recomputed (k, o, up).
    # As its published Llama 3.1 8B runs: FSDP2 bf16 mixed precision, SDPA; at b = 1, s = 4096.
    compare(tracker, MODEL, 8, rank, "fsdp2_bf16", "torchtitan-op", attention="sdpa", blocks=BLOCKS)


def test_torchtitan_op_keeps_q_v_gate_down_and_sdpa_of_a_llama_block() -> None:
    # In a block's forward the mm's run q, k, v, o, gate, up, down: the odd ones are saved, the
    # even ones (k, o, up) recomputed; SDPA's output and logsumexp saved; the block's input kept
    # by the checkpoint. Bytes at b = 1, s = 4096, bf16: h = 4096, kv 1024, ffn 14336.
    from placement_edu.runtime.measurement.profiles import get_profile

    b, s, bf16 = 1, 4096, 2
    profile, _ = get_profile(StepCase.of(MODEL, b, s, "bf16", "sdpa", "torchtitan-op"))
    block = {k: v for k, v in profile.by_module.items() if k.startswith("block")}
    assert block == {
        "block": b * s * 4096 * bf16,  # its input
        "block.self_attn.q_proj output": b * s * 4096 * bf16,
        "block.self_attn.v_proj output": b * s * 1024 * bf16,
        "block.self_attn output": b * s * 4096 * bf16 + b * 32 * s * 4,  # + fp32 logsumexp
        "block.mlp.gate_proj output": b * s * 14336 * bf16,
        "block.mlp.down_proj output": b * s * 4096 * bf16,
    }
    assert profile.block == sum(block.values())


def test_megatron_selective_recomputation_matches_fsdpmemtracker(tracker: TrackerProcess) -> None:
    # the core attention alone checkpointed: q and the kv heads' k and v kept (GQA's copies to
    # every query head are made again in backward), under FSDP2's bf16 mixed precision
    compare(
        tracker, MODEL, 8, 0, "fsdp2_bf16", "megatron-selective", attention="eager", blocks=BLOCKS
    )


@pytest.mark.parametrize("rank", [0, 7])
def test_torchtitans_layer_2_recomputation_matches_fsdpmemtracker(
    tracker: TrackerProcess, rank: int
) -> None:
    # selective_ac_option = "2": blocks 1 and 3 (torchtitan counts from 1: the 2nd and 4th)
    # checkpointed, blocks 0 and 2 keep everything; the prediction places each block by its kind
    compare(tracker, MODEL, 8, rank, "fsdp2_bf16", "layer:2", attention="sdpa", blocks=BLOCKS)
