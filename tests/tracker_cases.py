"""What every tracker test does (issue 22's Done-when): the core's derivation, from the activation
profile measured on a two-block copy, set beside one tracked step of the full model --
``FSDPMemTracker`` on a fake process group of N ranks, ``MemTracker`` at N = 1 -- each run in a
process of its own. Each state's bytes must be equal, padding included; the activations after
forward, the forward/backward peak and the optimizer-step peak within 2 %.

The cases are in four files (GPT-2, Llama-3.2-1B, Llama-3-8B, HF's own modules) so that the suite's
workers (pytest-xdist, one file each at a time) share them out.
"""

from __future__ import annotations

import pytest

from placement_edu.peak import PRECISIONS, RESHARD_AFTER_FORWARD, derive
from placement_edu.runtime.peak_tracker import measure_in_subprocess, states
from placement_edu.runtime.profiles import get_profile

SEQ = {"gpt2": 1024, "llama-1b": 2048, "llama-8b": 4096}
slow = pytest.mark.slow


def compare(
    model: str,
    devices: int,
    rank: int,
    precision: str,
    recompute: str = "none",
    attention: str = "eager",
    optimizer: str = "adam-foreach",
    micro_batch: int = 1,
    seq: int | None = None,
    strategy: str = "fsdp2",
) -> None:
    seq = seq or SEQ[model]
    reshard = RESHARD_AFTER_FORWARD[strategy]
    profile, _ = get_profile(
        model, micro_batch, seq, PRECISIONS[precision].compute_name, attention, recompute
    )
    predicted = derive(model, profile, devices, rank, precision, optimizer, reshard)
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
        reshard_after_forward=reshard,
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
