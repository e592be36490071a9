"""``placement-edu time`` (issue 27, item 1): one given configuration priced -- its figures pinned
against a hand calculation from published hardware numbers, and equal to the planner's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from placement_edu.cli import main
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.planner import plan
from placement_edu.pricing import price_configuration
from placement_edu.precision import get_precision
from placement_edu.timing import get_hardware

pytestmark = pytest.mark.fast

# A small GPT: L = 2, h = 256, a = 4, s = 128, V = 1000, f = 4h.
SMALL = ["--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128", "--vocab", "1000"]
L, H, S, V = 2, 256, 128, 1000
# Ψ = L·(12h² + 13h) + V·h + s·h + 2h (Narayanan et al. 2021 §5.1's 12h² + 13h per layer, with
# learned positions and a final layernorm): 2·(786,432 + 3,328) + 256,000 + 32,768 + 512
PSI = 1_868_800
# H100 SXM: 989e12 dense bf16 FLOP/s (NVIDIA H100 datasheet); the h100-nvlink-ib preset assumes
# 40 % MFU of it. NVLink 4: 450 GB/s each direction, α = 3 µs per ring step (the preset's).
PEAK, MFU_ASSUMED, NVLINK_W, NVLINK_ALPHA = 989e12, 0.40, 450e9, 3e-6


def _json(capsys, argv: list[str]) -> dict:
    assert main(["time", *SMALL, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_small_gpt_has_the_parameters_counted_by_hand() -> None:
    assert TransformerSpec(layers=L, hidden=H, heads=4, seq=S, vocab=V).psi == PSI


def test_compute_bound_dp_runs_at_the_presets_mfu_and_compute_is_flops_over_peak_times_mfu(
    capsys,
) -> None:
    # 512 sequences on 8 GPUs: 64 × 128 = 8,192 tokens per device; backward compute (~165 µs)
    # hides the one all-reduce (~57 µs), so the step is compute alone.
    argv = ["--global-batch", "512", "--mesh", "data=8", "--strategy", "dp", "--no-roofline"]
    out = _json(capsys, argv)  # the FLOP-only model: every FLOP at the preset's MFU
    tokens = 512 * S / 8
    flops_per_token = 6 * PSI + 12 * L * H * S  # PaLM's model FLOPs (Chowdhery et al. 2022, B)
    compute_s = flops_per_token * tokens / (PEAK * MFU_ASSUMED)
    assert out["step_s"] == pytest.approx(compute_s, rel=1e-12)
    assert out["breakdown"]["exposed_comm_s"] == 0
    assert out["mfu"] == pytest.approx(MFU_ASSUMED, rel=1e-12)
    assert out["tflops_per_gpu"] == pytest.approx(PEAK * MFU_ASSUMED / 1e12, rel=1e-12)
    (reduce,) = out["breakdown"]["collectives"]
    assert (reduce["op"], reduce["pass"], reduce["overlap"]) == ("all_reduce", "backward", "hidden")


def test_efficiency_scales_the_achieved_flops_and_so_the_mfu(capsys) -> None:
    argv = ["--global-batch", "512", "--mesh", "data=8", "--efficiency", "1.1", "--no-roofline"]
    assert _json(capsys, argv)["mfu"] == pytest.approx(1.1 * MFU_ASSUMED, rel=1e-12)


def test_a_tiny_batch_exposes_the_all_reduce_beyond_backward_compute(capsys) -> None:
    # 8 sequences on 8 GPUs: 128 tokens per device. dp's all-reduce of 2-byte gradients over 8
    # GPUs inside one node: α·2(N-1) + 2(N-1)/N · 2Ψ / W (SPEC §9); per_pass hides only the
    # backward compute's worth of it.
    out = _json(capsys, ["--global-batch", "8", "--mesh", "data=8", "--no-roofline"])
    forward_s = 2 * (2 * PSI + 4 * L * H * S) * 128 / (PEAK * MFU_ASSUMED) / 2
    backward_s = 2 * forward_s
    all_reduce_s = NVLINK_ALPHA * 14 + 2 * 7 / 8 * 2 * PSI / NVLINK_W
    assert out["breakdown"]["comm_s"] == pytest.approx(all_reduce_s, rel=1e-12)
    assert out["breakdown"]["exposed_comm_s"] == pytest.approx(all_reduce_s - backward_s, rel=1e-9)
    assert out["step_s"] == pytest.approx(forward_s + all_reduce_s, rel=1e-9)
    assert out["breakdown"]["collectives"][0]["overlap"] == "partly exposed"
    # memory, as ZeRO's table counts it: 16Ψ of model states on every dp replica, plus activations
    assert out["peak_bytes"] > 16 * PSI


@pytest.mark.parametrize(
    "mesh, strategy, sp, recompute, schedule, overlap",
    [
        ("data=2,tensor=2,pipeline=2", "zero1", True, "selective", "1f1b", "per_pass"),
        ("data=2,tensor=2,pipeline=2", "zero3", False, "full", "1f1b", "none"),
        ("data=4,tensor=2", "zero2", False, "none", "1f1b", "per_pass+tp"),
        ("replica=2,data=4", "hsdp", False, "none", "1f1b", "per_pass"),
    ],
)
def test_the_command_prices_a_configuration_as_the_planner_does(
    mesh, strategy, sp, recompute, schedule, overlap
) -> None:
    model = TransformerSpec(layers=4, hidden=H, heads=4, seq=S, vocab=V, micro_batch=2)
    hw, precision = get_hardware("h100-nvlink-ib"), get_precision("mixed_adam")
    priced = price_configuration(
        model, Mesh.parse(mesh), strategy, 64, hw, precision, recompute, sp, schedule, overlap
    )
    ranked = plan(model, 8, hardware=hw, global_batch=64, overlap=overlap).ranked
    (same,) = [
        c
        for c in ranked
        if c.mesh == Mesh.parse(mesh)
        and c.strategy == priced.choice.strategy
        and c.recompute == recompute
    ]
    assert same.time is not None
    assert priced.step_s == same.time.total_s  # the planner's figure, exactly
    assert priced.choice.peak_bytes == same.peak_bytes
    # the collectives listed split the planner's communication seconds, pass by pass
    t = priced.choice.time
    assert t is not None
    for phase, _, comm in t.by_pass:
        listed = sum(s for _, _, p, _, s in priced.collectives if p == phase)
        assert listed == pytest.approx(comm, rel=1e-9, abs=1e-15)


def test_a_configuration_over_the_memory_is_priced_and_said_not_to_fit(capsys) -> None:
    # GPT-3 175B under plain dp on 8 GPUs: 16Ψ = 2.8 TB of model states on every device
    argv = ["time", "--layers", "96", "--hidden", "12288", "--heads", "96", "--seq", "2048"]
    argv += ["--vocab", "51200", "--global-batch", "8", "--mesh", "data=8"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["peak_bytes"] > 16 * 174_615_846_912 > out["memory_bytes"]
    assert main(argv) == 0
    assert "does NOT fit" in capsys.readouterr().out


def test_the_last_stage_computes_the_logit_layer_unless_the_split_counts_it(capsys) -> None:
    # On 2 stages the last computes the logit layer, 6·V·h = 1,536,000 FLOPs a token, for both:
    # (2 - 1) × that more than an even share, per token of the device; --balanced-stages (a split
    # that counts it, as DeepSpeed's type:transformer|embedding does) spreads it evenly.
    argv = ["--global-batch", "64", "--mesh", "data=4,pipeline=2", "--strategy", "zero1"]
    last = _json(capsys, argv)
    even = _json(capsys, [*argv, "--balanced-stages"])
    tokens = 64 * S / 8  # per device: the global batch's tokens over 8 devices
    extra = 1 * 6 * V * H * tokens / (PEAK * MFU_ASSUMED)
    paced, spread = (sum(j["breakdown"]["compute_s"].values()) for j in (last, even))
    assert paced - spread == pytest.approx(extra, rel=1e-9)
    assert main(["time", *SMALL, *argv, "--balanced-stages"]) == 0
    assert "(1f1b, balanced stages)" in capsys.readouterr().out


def test_the_text_report_names_the_step_the_convention_and_the_memory(capsys) -> None:
    argv = ["--global-batch", "512", "--mesh", "data=8", "--no-roofline"]
    assert main(["time", *SMALL, *argv]) == 0
    text = capsys.readouterr().out
    assert "step " in text and "MFU 40.0%" in text and "PaLM's 6Ψ + 12·L·h·s" in text
    assert "all_reduce on data" in text and "hidden" in text and "fits" in text


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--mesh", "data=8", "--schedule", "interleaved:x"], "an integer >= 2"),
        (["--mesh", "data=8", "--kv-heads", "3"], "--kv-heads 3 does not divide --heads 4"),
        (["--mesh", "data=2,tensor=4", "--kv-heads", "2"], "does not divide the 2 key-value"),
        # sdpa is taken as flash (one vocabulary with fit, issue 41); a near miss is named
        (
            ["--mesh", "data=8", "--attention", "flsh"],
            "unknown attention 'flsh'; accepted: eager, "
            "flash (aliases: sdpa = flash); did you mean 'flash'?",
        ),
        (["--mesh", "data=8", "--strategy", "zero9"], "unknown data placement 'zero9'"),
        (["--mesh", "data=8", "--sequence-parallel"], "the mesh has none"),
        (["--mesh", "data=4,tensor=2", "--strategy", "zero1×pp"], "the composition is 'zero1×tp'"),
        (["--mesh", "replica=2,data=4", "--strategy", "zero1"], "give hsdp or zero3"),
        (["--mesh", "data=8", "--efficiency", "0"], "from 0.01 to 10"),
        (["--mesh", "data=8", "--efficiency", "fast"], "'fast' is not a number"),
        (["--mesh", "data=5"], "expected a multiple of 5"),
        (["--mesh", "data=2,tensor=3"], "does not divide the 4 attention heads"),
        (
            ["--mesh", "data=8", "--recompute", "some"],
            "'some' is not a recomputation; give none, selective (or megatron-selective), "
            "torchtitan-op, full, or layer:K",
        ),
        # issue 39, item 3: Korthikanti's formula has no term for torchtitan's save list
        (["--mesh", "data=8", "--recompute", "torchtitan-op"], "give --model NAME"),
        # issue 43, item 7: accepted and ignored before
        (["--mesh", "data=8", "--schedule", "interleaved:2"], "--schedule shapes a pipeline"),
        (["--mesh", "data=8", "--balanced-stages"], "--balanced-stages shapes a pipeline"),
    ],
)
def test_bad_input_is_one_line_naming_the_value_and_what_is_accepted(capsys, argv, says) -> None:
    assert main(["time", *SMALL, "--global-batch", "48", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_megatron_selective_is_selective_by_its_megatron_name(capsys) -> None:
    """One name for one thing (issue 39, item 3): Korthikanti's selective recomputation is
    Megatron-LM's, the name fit measures it by; time reads it as its own selective."""
    argv = ["--global-batch", "48", "--mesh", "data=8"]
    megatron = _json(capsys, [*argv, "--recompute", "megatron-selective"])
    assert megatron == _json(capsys, [*argv, "--recompute", "selective"])
    assert megatron["recompute"] == "selective"
    none = _json(capsys, [*argv, "--recompute", "none"])  # (the replayed core attention)
    hardware = [o["hardware_tflops_per_gpu"] * o["step_s"] for o in (megatron, none)]
    assert hardware[0] > hardware[1]


def test_the_door_reads_the_alias_and_the_formula_refuses_torchtitans_peak() -> None:
    from placement_edu.errors import PlacementError
    from placement_edu.setting import resolve

    spec = TransformerSpec(layers=L, hidden=H, heads=4, seq=S, vocab=V)
    assert resolve(None, spec, "data=8", recompute="megatron-selective").recompute == "selective"
    with pytest.raises(PlacementError) as error:
        price_configuration(spec, "data=8", "dp", 48, recompute="torchtitan-op")
    assert str(error.value) == (
        "Korthikanti's formula has no term for torchtitan-op's save list: only a module's "
        "profile prices its peak (fit's; price_configuration's peak_of)"
    )


def test_help_names_the_trainer_that_ships_each_policy(capsys) -> None:
    assert main(["time", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for ships in (
        "none (default: every trainer without activation checkpointing)",
        "megatron-selective (Korthikanti et al. 2022: core attention recomputed; Megatron-LM's "
        "--recompute-granularity selective)",
        "torchtitan-op (torchtitan's activation_checkpoint.mode = 'selective', "
        "selective_ac_option = 'op'",
        "layer:K (torchtitan's mode = 'selective', selective_ac_option = 'K'",
        "full (every block: Megatron-LM's --recompute-granularity full, torchtitan's mode = "
        "'full', HF's gradient checkpointing)",
    ):
        assert ships in help_text


def test_a_strategy_name_100000_characters_long_gives_a_short_line(capsys) -> None:
    argv = ["time", *SMALL, "--global-batch", "8", "--mesh", "data=8", "--strategy", "z" * 100_000]
    assert main(argv) == 2
    assert len(capsys.readouterr().err) < 500


def test_time_never_imports_torch() -> None:
    code = textwrap.dedent(f"""
        import sys
        from placement_edu.cli import main
        status = main({["time", *SMALL, "--global-batch", "8", "--mesh", "data=8"]!r})
        print("STATUS", status, "TORCH", "torch" in sys.modules, file=sys.stderr)
    """)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert "STATUS 0 TORCH False" in result.stderr, result.stderr[-2000:]


def test_time_prints_a_toys_few_flops_plainly_not_as_a_fraction_of_1e12() -> None:
    # H100's dense bf16 peak reads in 10^12; a toy's 4.199e6 FLOP/s once read "4.199e-06e12"
    from placement_edu.cli.time import tera

    assert tera(989.4) == "989.4e12"
    assert tera(4.199e-06) == "4.199e+06"
