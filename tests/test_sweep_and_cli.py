"""The vectorised sweep agrees with the scalar core; the command line prints the core's numbers
and refuses bad input with exit status 2 and one line."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from placement_edu import analyze
from placement_edu.cli import main
from placement_edu.sweep import sweep

pytestmark = pytest.mark.fast

#: A transformer small enough to derive at once, as ``table``'s flags give it.
SMALL_SHAPE = "--layers 8 --hidden 64 --heads 4 --seq 16 --vocab 100"

STRATEGIES = [
    "dp",
    "zero1_allreduce",
    "zero1",
    "zero2",
    "zero3",
    "fsdp_grad_op",
    "zero2_offload",
    "zero3_offload",
]


@pytest.mark.parametrize("precision", ["mixed_adam", "mixed_adam_fp32_grads", "fp64_adam"])
def test_sweep_matches_scalar_derivation_point_by_point(precision: str) -> None:
    rng = np.random.default_rng(0)
    psi = rng.integers(10**6, 10**12, size=40).astype(np.float64)
    n = rng.integers(1, 2048, size=40).astype(np.float64)
    got = sweep(STRATEGIES, psi, n, precision)
    for name in STRATEGIES:
        for i in range(len(psi)):
            r = analyze(name, int(psi[i]), int(n[i]), precision)
            assert got[name]["model_state"][i] == pytest.approx(
                float(r.memory.model_state), rel=1e-12
            )
            assert got[name]["ring_bytes"][i] == pytest.approx(float(r.ring_bytes), rel=1e-12)
            assert got[name]["volume_psi"][i] == float(r.volume_psi)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "placement_edu.cli", *args], capture_output=True, text=True
    )


def test_table_json_reproduces_zero_table_1_at_n_64(capsys: pytest.CaptureFixture) -> None:
    assert main(["table", "--params", "7.5e9", "--devices", "64", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in rows] == ["dp", "zero1", "zero2", "zero3"]
    # ZeRO Table 1, N = 64: 120, 31.4, 16.6, 1.88 GB (exact: 31.40625, 16.640625, 1.875)
    assert [Fraction(r["memory"]["model_state"]) / 10**9 for r in rows] == [
        120,
        Fraction("31.40625"),
        Fraction("16.640625"),
        Fraction("1.875"),
    ]
    assert [r["comm"]["volume_psi"] for r in rows] == [2, 2, 2, 3]
    for r in rows:
        assert set(r["memory"]) >= {"params", "grads", "optimizer", "model_state", "peak", "host"}
        assert set(r["comm"]) >= {"volume_psi", "ring_bytes"}
        assert r["devices"] == 64


def test_table_json_70b_on_8_devices(capsys: pytest.CaptureFixture) -> None:
    assert main(["table", "--params", "70e9", "--devices", "8", "--json"]) == 0
    zero3 = json.loads(capsys.readouterr().out)[3]
    assert zero3["memory"]["model_state"] == 140 * 10**9  # arXiv 2601.02311: 1120 GB -> 140 GB
    assert zero3["vs_dp"] == {"memory": 0.125, "memory_with_host": 0.125, "comm": 1.5}


def test_table_prints_a_labelled_text_table(capsys: pytest.CaptureFixture) -> None:
    assert main(["table", "--params", "7.5e9", "--devices", "64"]) == 0
    out = capsys.readouterr().out
    assert "GB = 10^9 bytes, GiB = 2^30 bytes" in out
    assert "1.875 GB (1.746 GiB)" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--params", "0", "--devices", "8"],
            "argument --params: '0' is less than 1; give a whole number of parameters, at "
            "least 1 and at most 10^15",
        ),
        (["--params", "-5", "--devices", "8"], "argument --params: '-5' is less than 1"),
        (
            ["--params", "1e9", "--devices", "0"],
            "argument --devices: '0' is less than 1; give a whole number of devices, at "
            "least 1 and at most 2^40",
        ),
        (
            ["--params", "1e9", "--devices", "8", "--strategies", "zero4"],
            "unknown strategy 'zero4'; known strategies: dp, zero1",
        ),
        (
            ["--params", "1e9", "--devices", "8", "--precision", "fp8"],
            "unknown precision 'fp8'; known presets: mixed_adam",
        ),
        (
            ["--params", "1e9", "--devices", "8", "--mesh", "data=4"],
            "mesh data=4 has 4 devices, but devices = 8",
        ),
        (["--params", "lots", "--devices", "8"], "'lots' is not a number"),
    ],
)
def test_bad_table_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    result = run_cli("table", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_table_prices_tensor_and_pipeline_parallel_for_a_transformer(
    capsys: pytest.CaptureFixture,
) -> None:
    shape = "--layers 8 --hidden 1024 --heads 16 --seq 1024 --vocab 50000 --micro-batch 2"
    assert main(f"table {shape} --devices 8 --strategies tp --json".split()) == 0
    tp = json.loads(capsys.readouterr().out)[0]
    # 8 layers x 4 all-reduces of b·s·h = 2·1024·1024 two-byte activations, ring factor 2·7/8
    assert tp["comm"]["ring_bytes"] == 8 * 4 * Fraction(14, 8) * 2 * 1024 * 1024 * 2
    # model state against dp's 16Ψ: (Ψ − Ψ_R)/8 + Ψ_R of Ψ, Megatron's Ψ_R = 6h·L + 2h + s·h
    # (norms, row-parallel biases, positions) whole on every tensor rank (issue 40)
    psi, replicated = 153_020_416, 6 * 1024 * 8 + 2 * 1024 + 1024 * 1024
    assert tp["vs_dp"]["memory"] == pytest.approx(((psi - replicated) / 8 + replicated) / psi)


def test_a_strategy_needs_its_axis_in_the_mesh() -> None:
    result = run_cli(*f"table {SMALL_SHAPE} --devices 8 --strategies pp --mesh tensor=8".split())
    assert result.returncode == 2
    assert (
        "strategy 'pp' places states on the pipeline axis, but the mesh (tensor=8) "
        "has no pipeline axis" in result.stderr
    )


def test_table_names_the_pipeline_bubble_convention(capsys: pytest.CaptureFixture) -> None:
    assert main(f"table {SMALL_SHAPE} --devices 4 --strategies pp".split()) == 0
    # p = 4 stages, m = 4 micro-batches (pp's default): 3/4 of ideal time, 3/7 of total time.
    assert (
        "pipeline bubble (pp): 3/4 of ideal time = (p-1)/m; 3/7 of total time = (p-1)/(m+p-1)"
        in capsys.readouterr().out
    )
