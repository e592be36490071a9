"""Predicted against PyTorch's own accounting, live (issue 22's Done-when): for each case the core's
derivation (from the activation profile measured on a two-block copy) is set beside one tracked
step of the full model -- ``FSDPMemTracker`` on a fake process group of N ranks, ``MemTracker`` at
N = 1 -- each run in its own process. Each state's bytes must be equal, padding included; the
activations after forward, the forward/backward peak and the optimizer-step peak within 2 %."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from placement_edu.peak import PRECISIONS, derive
from placement_edu.runtime.peak_tracker import measure_in_subprocess, states
from placement_edu.runtime.profiles import get_profile

pytestmark = pytest.mark.runtime

SEQ = {"gpt2": 1024, "llama-1b": 2048, "llama-8b": 4096}
slow = pytest.mark.slow


def _compare(
    model: str,
    devices: int,
    rank: int,
    precision: str,
    recompute: str = "none",
    attention: str = "eager",
    optimizer: str = "adam-foreach",
    micro_batch: int = 1,
    seq: int | None = None,
) -> None:
    seq = seq or SEQ[model]
    profile, _ = get_profile(
        model, micro_batch, seq, PRECISIONS[precision].compute_name, attention, recompute
    )
    predicted = derive(model, profile, devices, rank, precision, optimizer)
    raw = measure_in_subprocess(
        model=model,
        devices=devices,
        rank=rank,
        precision=precision,
        seq=seq,
        attention=attention,
        recompute=recompute,
        optimizer=optimizer,
        micro_batch=micro_batch,
    )
    measured = states(raw, devices > 1 or precision != "fp32")
    assert (predicted.params, predicted.grads, predicted.optimizer) == (
        measured["params"],
        measured["grads"],
        measured["optimizer"],
    )
    assert predicted.activations == pytest.approx(measured["activations"], rel=0.02)
    assert predicted.forward_backward_peak.total == pytest.approx(
        measured["forward_backward_peak"], rel=0.02
    )
    assert predicted.step_peak.total == pytest.approx(measured["step_peak"], rel=0.02)


@pytest.mark.parametrize("precision", ["fp32", "fsdp2_bf16"])
@pytest.mark.parametrize(
    "devices, rank",
    [(8, 0), (8, 7), pytest.param(1024, 0, marks=slow), pytest.param(1024, 1023, marks=slow)],
)
def test_gpt2_under_fsdp2_matches_fsdpmemtracker(devices: int, rank: int, precision: str) -> None:
    _compare("gpt2", devices, rank, precision)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_gpt2_on_one_device_matches_memtracker(recompute: str) -> None:
    _compare("gpt2", 1, 0, "fp32", recompute)


def test_fsdp2_mixed_precision_on_a_group_of_one_has_no_collective_buffers() -> None:
    _compare("gpt2", 1, 0, "fsdp2_bf16")


@pytest.mark.parametrize("optimizer", ["adam-fused", "adam-for"])
def test_fused_and_for_loop_adam_make_the_temporaries_named(optimizer: str) -> None:
    # fused: none at the step; for-loop: sqrt(v) and its quotient for one tensor at a time.
    _compare("gpt2", 8, 0, "fp32", optimizer=optimizer)


def test_sdpa_attention_matches_too() -> None:
    _compare("gpt2", 8, 7, "fsdp2_bf16", attention="sdpa")


def test_a_larger_micro_batch_and_shorter_sequence_match_too() -> None:
    _compare("gpt2", 8, 3, "fsdp2_bf16", attention="sdpa", micro_batch=4, seq=512)


@slow
def test_llama_with_sdpa_full_recomputation_and_b_2_matches_too() -> None:
    _compare(
        "llama-1b",
        16,
        15,
        "fsdp2_bf16",
        recompute="full",
        attention="sdpa",
        micro_batch=2,
        seq=1024,
    )


@slow
@pytest.mark.parametrize("model", ["llama-1b", "llama-8b"])
@pytest.mark.parametrize("precision", ["fp32", "fsdp2_bf16"])
@pytest.mark.parametrize("devices, rank", [(8, 0), (64, 63), (1024, 1023)])
def test_llama_under_fsdp2_matches_fsdpmemtracker(
    model: str, devices: int, rank: int, precision: str
) -> None:
    _compare(model, devices, rank, precision)


@slow
@pytest.mark.parametrize("model", ["llama-1b", "llama-8b"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_llama_on_one_device_matches_memtracker(model: str, recompute: str) -> None:
    _compare(model, 1, 0, "fp32", recompute)


def test_fit_verify_prints_the_trackers_figures_beside_under_the_same_keys() -> None:
    code = "import sys\nfrom placement_edu.cli import main\nsys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "fit",
            "--model",
            "gpt2",
            "--devices",
            "8",
            "--rank",
            "7",
            "--json",
            "--verify",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    measured = out["measured"]
    assert set(measured["memory"]) == set(out["memory"])
    for key in ("params", "grads", "optimizer"):
        assert out["memory"][key] == measured["memory"][key]
    assert out["peak_bytes"] == pytest.approx(measured["peak_bytes"], rel=0.02)


# The published HF config.json of each model (openai-community/gpt2, meta-llama/Llama-3.2-1B), the
# fields that shape the module; written to a temporary directory: nothing is downloaded.
HF_CONFIGS = {
    "gpt2": {
        "model_type": "gpt2",
        "activation_function": "gelu_new",
        "n_embd": 768,
        "n_head": 12,
        "n_layer": 12,
        "n_positions": 1024,
        "n_ctx": 1024,
        "vocab_size": 50257,
        "attn_pdrop": 0.1,
        "embd_pdrop": 0.1,
        "resid_pdrop": 0.1,
        "layer_norm_epsilon": 1e-05,
    },
    "llama-1b": {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "num_hidden_layers": 16,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "hidden_act": "silu",
        "vocab_size": 128256,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    },
}


@pytest.mark.parametrize(
    "model, devices, rank, precision",
    [
        ("gpt2", 8, 7, "fsdp2_bf16"),
        ("gpt2", 1, 0, "fp32"),
        ("llama-1b", 8, 0, "fp32"),
        pytest.param("llama-1b", 64, 63, "fsdp2_bf16", marks=slow),
    ],
)
def test_the_same_checks_pass_on_hfs_own_module_from_a_local_config(
    tmp_path, model, devices, rank, precision
) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / model / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(HF_CONFIGS[model]))
    SEQ[str(path)] = SEQ[model]
    _compare(str(path), devices, rank, precision)
