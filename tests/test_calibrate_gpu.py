"""``placement-edu calibrate --device cuda`` (issue 23, item 4): a GPU's achieved FLOP/s and MFU.

Without a GPU: the one-line refusal; the FLOP count and the ``this_gpu`` line as pure functions with
literal values; and the measuring code itself run once on the CPU at a tiny size (the device is a
parameter), so the path a GPU session runs has been executed."""

from __future__ import annotations

import pytest
import torch

from placement_edu.cli import main
from placement_edu.cli.calibrate import gpu_report, peak_of
from placement_edu.mfu import (
    gpu_of,
    measured_hardware,
    step_flops,
    step_flops_6psi,
    step_model,
)
from placement_edu.runtime.calibration.gpu_calibrate import matmul_flops, step_seconds
from placement_edu.timing import HARDWARE, HBM_141GB, PEAK_FLOPS
from placement_edu.timing.fit import hardware_line

pytestmark = pytest.mark.fast

#: HF GPT-2 1.5B (openai-community/gpt2-xl: n_layer 48, n_embd 1600, n_head 25), s = 1024, b = 4.
GPT2_XL = step_model(48, 1600, 25, 1024, 4)


def test_the_h200_preset_has_the_h100s_compute_and_141_gib() -> None:
    # NVIDIA H200 datasheet: 989 TFLOP/s dense bf16 (as the H100 SXM), 141 GB HBM3e, NVLink 4
    for name in ("h200-nvlink-ib", "h200-nvlink"):
        h200, h100 = HARDWARE[name], HARDWARE[name.replace("h200", "h100")]
        assert h200.flops == 0.4 * 989e12 == h100.flops  # the MFU it assumes: 40%
        assert h200.memory_bytes == HBM_141GB == 151_397_597_184
        assert h200.node_link == h100.node_link  # 450 GB/s each direction
        assert h200.node_link.bandwidth == 450e9
        assert (h200.network_link, h200.gpus_per_node) == (h100.network_link, h100.gpus_per_node)
        assert "40% MFU" in h200.source and "190e12" in h200.source
    assert PEAK_FLOPS == {"A100": 312e12, "H100": 989e12, "H200": 989e12}


def test_gpt2_xl_step_is_6_psi_plus_attention_per_token() -> None:
    # HF's gpt2-xl has 1,557,611,200 parameters (its positions table: 1024 rows)
    assert GPT2_XL.psi == 1_557_611_200
    # 6Ψ + 12·L·h·s = 9,345,667,200 + 943,718,400 per token, × b·s = 4,096 tokens
    assert step_flops(GPT2_XL) == 10_289_385_600 * 4096 == 42_145_323_417_600
    # issue 23 counts 6Ψ·tokens alone: 6 × 1,557,611,200 × 4,096
    assert step_flops_6psi(GPT2_XL) == 9_345_667_200 * 4096 == 38_279_852_851_200


@pytest.mark.parametrize(
    "name, gpu",
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA H100 PCIe", None),  # 756 TFLOP/s, not the SXM preset's 989
        ("NVIDIA H100 NVL", None),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_the_device_name_picks_the_preset_gpu_sxm_only(name: str, gpu: str | None) -> None:
    assert gpu_of(name) == gpu


def test_the_peak_comes_from_the_preset_or_from_the_flag() -> None:
    assert peak_of("NVIDIA H200", None, None) == (
        "H200",
        989e12,
        "the H200's dense bf16 peak, timing.PEAK_FLOPS",
    )
    assert peak_of("NVIDIA H100 PCIe", "H100", 756) == ("H100", 756e12, "--peak-tflops 756")


def test_the_this_gpu_line_at_issue_23s_190_tflops_is_19_percent_mfu() -> None:
    # issue 23: GPT-2 1.5B, bf16, eager, on an H200 reached ~190e12 FLOP/s: 190/989 = 19.2%
    hw = measured_hardware("H200", 190e12, 150_754_820_096, 989e12, "the H200", "a step")
    assert hardware_line(hw) == (
        '"this_gpu": Hardware("this_gpu", 1.9e+14, 150754820096, Link(3e-06, 4.5e+11), '
        'source="measured by `placement-edu calibrate --device cuda`: a step; 190e12 FLOP/s = '
        "19.2% MFU of 989e12 (the H200); FLOPs: PaLM's 6Ψ + 12·L·h·s per token (model FLOPs), "
        "plus recomputation (hardware); links: h200-nvlink's, not measured\", "
        "host_link=Link(1e-05, 5e+10), collectives='nccl'),"
    )


def test_the_report_divides_the_counted_flops_by_the_seconds() -> None:
    # 42,145,323,417,600 FLOPs in 0.2218 s: 190.0e12 FLOP/s, 19.2% of 989e12
    out = gpu_report(
        "NVIDIA H200", {4096: 700e12}, GPT2_XL, 0.2218, "H200", 989e12, "peak", 150_754_820_096
    )
    assert "  n = 4096: 700e12 FLOP/s (70.8%)" in out
    assert "42,145,323,417,600 model FLOPs in 221.8 ms: 190e12 FLOP/s, MFU 19.2%" in out
    assert (
        "  6Ψ·tokens alone (issue 23's count, ≈ 190e12 for GPT-2 1.5B on an H200): 172.6e12" in out
    )
    assert out.splitlines()[-1].startswith('"this_gpu": Hardware("this_gpu", 1.9e+14,')


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_machine_without_cuda_is_told_so_in_one_line(capsys: pytest.CaptureFixture) -> None:
    assert main(["calibrate", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"placement-edu: error: --device cuda: this machine has no CUDA device "
        f"(torch {torch.__version__}, built with CUDA {torch.version.cuda or 'no'}); without "
        "--device, calibrate times gloo's collectives on the CPU"
    )


def test_the_measuring_code_runs_on_a_cpu_at_a_tiny_size() -> None:
    cpu = torch.device("cpu")
    matmul = matmul_flops(cpu, (32, 64), repeats=2, dtype=torch.bfloat16)
    assert list(matmul) == [32, 64] and all(f > 0 for f in matmul.values())
    tiny = step_model(layers=2, hidden=64, heads=2, seq=16, micro_batch=2, vocab=128)
    step = step_seconds(cpu, tiny, repeats=2, dtype=torch.bfloat16)  # builds Ψ = tiny.psi
    assert step.seconds > 0 and (step.model, step.dtype, step.attention) == (
        tiny,
        "bfloat16",
        "sdpa",
    )
    out = gpu_report("cpu", matmul, tiny, step.seconds, "H200", 989e12, "peak", 2**30)
    assert out.splitlines()[-1].startswith('"this_gpu": Hardware("this_gpu", ')


def test_the_cuda_handler_runs_end_to_end_where_cuda_is_faked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The handler's plumbing (device name, peak, memory, report) on a faked one-H200 machine,
    its measuring run on the CPU at a tiny size."""
    import placement_edu.cli.calibrate as cli
    from placement_edu.runtime.calibration import gpu_calibrate

    cpu = torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: type("P", (), {"total_memory": 2**30})
    )
    monkeypatch.setattr(cli, "MATMUL_SIZES", (32,))
    real_matmul, real_step = gpu_calibrate.matmul_flops, gpu_calibrate.step_seconds
    monkeypatch.setattr(gpu_calibrate, "matmul_flops", lambda d, *a: real_matmul(cpu, *a))
    monkeypatch.setattr(gpu_calibrate, "step_seconds", lambda d, *a: real_step(cpu, *a))
    argv = ["--layers", "1", "--hidden", "64", "--seq", "16", "--micro-batch", "1"]
    assert main(["calibrate", "--device", "cuda", "--repeats", "1", *argv]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "bf16 matmul on NVIDIA H200 (n×n @ n×n, 2n³ FLOPs; MFU against the H200's dense bf16 "
        "peak, timing.PEAK_FLOPS):"
    )
    assert "L=1 h=64 a=1 s=16 b=1" in out[2]
    assert out[-4] == "gemm_curve=((6.554e+04, 1.000),)"  # one size: 2·32³ FLOPs, the fastest
    assert out[-1].startswith('"this_gpu": Hardware("this_gpu", ') and ", 1073741824, " in out[-1]


def test_json_stays_the_collectives_report(capsys: pytest.CaptureFixture) -> None:
    assert main(["calibrate", "--device", "cuda", "--json"]) == 2
    assert capsys.readouterr().err.strip() == (
        "placement-edu: error: --device cuda prints its report as text; --json is the collectives'"
    )
