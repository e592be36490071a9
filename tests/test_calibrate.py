"""Time's fit (SPEC §9), no process started: the α–β fit recovers known α and W exactly, becomes a
hardware preset and a report, and ``placement-edu calibrate`` refuses bad input in one line. Runs
on real ranks: tests/test_calibrate_runs.py."""

from __future__ import annotations


import pytest

from placement_edu.cli import main
from placement_edu.errors import PlacementError
from placement_edu.runtime.calibration.calibrate import CalibrationResult
from placement_edu.timing import ring_steps
from placement_edu.timing.fit import (
    CALIBRATED_OPS,
    ComputeSample,
    Sample,
    fit_calibration,
    fit_link,
    hardware_line,
    sample_from,
    sent_bytes,
    this_machine,
)

pytestmark = pytest.mark.fast

ALPHA, W = 40e-6, 1.5e9  # a made-up link: 40 µs per ring step, 1.5 GB/s
SIZES = [2**k for k in range(10, 23)]


def _exact(op: str, n: int, size: int, alpha: float = ALPHA, w: float = W) -> float:
    return alpha * ring_steps(op, n) + float(sent_bytes(op, n, size)) / w


def _synthetic(alpha: float = ALPHA, w: float = W, noise: float = 0.0) -> list[Sample]:
    """Every op at N = 2 and 4, the median exactly on the α–β line (the repeats spread around
    it)."""
    return [
        Sample(
            op,
            n,
            s,
            (
                _exact(op, n, s, alpha, w) * (1 - noise),
                _exact(op, n, s, alpha, w),
                _exact(op, n, s, alpha, w) * (1 + noise),
            ),
        )
        for op in CALIBRATED_OPS
        for n in (2, 4)
        for s in SIZES
    ]


# --- the fit: a pure function of the core ---------------------------------------------------------
def test_the_fit_recovers_a_known_alpha_and_bandwidth_exactly_per_op_and_pooled():
    fit = fit_calibration(_synthetic(noise=0.3))
    for name, link in [*fit.by_op.items(), ("pooled", fit.pooled), ("host", fit.host)]:
        assert link.alpha_s == pytest.approx(ALPHA, rel=1e-9), name
        assert link.bandwidth == pytest.approx(W, rel=1e-9), name
        assert link.rms_relative_error < 1e-9
    assert fit.pooled.points == 4 * 2 * len(SIZES)  # every collective, both world sizes
    # The fitted line reproduces SPEC §9's price of one op: 2(N-1)·α + 2(N-1)/N·S/W for an
    # all-reduce.
    assert fit.pooled.seconds("all_reduce", 4, 2**20) == pytest.approx(6 * ALPHA + 1.5 * 2**20 / W)


def test_the_fit_tells_latency_from_bandwidth_across_three_orders_of_magnitude():
    # Relative least squares: a tiny α under large payloads is still found (plain least squares
    # would fit the 4 MiB points and leave α to chance).
    fit = fit_link([s for s in _synthetic(alpha=1e-6, w=10e9) if s.op == "all_gather"])
    assert (fit.alpha_s, fit.bandwidth) == (
        pytest.approx(1e-6, rel=1e-9),
        pytest.approx(10e9, rel=1e-9),
    )


def test_a_negative_alpha_is_noise_and_is_dropped_not_reported():
    # Times below the bandwidth line at small sizes would fit α < 0; the fit keeps α >= 0.
    samples = [Sample("send", 2, s, (s / W * (0.5 if s < 2**12 else 1.0),)) for s in SIZES]
    fit = fit_link(samples)
    assert fit.alpha_s == 0.0 and fit.bandwidth > 0


def test_a_fit_needs_two_sizes_and_says_why():
    with pytest.raises(PlacementError, match="at least two sizes"):
        fit_link([Sample("all_reduce", 2, 1024, (1e-4,))])


def test_each_repeat_counts_its_slowest_rank_and_the_median_repeat_is_fitted():
    sample = sample_from("all_reduce", 2, 1024, [[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]])
    assert sample.seconds == (3.0, 5.0, 2.5)
    assert sample.spread == (2.5, 3.0, 5.0)
    assert sample.steps == 2 and sample.sent_bytes == 1024  # 2(N-1)/N · S at N = 2


def test_the_fit_becomes_a_hardware_preset_and_a_line_to_paste():
    hw = this_machine(fit_calibration(_synthetic()), 25e9, 8 * 10**9, "synthetic")
    # one machine is one node: every group, of any axis, on the fitted loopback link
    assert hw.gpus_per_node is None and hw.network_link is None
    assert hw.node_link.alpha_s == pytest.approx(ALPHA)
    assert hw.axis_link("data=2,tensor=2", "data").bandwidth == pytest.approx(W)
    assert hw.host_link is not None
    line = hardware_line(hw)
    assert (
        line.startswith('"this_machine": Hardware("this_machine", 2.5e+10, 8000000000,')
        and "Link(4e-05, 1.5e+09)" in line
    )


def test_the_calibration_report_prints_medians_fits_spread_and_the_hardware_line():
    from placement_edu.cli.calibrate import as_dict, report

    compute = (
        ComputeSample("float64 matmul 256x256 (2·n³ FLOPs)", 2, 2 * 256**3, (1e-3, 2e-3, 3e-3)),
    )
    result = CalibrationResult(tuple(_synthetic(noise=0.1)), compute, 3, (2, 4))
    text = report(result)
    for needed in (
        "median",
        "pooled (link)",
        "pooled at N = 4",
        "α =",
        "W =",
        "Spread over repeats",
        '"this_machine": Hardware(',
        "GFLOP/s",
    ):
        assert needed in text, needed
    d = as_dict(result)
    assert d["fit"]["pooled"]["alpha_s"] == pytest.approx(ALPHA) and d["noise"][
        "median"
    ] == pytest.approx(0.2)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--world-sizes", "1"], "less than 2"),
        (["--world-sizes", "two"], "not a number"),
        (["--world-sizes", ","], "names no world size"),
        (["--repeats", "0"], "less than 1"),
        (["--min-size", "14", "--max-size", "12"], "above --max-size"),
        (["--min-size", "12", "--max-size", "12"], "needs at least two payload sizes"),
        (["--max-size", "40"], "more than 30"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, says, capsys):
    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


@pytest.mark.parametrize("world_size, rows", [(2, 8), (3, 6), (6, 3), (64, 1), (256, 1)])
def test_the_toy_step_splits_its_batch_for_every_world_size_calibrate_accepts(world_size, rows):
    # issue 43, item 1: --world-sizes 3 failed on every rank after all its timing ("global batch
    # 16 does not split into 3 data ranks"); the toy step now rounds its batch up to whole rows
    from placement_edu.runtime.calibration.probes import toy_step

    step, flops, label = toy_step(world_size)
    step()  # forward + backward on one rank's rows, no process group
    psi = int(label.split("Ψ = ")[1].split(",")[0])
    assert flops == 6 * psi * rows and f"{rows} rows" in label
