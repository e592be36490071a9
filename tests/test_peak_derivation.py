"""The peak of a real model, derived (issue 22): the reference shapes, FSDP2's padded storage and
the peak against figures PyTorch's own ``FSDPMemTracker`` / ``MemTracker`` measured (pinned
literals; ``tests/test_peak_tracker.py`` compares prediction and tracker live). In-process,
seconds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from placement_edu.architectures import PRESETS, Architecture, get_architecture
from placement_edu.errors import PlacementError
from placement_edu.peak import (
    PRECISIONS,
    ZERO_MIXED,
    ActivationProfile,
    chunk_rows,
    derive,
    held_rows,
    adam_temporaries,
    read_recompute,
    units,
)
from placement_edu.step_case import StepCase

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    "name, published",
    [
        ("gpt2", 124_439_808),  # HF openai-community/gpt2: 124,439,808 parameters (tied head)
        ("llama-1b", 1_235_814_400),  # meta-llama/Llama-3.2-1B: 1.24B (1,235,814,400, tied head)
        ("llama-8b", 8_030_261_248),  # meta-llama/Meta-Llama-3-8B: 8.03B (8,030,261,248)
    ],
)
def test_the_reference_shapes_have_the_published_parameter_counts(
    name: str, published: int
) -> None:
    assert PRESETS[name].psi == published


@pytest.mark.parametrize("name", list(PRESETS))
def test_the_plain_torch_module_has_exactly_the_tensors_the_shape_lists(name: str) -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from placement_edu.runtime.measurement.reference_models import build

    with FakeTensorMode():
        module = build(PRESETS[name])
        got = [(n, tuple(p.shape)) for n, p in module.named_parameters()]
    assert got == [(n, s) for n, s, _ in PRESETS[name].tensors()]
    assert isinstance(module.lm_head.weight, torch.nn.Parameter)


def test_fsdp2_chunks_are_ceil_rows_over_n_and_the_last_ranks_hold_fewer_or_none() -> None:
    # ln_1.weight of GPT-2 has 768 rows: at N = 1024 every rank stores a 1-row chunk, ranks >= 768
    # hold none.
    assert chunk_rows(768, 1024) == 1
    assert held_rows(768, 1024, 767) == 1 and held_rows(768, 1024, 1023) == 0
    # wte: 50257 rows over 8 -> chunks of 6283; rank 7 holds 50257 - 7 * 6283 = 6276 rows.
    assert chunk_rows(50257, 8) == 6283 and held_rows(50257, 8, 7) == 6276


# Measured by FSDPMemTracker on a fake process group (torch 2.13, foreach Adam, after a warm-up
# step): (model, N, rank, precision) -> (Sharded Param, Sharded Grad, OptState) bytes.
TRACKER_STATES = {
    ("gpt2", 8, 0, "fp32"): (62_222_592, 62_222_592, 124_445_776),
    ("gpt2", 8, 7, "fsdp2_bf16"): (62_222_592, 62_222_592, 124_402_768),
    ("gpt2", 1024, 1023, "fp32"): (562_760, 562_760, 228_208),
    ("llama-1b", 8, 0, "fp32"): (617_907_200, 617_907_200, 1_235_814_984),
    ("llama-1b", 64, 63, "fsdp2_bf16"): (77_238_400, 77_238_400, 154_477_384),
}


@pytest.mark.parametrize("case", list(TRACKER_STATES))
def test_each_state_is_fsdp2s_padded_storage_to_the_byte(case: tuple) -> None:
    model, n, rank, precision = case
    profile = ActivationProfile(
        model, 1, 1024, PRECISIONS[precision].compute_name, "eager", "none", 0, 0
    )
    peak = derive(model, profile, n, rank, precision)
    assert (peak.params, peak.grads, peak.optimizer) == TRACKER_STATES[case]


def test_the_last_rank_of_1024_stores_padding_the_unpadded_count_misses() -> None:
    # GPT-2 at N = 1024: the unpadded 1/N share of rank 1023 is 0.20x of what FSDP2 stores there.
    stored = sum(u.stored for u in units(PRESETS["gpt2"], 1024, 1023))
    held = sum(u.held for u in units(PRESETS["gpt2"], 1024, 1023))
    assert stored * 4 == 562_760  # FSDPMemTracker's Sharded Param, measured
    assert held / stored < 0.25


def test_fsdp2_mixed_precision_is_4_4_8_and_zero_is_2_2_12_same_16_bytes() -> None:
    assert PRECISIONS["fsdp2_bf16"].per_parameter == (4, 4, 8)
    assert (ZERO_MIXED.params, ZERO_MIXED.grads, ZERO_MIXED.optimizer) == (2, 2, 12)
    assert sum(PRECISIONS["fsdp2_bf16"].per_parameter) == ZERO_MIXED.model_state == 16


def test_adam_temporaries_foreach_4_bytes_per_element_fused_none_for_loop_one_tensor() -> None:
    assert adam_temporaries("adam-foreach", 1000, 300, 4) == 4000
    assert adam_temporaries("adam-fused", 1000, 300, 4) == 0
    assert adam_temporaries("adam-for", 1000, 300, 4) == 2400


# FSDPMemTracker's forward/backward and optimizer-step peaks, measured (torch 2.13, b = 1):
MEASURED_PEAKS = {
    ("gpt2", 1024, 8, 0, "fp32", "none"): (3_945_257_352, 311_129_940),
    ("gpt2", 1024, 1, 0, "fp32", "none"): (5_065_952_904, 2_488_813_140),  # MemTracker
    ("gpt2", 1024, 1, 0, "fp32", "full"): (2_299_832_920, 2_488_813_140),  # MemTracker, checkpoint
    # checkpoint per block with the selective policy (the matmuls' outputs kept)
    ("gpt2", 1024, 1, 0, "fp32", "selective"): (3_140_570_712, 2_488_813_140),  # MemTracker
    ("gpt2", 1024, 8, 0, "fp32", "selective"): (2_019_875_160, 311_129_940),
    ("gpt2", 1024, 8, 7, "fsdp2_bf16", "selective"): (1_412_544_344, 311_065_428),
    ("llama-1b", 2048, 8, 0, "fp32", "none"): (21_920_648_912, 3_089_569_484),
}


@pytest.mark.parametrize("case", list(MEASURED_PEAKS))
def test_the_derived_peaks_are_within_2_percent_of_the_trackers(case: tuple) -> None:
    from placement_edu.runtime.measurement.profiles import get_profile

    model, seq, n, rank, precision, recompute = case
    profile, _ = get_profile(
        StepCase.of(model, 1, seq, PRECISIONS[precision].compute_name, "eager", recompute)
    )
    peak = derive(model, profile, n, rank, precision)
    fb, step = MEASURED_PEAKS[case]
    assert peak.forward_backward_peak.total == pytest.approx(fb, rel=0.02)
    assert peak.step_peak.total == pytest.approx(step, rel=0.02)


def test_a_profile_round_trips_through_json() -> None:
    from placement_edu.runtime.measurement.profiles import get_profile

    profile, _ = get_profile(StepCase.of("gpt2", 1, 256))
    assert ActivationProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile


def test_a_one_layer_model_is_refused_with_a_reason() -> None:
    from placement_edu.errors import PlacementError

    profile = ActivationProfile("x", 1, 8, "fp32", "eager", "none", 0, 0)
    with pytest.raises(PlacementError, match="two-block profile"):
        derive(Architecture("gpt2", 1, 64, 4, 256, 100, positions=8), profile, 2)


#: The measured literals here are of fp32 steps with HF's eager attention (fit's defaults are bf16
#: and SDPA).
FP32_EAGER = ("--precision", "fp32", "--attention", "eager")


def _fit(*argv: str) -> subprocess.CompletedProcess:
    code = "import sys\nfrom placement_edu.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "fit", *argv], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--model", "gpt2", "--devices", "8", "--rank", "8"], "not a rank of 8"),
        (["--model", "gpt2", "--devices", "8", "--seq", "2048"], "1024 learned positions"),
        (["--model", "gpt2", "--devices", "8", "--memory-gb", "lots"], "not a number"),
        (["--model", "gpt3", "--devices", "8"], "unknown model 'gpt3'"),
        (["--model", "/nonexistent/config.json", "--devices", "8"], "cannot read an HF config"),
        (["--model", "gpt2", "--devices", "0"], "less than 1"),
    ],
)
def test_fit_refuses_bad_input_in_one_line_with_status_2(argv: list[str], says: str) -> None:
    done = _fit(*argv)
    assert (
        done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1
    ), done.stderr


def test_fit_json_names_the_peak_and_its_event() -> None:
    done = _fit(*FP32_EAGER, "--model", "gpt2", "--devices", "8", "--memory-gb", "4", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert set(out["memory"]) == {"params", "grads", "optimizer", "activations", "transients"}
    assert out["peak_bytes"] == 3_945_257_352  # FSDPMemTracker's peak, measured (see above)
    assert out["peak_at"] == "backward, loss (logits' gradient)"
    assert out["fits"] is True and out["step_peak_bytes"] == 311_129_940


def test_what_tp_leaves_whole_is_korthikantis_10_sbh_plus_cpu_dropout_and_norm_stats() -> None:
    # Korthikanti et al. 2022, Table 2: 10·sbh bytes of a layer lie outside the column/row pairs
    # (two norm inputs 4sbh, attention and MLP inputs 2sbh each, two 1-byte dropout masks sbh each).
    # Measured on GPT-2 in bf16: CPU dropout keeps a bf16 noise tensor (2 bytes, not a 1-byte mask),
    # and each LayerNorm keeps its mean and rstd ([b·s] each, bf16).
    from placement_edu.runtime.measurement.profiles import get_profile

    s, b, h = 1024, 1, 768
    profile, _ = get_profile(StepCase.of("gpt2", b, s, "bf16"))
    whole = profile.block - profile.block_tp_split
    assert whole == 10 * s * b * h + 2 * s * b * h + 2 * (2 * s * b * 2)


def _fit_torch(argv: list[str], env: dict) -> tuple[dict, str]:
    code = (
        f"import sys\nfrom placement_edu.cli import main\nstatus = main({argv!r})\n"
        "print('STATUS', status, 'TORCH', 'torch' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    return (json.loads(done.stdout) if done.stdout else {}), done.stderr


def test_fit_answers_from_a_cached_profile_without_importing_torch(tmp_path) -> None:
    env = {**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path)}
    argv = ["fit", "--model", "llama-8b", "--devices", "1024", "--seq", "1024", "--json"]
    first, says_first = _fit_torch(argv, env)
    second, says_second = _fit_torch(argv, env)
    assert "STATUS 0 TORCH True" in says_first, says_first[-2000:]  # measured: torch imported
    assert "STATUS 0 TORCH False" in says_second, says_second[-2000:]  # cached: no torch
    assert first["peak_bytes"] == second["peak_bytes"]
    # The shapes issue 22 checks ship with the package: even the first answer needs no torch.
    _, says = _fit_torch(["fit", "--model", "llama-8b", "--devices", "1024", "--json"], env)
    assert "STATUS 0 TORCH False" in says, says[-2000:]


def test_the_shipped_profiles_equal_a_fresh_measurement() -> None:
    # placement_edu/data/profiles: written by `python -m
    # placement_edu.runtime.measurement.profiles`; their file
    # names hash the measuring code and torch's version, so a stale file is never read -- and fails
    # here.
    from placement_edu.runtime.measurement.activation_profile import measure
    from placement_edu.runtime.measurement.profiles import SHIPPED, SHIPPED_CASES, profile_key

    for model, seq, compute, attention in SHIPPED_CASES:
        key = profile_key(StepCase.of(model, 1, seq, compute, attention, "none"))
        path = SHIPPED / f"{key}.json"
        assert path.is_file(), (
            f"{path} missing: run python -m placement_edu.runtime.measurement.profiles"
        )
        fresh = measure(StepCase.of(model, 1, seq, compute, attention))
        assert ActivationProfile.from_dict(json.loads(path.read_text())) == fresh
    assert len(list(SHIPPED.glob("*.json"))) == len(SHIPPED_CASES)


#: A measuring module in miniature: a module, a class and a method, each with a docstring.
_MEASURING = '''"""Measures."""


class Probe:
    """Saves one tensor."""

    def kept(self, b: int) -> int:
        """Bytes kept."""
        return 4 * b
'''


def test_a_docstring_edit_keeps_a_profiles_key_and_a_code_edit_changes_it() -> None:
    # the shipped profiles are named by the measuring code's key: rewording a docstring (twice on
    # one day) must not re-key them; a change to what the code does must
    from placement_edu.runtime.measurement.profiles import code_key

    key = code_key([_MEASURING])
    reworded = (
        _MEASURING.replace('"""Measures."""', '"""Measures\nwhat a module keeps."""')
        .replace("Saves one tensor.", "Saves one tensor for backward.")
        .replace('        """Bytes kept."""\n', "")
    )
    assert code_key([reworded]) == key
    assert code_key([_MEASURING.replace("4 * b", "2 * b")]) != key
    assert code_key([_MEASURING.replace("Probe", "Tracker")]) != key


#: An HF config.json of a two-block GPT-2, 64 wide.
_TINY_GPT2 = {
    "model_type": "gpt2",
    "n_embd": 64,
    "n_head": 2,
    "n_layer": 2,
    "vocab_size": 512,
    "n_positions": 128,
}


def test_an_hf_configs_profile_is_keyed_by_its_contents_not_by_where_it_lies(tmp_path) -> None:
    # (keyed by its path, each test's copy in its own tmp_path was measured again on every run)
    from placement_edu.runtime.measurement.profiles import profile_key

    config = json.dumps(_TINY_GPT2)
    keys = []
    for folder in ("here", "there", "changed"):
        path = tmp_path / folder / "config.json"
        path.parent.mkdir()
        path.write_text(config.replace("64", "128") if folder == "changed" else config)
        keys.append(profile_key(StepCase.of(str(path), 1, 64, "fp32", "eager", "none")))
    assert keys[0] == keys[1] != keys[2]
    assert keys[0] != profile_key(StepCase.of("gpt2", 1, 64, "fp32", "eager", "none"))


def test_a_models_profile_is_shared_by_every_depth_and_by_no_other_width(tmp_path, monkeypatch):
    # A profile is measured on a two-block copy (activation_profile.measure): GPT-2's widths on 4
    # blocks read the shipped profile of its 12, without importing torch; another width does not.
    from placement_edu.runtime.measurement.profiles import profile_key, get_profile

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PLACEMENT_EDU_NO_CACHE", raising=False)
    gpt2 = get_architecture("gpt2")
    key = profile_key(StepCase.of(gpt2, 1, 1024, "fp32", "eager", "none"))
    assert profile_key(StepCase.of(gpt2.with_(layers=4), 1, 1024, "fp32", "eager", "none")) == key
    assert (
        profile_key(StepCase.of(gpt2.with_(hidden=1536), 1, 1024, "fp32", "eager", "none")) != key
    )
    profile, cached = get_profile(
        StepCase.of(gpt2.with_(layers=4), 1, 1024, "fp32", "eager", "none")
    )
    assert cached and profile == get_profile(StepCase.of(gpt2, 1, 1024, "fp32", "eager", "none"))[0]


def test_a_copys_cached_profile_is_named_by_the_path_asked_for(tmp_path, monkeypatch) -> None:
    from placement_edu.runtime.measurement.profiles import profile_key, cache_dir, get_profile

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PLACEMENT_EDU_NO_CACHE", raising=False)
    paths = [tmp_path / folder / "config.json" for folder in ("here", "there")]
    for path in paths:
        path.parent.mkdir()
        path.write_text(json.dumps(_TINY_GPT2))
    here = get_architecture(str(paths[0]))
    kept = ActivationProfile(str(paths[0]), 1, 64, "fp32", "eager", "none", block=3, outside=5)
    cache_dir().mkdir(parents=True)
    entry = cache_dir() / f"{profile_key(StepCase.of(here, 1, 64, 'fp32', 'eager', 'none'))}.json"
    entry.write_text(json.dumps(kept.to_dict()))
    profile, cached = get_profile(StepCase.of(str(paths[1]), 1, 64))  # (nothing measured: no torch)
    assert cached and profile == replace(kept, model=str(paths[1]))


def test_selective_recomputation_keeps_a_gpt2_blocks_input_and_its_matmuls_outputs() -> None:
    # The policy (reference_models.selective_policy) saves every matmul's output and recomputes
    # the rest. One GPT-2 block in fp32 then keeps its input [s, b, h], c_attn's 3h, the attention
    # output h, c_proj's h, c_fc's 4h, the MLP's c_proj h -- 11 sbh elements -- and eager
    # attention's q·kᵀ scores, a bmm's output: a·s²·b. Nothing else: no norm input, no GeLU term,
    # no dropout mask, no softmax output (together 245 MB without recomputation, 85 MB here).
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    from placement_edu.runtime.measurement.profiles import get_profile
    from placement_edu.runtime.measurement.reference_models import selective_policy

    s, b, h, a = 1024, 1, 768, 12
    profile, _ = get_profile(StepCase.of("gpt2", b, s, "fp32", "eager", "selective"))
    assert profile.block == 4 * (11 * s * b * h + a * s * s * b) == 84_934_656
    aten = torch.ops.aten
    save, recompute = CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE
    for op, says in [
        (aten.mm.default, save),
        (aten.addmm.default, save),
        (aten.bmm.default, save),
        (aten._scaled_dot_product_flash_attention_for_cpu.default, save),
        (aten._softmax.default, recompute),
        (aten.native_dropout.default, recompute),
        (aten.tanh.default, recompute),
        (aten.native_layer_norm.default, recompute),
    ]:
        assert selective_policy(None, op) == says, op  # type: ignore[arg-type]


def test_fit_recompute_selective_answers_the_selective_peak() -> None:
    done = _fit(
        *FP32_EAGER, "--model", "gpt2", "--devices", "8", "--recompute", "selective", "--json"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["recompute"] == "selective" and out["profile"]["recompute"] == "selective"
    assert out["peak_bytes"] == 2_019_875_160  # FSDPMemTracker's peak, measured (see above)


# FSDPMemTracker with fully_shard(block, reshard_after_forward=False) on every block (torch 2.13,
# GPT-2, s = 1024, b = 1, N = 8): (rank, precision) -> (forward/backward peak, step peak) bytes.
NO_RESHARD_PEAKS = {
    (0, "fp32"): (4_257_123_720, 311_129_940),
    (7, "fsdp2_bf16"): (2_531_168_624, 311_065_428),
}


@pytest.mark.parametrize("case", list(NO_RESHARD_PEAKS))
def test_without_resharding_every_block_is_still_gathered_at_the_start_of_backward(
    case: tuple,
) -> None:
    from placement_edu.runtime.measurement.profiles import get_profile

    rank, precision = case
    profile, _ = get_profile(StepCase.of("gpt2", 1, 1024, PRECISIONS[precision].compute_name))
    resharded = derive("gpt2", profile, 8, rank, precision)
    kept = derive("gpt2", profile, 8, rank, precision, reshard_after_forward=False)
    assert (kept.forward_backward_peak.total, kept.step_peak.total) == NO_RESHARD_PEAKS[case]
    # At the logits' gradient all 12 blocks are gathered instead of one block's all-gather
    # buffer (that block's backward prefetch): 11 more gathered blocks, nothing else differs.
    block = units(PRESETS["gpt2"], 8, rank)[1].gathered * PRECISIONS[precision].compute
    assert kept.peak.name == resharded.peak.name == "backward, loss (logits' gradient)"
    assert kept.peak.total - resharded.peak.total == 11 * block
    assert (kept.params, kept.grads, kept.optimizer) == (
        resharded.params,
        resharded.grads,
        resharded.optimizer,
    )


def test_fit_strategy_fsdp2_no_reshard_answers_its_peak() -> None:
    done = _fit(
        *FP32_EAGER, "--model", "gpt2", "--devices", "8", "--strategy", "fsdp2_no_reshard", "--json"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["strategy"] == "fsdp2_no_reshard"
    assert out["peak_bytes"] == 4_257_123_720  # FSDPMemTracker's peak, measured (see above)


def test_layer_k_places_each_block_by_its_kind() -> None:
    # torchtitan's layer:K: K = 1 checkpoints every block (= full); K past L none but the blocks
    # K-1, 2K-1, ..; each checkpointed block keeps a full block's bytes instead of a kept one's
    from placement_edu.runtime.measurement.profiles import get_profile

    none, _ = get_profile(StepCase.of("gpt2", 1, 1024, "fp32"))
    full, _ = get_profile(StepCase.of("gpt2", 1, 1024, "fp32", "eager", "full"))
    every = derive("gpt2", none, 8, 0, "fp32", every_kth=(1, full))
    assert every == derive("gpt2", full, 8, 0, "fp32")
    for k, checkpointed in ((2, 6), (5, 2), (12, 1), (13, 0)):
        step = derive("gpt2", none, 8, 0, "fp32", every_kth=(k, full))
        assert step.activations == (
            none.outside + (12 - checkpointed) * none.block + checkpointed * full.block + 4
        ), k


@pytest.mark.parametrize(
    "text, says",
    [
        ("layer:0", "unknown recomputation 'layer:0'"),
        ("layer:10001", "K from 1 to 10,000"),
        ("layers:2", "unknown recomputation 'layers:2'"),
        ("layer:" + "9" * 10_000, "unknown recomputation 'layer:99999999999"),
    ],
)
def test_a_recomputation_outside_the_policies_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(PlacementError, match=re.escape(says)):
        read_recompute(text)
    assert read_recompute("layer:02") == "layer:2" and read_recompute("full") == "full"
