"""GPT-2 124M (s = 1024, b = 1) predicted against PyTorch's own accounting, live: FSDP2 at N = 8 and
64, ranks 0 and N - 1, fp32 and FSDP2's bf16 mixed precision (``tracker_cases.SUITE``; N = 1024 in
``benchmarks/bench_tracker_matrix.py``), one device, and ``fit --verify``, all at its 12 blocks; on
its widths at ``BLOCKS`` blocks, one device under selective and full recomputation, selective
recomputation and FSDP2 without resharding at N = 8, each Adam, SDPA, a longer micro-batch
(``tests/tracker_cases.py`` says what each case checks)."""

from __future__ import annotations

import json

import pytest
import torch

from placement_edu.runtime.measurement.peak_tracker import TrackerProcess
from tests.tracker_cases import BLOCKS, compare, suite_cases
from placement_edu.step_case import StepCase

pytestmark = pytest.mark.runtime


@pytest.mark.parametrize("devices, rank, precision, blocks", suite_cases("gpt2"))
def test_gpt2_under_fsdp2_matches_fsdpmemtracker(
    tracker: TrackerProcess, devices: int, rank: int, precision: str, blocks: int | None
) -> None:
    compare(tracker, "gpt2", devices, rank, precision, blocks=blocks)


@pytest.mark.parametrize(
    "recompute, blocks", [("none", None), ("selective", BLOCKS), ("full", BLOCKS)]
)
def test_gpt2_on_one_device_matches_memtracker(
    tracker: TrackerProcess, recompute: str, blocks: int | None
) -> None:
    compare(tracker, "gpt2", 1, 0, "fp32", recompute, blocks=blocks)


@pytest.mark.parametrize(
    "rank, precision, attention",
    [(0, "fp32", "eager"), (7, "fp32", "eager"), (7, "fsdp2_bf16", "sdpa")],
)
def test_selective_recomputation_under_fsdp2_matches_fsdpmemtracker(
    tracker: TrackerProcess, rank: int, precision: str, attention: str
) -> None:
    # torch.utils.checkpoint per block with reference_models.selective_policy: the matmuls'
    # outputs kept, the rest replayed in backward.
    compare(tracker, "gpt2", 8, rank, precision, "selective", attention=attention, blocks=BLOCKS)


def test_fsdp2_mixed_precision_on_a_group_of_one_has_no_collective_buffers(
    tracker: TrackerProcess,
) -> None:
    compare(tracker, "gpt2", 1, 0, "fsdp2_bf16", blocks=BLOCKS)


@pytest.mark.parametrize("optimizer", ["adam-fused", "adam-for"])
def test_fused_and_for_loop_adam_make_the_temporaries_named(
    tracker: TrackerProcess, optimizer: str
) -> None:
    # fused: none at the step; for-loop: sqrt(v) and its quotient for one tensor at a time.
    compare(tracker, "gpt2", 8, 0, "fp32", optimizer=optimizer, blocks=BLOCKS)


def test_sdpa_attention_matches_too(tracker: TrackerProcess) -> None:
    compare(tracker, "gpt2", 8, 7, "fsdp2_bf16", attention="sdpa", blocks=BLOCKS)


def test_a_larger_micro_batch_and_shorter_sequence_match_too(tracker: TrackerProcess) -> None:
    compare(
        tracker, "gpt2", 8, 3, "fsdp2_bf16", attention="sdpa", micro_batch=4, seq=512, blocks=BLOCKS
    )


@pytest.mark.parametrize("rank, precision", [(0, "fp32"), (7, "fp32"), (7, "fsdp2_bf16")])
def test_fsdp2_without_resharding_after_forward_matches_fsdpmemtracker(
    tracker: TrackerProcess, rank: int, precision: str
) -> None:
    # fully_shard(block, reshard_after_forward=False) on every block: each block stays gathered
    # from its forward to its backward.
    compare(tracker, "gpt2", 8, rank, precision, strategy="fsdp2_no_reshard", blocks=BLOCKS)


def test_fit_verify_prints_the_trackers_figures_beside_under_the_same_keys(capsys) -> None:
    # (the command's own main, in this process: its tracker run is a child process either way)
    from placement_edu.cli import main

    argv = "fit --model gpt2 --devices 8 --rank 7 --recompute selective --json --verify".split()
    argv += ["--precision", "fp32", "--attention", "eager"]
    returncode = main(argv)
    done = capsys.readouterr()
    assert returncode == 0, done.err[-2000:]
    out = json.loads(done.out)
    measured = out["measured"]
    assert set(measured["memory"]) == set(out["memory"])
    for key in ("params", "grads", "optimizer"):
        assert out["memory"][key] == measured["memory"][key]
    assert out["peak_bytes"] == pytest.approx(measured["peak_bytes"], rel=0.02)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (fit --device cuda)")
@pytest.mark.parametrize("micro_batch", [1, 8])
def test_a_real_gpu_step_matches_the_derivation(micro_batch: int) -> None:
    """The third witness: GPT-2's step on this machine's GPU, read from CUDA's allocator. The
    states are counted from the tensors (equal to the byte); activations and peaks carry the
    allocator's 512-byte rounding, cuBLAS's workspace and a GPU's 1-byte dropout masks, so they
    are held to 5 % and their ratios printed."""
    from placement_edu.peak import derive
    from placement_edu.runtime.measurement.cuda_peak import measure_cuda
    from placement_edu.runtime.measurement.profiles import get_profile

    profile, _ = get_profile(StepCase.of("gpt2", micro_batch, 1024, "fp32", "eager", "none"))
    predicted = derive("gpt2", profile, 1, 0, "fp32", "adam-foreach")
    gpu = measure_cuda(StepCase.of("gpt2", micro_batch, 1024))
    assert (predicted.params, predicted.grads, predicted.optimizer) == (
        gpu["params"],
        gpu["grads"],
        gpu["optimizer"],
    )
    ratios = {
        "activations": predicted.activations / gpu["activations"],
        "forward_backward_peak": predicted.forward_backward_peak.total
        / gpu["forward_backward_peak"],
        "step_peak": predicted.step_peak.total / gpu["step_peak"],
    }
    print(gpu["device"], micro_batch, ratios)
    assert all(abs(r - 1) < 0.05 for r in ratios.values()), ratios


def test_torchtitan_op_recomputation_of_a_gpt2_block_matches_memtracker(
    tracker: TrackerProcess,
) -> None:
    # GPT-2's linear layers are HF's Conv1D (addmm, not mm): torchtitan's save list has no addmm,
    # so under its policy a GPT-2 block keeps its input and SDPA's outputs only.
    compare(tracker, "gpt2", 1, 0, "fp32", "torchtitan-op", attention="sdpa", blocks=BLOCKS)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_megatron_selective_recomputation_matches_fsdpmemtracker(
    tracker: TrackerProcess, attention: str
) -> None:
    # Korthikanti's selective recomputation as Megatron-LM runs it: the core attention alone under
    # torch.utils.checkpoint (reference_models.CheckpointedCore), q, k, v kept, the s² terms not.
    compare(tracker, "gpt2", 8, 0, "fp32", "megatron-selective", attention=attention, blocks=BLOCKS)


def test_megatron_selective_keeps_korthikantis_34_sbh_less_the_cpu_and_gelu_extras() -> None:
    # Korthikanti et al. 2022, §4.2: selective recomputation keeps 34·sbh bytes a layer in fp16
    # (none of the 5as²b of the attention core). GPT-2 in fp32 here: what the eager block keeps
    # without recomputation, less the core's scaled scores, probabilities and dropout noise
    # (3 [b, a, s, s] tensors of 4 B; the causal mask is shared by the blocks) and the 4-byte
    # √d the division saves -- q, k and v, saved by the core's matmuls, are kept by its checkpoint.
    from placement_edu.runtime.measurement.profiles import get_profile

    b, s, a = 1, 1024, 12
    none, _ = get_profile(StepCase.of("gpt2", b, s, "fp32", "eager", "none"))
    selective, _ = get_profile(StepCase.of("gpt2", b, s, "fp32", "eager", "megatron-selective"))
    assert none.block - selective.block == 3 * 4 * b * a * s * s + 4


@pytest.mark.parametrize("recompute", ["layer:2", "layer:3"])
def test_torchtitans_layer_k_recomputation_of_gpt2_matches_memtracker(
    tracker: TrackerProcess, recompute: str
) -> None:
    # at 12 blocks: layer:2 checkpoints 6 (blocks 1, 3, .., 11), layer:3 four (2, 5, 8, 11), the
    # last block among them: its forward and its backward are a checkpointed block's
    compare(tracker, "gpt2", 1, 0, "fp32", recompute)
