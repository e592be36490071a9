"""``fit --verify --device cuda`` (issue 22): a real step on this machine's GPU, read from CUDA's
allocator, N = 1 in fp32. Where it cannot run it says why in one line (exit 2); the measurement
itself is checked in ``tests/test_peak_tracker.py`` where a GPU exists."""

from __future__ import annotations

import pytest
import torch

from placement_edu.cli import main

pytestmark = pytest.mark.fast

FIT = ["fit", "--model", "gpt2", "--devices", "1", "--device", "cuda"]


def _one_line(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_cuda_is_where_verify_measures(capsys: pytest.CaptureFixture) -> None:
    assert _one_line(capsys, FIT) == (
        "placement-edu: error: --device cuda is where --verify measures: add --verify"
    )


@pytest.mark.parametrize(
    "extra, got",
    [
        (["--devices", "8"], "--devices 8 --precision fp32"),
        (["--precision", "fsdp2_bf16"], "--devices 1 --precision fsdp2_bf16"),
    ],
)
def test_cuda_measures_one_devices_plain_fp32_step(
    capsys: pytest.CaptureFixture, extra: list[str], got: str
) -> None:
    assert _one_line(capsys, FIT + ["--verify"] + extra) == (
        "placement-edu: error: --device cuda measures one device's plain fp32 step "
        f"(--devices 1 --precision fp32), got {got}; more devices are verified on the CPU, "
        "on a fake process group (--device cpu)"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp2_no_reshard"])  # one device: the same step
def test_a_machine_without_cuda_is_told_so(capsys: pytest.CaptureFixture, strategy: str) -> None:
    assert _one_line(capsys, FIT + ["--verify", "--strategy", strategy]) == (
        f"placement-edu: error: --device cuda: this machine has no CUDA device "
        f"(torch {torch.__version__}, built with CUDA {torch.version.cuda or 'no'}); "
        "--device cpu verifies with PyTorch's trackers instead"
    )
