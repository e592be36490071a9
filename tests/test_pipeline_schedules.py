"""Pipeline schedules past 1F1B (issue 26 item 3, issue 27 item 4): interleaved 1F1B and zero
bubble, derived as the order each rank runs (``looped_order``), laid out in time by their
dependencies (``looped_timeline``), and priced -- the bubble, the sends, the activations in
flight -- against the published formulas, cited beside each expected value.

The order is checked against torch's own schedule code in ``tests/test_torch_reference.py``."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from placement_edu import Mesh, PlacementError, TransformerSpec, derive_memory, get_precision
from placement_edu.cli import main
from placement_edu.schedule import (
    derive_schedule,
    looped_in_flight,
    looped_order,
    looped_timeline,
    looped_warmup,
    pipeline_bubble,
)
from placement_edu.strategies import get_strategy
from placement_edu.timing import bubble_time

pytestmark = pytest.mark.fast


def idle_share(rows: list[list[tuple[str, int, int, int, int]]]) -> Fraction:
    """The idle fraction of a timeline: 1 - busy / (ranks × length)."""
    length = max(row[-1][4] for row in rows)
    busy = sum(end - start for row in rows for *_, start, end in row)
    return 1 - Fraction(busy, len(rows) * length)


# --- the bubble: published formulas, and the derived order laid out in time -----------------------
def test_interleaving_divides_the_bubble_by_v_as_narayanan_et_al_state() -> None:
    # Narayanan et al. 2021 (SC'21, "Efficient Large-Scale Language Model Training on GPU Clusters
    # Using Megatron-LM") §2.2.2: bubble time fraction (p-1)/(v·m), v times smaller than 1F1B's.
    assert pipeline_bubble(8, 32, "interleaved", 4)["of_ideal"] == Fraction(7, 128)
    assert pipeline_bubble(8, 32)["of_ideal"] == Fraction(7, 32)  # 1F1B, §2.2.1
    assert pipeline_bubble(8, 32, "interleaved", 4)["of_total"] == Fraction(7, 128 + 7)


def test_zero_bubble_h1_has_a_third_of_1f1b_s_bubble_as_qi_et_al_state() -> None:
    # Qi et al. 2024 (ICLR, "Zero Bubble Pipeline Parallelism") §2.1: ZB-H1's bubble is
    # (p-1)(T_F + T_B - T_W), one third of 1F1B's (p-1)(T_F + T_B + T_W) when T_F = T_B = T_W;
    # the authors' table (sail-sg): bubble rate (p-1)/3m for ZB1P against (p-1)/m.
    assert pipeline_bubble(4, 8, "zero_bubble")["of_ideal"] == Fraction(3, 24)
    assert pipeline_bubble(4, 8, "zero_bubble")["of_ideal"] * 3 == pipeline_bubble(4, 8)["of_ideal"]


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("rounds", [1, 2, 4])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_the_interleaved_order_laid_out_in_time_idles_exactly_the_published_bubble(
    p: int, rounds: int, v: int
) -> None:
    # Each chunk pass takes 1 unit forward and 2 backward; every pass waits for its input (the
    # stage before in forward, after in backward). Nothing here assumes the formula.
    m = rounds * p
    rows = looped_timeline(p, m, v)
    assert idle_share(rows) == Fraction(p - 1, v * m + p - 1)
    assert idle_share(rows) == pipeline_bubble(p, m, "interleaved", v)["of_total"]


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("extra", [0, 1, 3])
@pytest.mark.parametrize("rounds", [1, 4])
def test_the_zero_bubble_order_laid_out_in_time_idles_a_third_of_1f1b_s_bubble(
    p: int, extra: int, rounds: int
) -> None:
    # T_F = T_B = T_W = 1 unit (Qi et al.'s assumption; B + W = 2F, the backward's FLOPs); any
    # m >= p micro-batches.
    m = rounds * p + extra
    rows = looped_timeline(p, m, zero_bubble=True)
    assert idle_share(rows) == Fraction(p - 1, 3 * m + p - 1)
    assert idle_share(rows) == pipeline_bubble(p, m, "zero_bubble")["of_total"]


def test_with_fewer_micro_batches_than_stages_zero_bubble_idles_more() -> None:
    # m < p: the W passes are too few to fill the tail, the formula's (p-1)/(3m+p-1) is not met
    rows = looped_timeline(2, 1, zero_bubble=True)
    assert idle_share(rows) == Fraction(2, 5) > pipeline_bubble(2, 1, "zero_bubble")["of_total"]


def test_every_pass_runs_once_and_each_micro_batch_crosses_v_p_stages() -> None:
    p, m, v = 4, 8, 2
    orders = [looped_order(p, r, m, v) for r in range(p)]
    for r, order in enumerate(orders):
        assert len(order) == len(set(order)) == 2 * v * m
        assert {s for _, s, _ in order} == {r, r + p}  # chunks r and r + p of the 8 stages
    zb = looped_order(p, 1, m, zero_bubble=True)
    assert sorted(kind for kind, _, _ in zb) == ["F"] * m + ["I"] * m + ["W"] * m
    # rank 1 runs 1 F-I pair before its first W (its W passes wait for r pairs)
    assert zb[:6] == [("F", 1, 0), ("F", 1, 1), ("F", 1, 2), ("I", 1, 0), ("F", 1, 3), ("I", 1, 1)]
    assert zb[6] == ("W", 1, 0)


# --- warm-up and the activations in flight --------------------------------------------------------
def test_the_warm_up_is_megatron_s_count() -> None:
    # Megatron-LM, schedules.py get_pp_rank_microbatches (interleaved): num_warmup_microbatches =
    # (pipeline_parallel_size - pipeline_parallel_rank - 1) * 2 + (num_model_chunks - 1) *
    # pipeline_parallel_size: at p = 4, v = 2, m = 8 the first rank 10, the last 4.
    assert [looped_warmup(4, r, 8, 2) for r in range(4)] == [10, 8, 6, 4]
    assert looped_warmup(4, 0, 2, 2) == 4  # capped at all v·m chunk forwards


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 8, 3), (4, 4, 2), (4, 12, 2), (4, 8, 4)])
def test_activations_in_flight_are_the_peak_the_order_holds(p: int, m: int, v: int) -> None:
    for r in range(p):
        held = peak = 0
        for kind, _, _ in looped_order(p, r, m, v):
            held += 1 if kind == "F" else -1
            peak = max(peak, held)
        assert looped_in_flight(p, r, m, v) == Fraction(peak, v)  # a chunk: 1/v of the stage
        held = peak = 0
        for kind, _, _ in looped_order(p, r, m, zero_bubble=True):
            held += {"F": 1, "I": 0, "W": -1}[kind]  # held until the weight gradient is taken
            peak = max(peak, held)
        assert looped_in_flight(p, r, m, 1, zero_bubble=True) == peak


def test_the_first_rank_holds_p_plus_p_minus_1_over_v_micro_batches() -> None:
    # Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models")
    # §4.2.3: with the interleaved schedule the first stage stores p·(1 + (p-1)/(p·v))
    # micro-batches' activations, more than 1F1B's p. ZB-H1 stays at 1F1B's p on every rank
    # (Qi et al. 2024 §2.1).
    p, v, m = 8, 4, 64
    assert looped_in_flight(p, 0, m, v) == p * (1 + Fraction(p - 1, p * v)) == Fraction(39, 4)
    assert [looped_in_flight(p, r, m, 1, zero_bubble=True) for r in range(p)] == [p] * p


def test_derived_memory_keeps_the_interleaved_activations_in_flight() -> None:
    model = TransformerSpec(layers=8, hidden=256, heads=4, seq=128, vocab=1000)
    mesh, precision = Mesh.of(pipeline=4), get_precision("mixed_adam")
    pp = get_strategy("pp").with_(micro_batches=8)

    def activations(strategy, rank: int) -> Fraction:
        return derive_memory(strategy, model, mesh, precision, rank).transient["forward"][
            "activations"
        ]

    interleaved = pp.with_(pipeline_schedule="interleaved", virtual_stages=2)
    zero_bubble = pp.with_(pipeline_schedule="zero_bubble")
    # rank 0: 1F1B holds p = 4 micro-batches, interleaved (2·4 + 3)/2 = 11/2, zero bubble 4
    assert activations(interleaved, 0) / activations(pp, 0) == Fraction(11, 8)
    assert activations(zero_bubble, 0) == activations(pp, 0)
    # the last rank: 1F1B 1, zero bubble 4 (ZB-H1 evens the ranks out at 1F1B's first-stage peak)
    assert activations(zero_bubble, 3) / activations(pp, 3) == 4


# --- the sends: v·p - 1 boundaries per micro-batch ------------------------------------------------
def test_each_micro_batch_crosses_v_p_minus_1_boundaries_each_way() -> None:
    model = TransformerSpec(layers=8, hidden=256, heads=4, seq=128, vocab=1000)
    p, m, v = 4, 8, 2
    mesh, precision = Mesh.of(pipeline=p), get_precision("mixed_adam")
    strategy = get_strategy("pp").with_(
        micro_batches=m, pipeline_schedule="interleaved", virtual_stages=v
    )

    def count(rank: int, op: str, phase: str) -> int:
        ops = derive_schedule(strategy, model, mesh, precision, rank).counted()
        return sum(n for o, n in ops if o.op == op and o.phase == phase)

    # rank 0 holds stages 0 and 4: it sends both chunks' activations on, receives one (stage 4's)
    assert (count(0, "send", "forward"), count(0, "recv", "forward")) == (v * m, (v - 1) * m)
    assert (count(0, "send", "backward"), count(0, "recv", "backward")) == ((v - 1) * m, v * m)
    assert sum(count(r, "send", "forward") for r in range(p)) == (v * p - 1) * m
    assert sum(count(r, "send", "backward") for r in range(p)) == (v * p - 1) * m
    one_f_one_b = strategy.with_(pipeline_schedule="1f1b", virtual_stages=1)
    sends = derive_schedule(one_f_one_b, model, mesh, precision, 1).counted()
    assert sum(n for o, n in sends if o.op == "send") == 2 * m  # 1F1B: p - 1 boundaries


def test_a_strategy_with_chunks_but_not_interleaved_is_refused() -> None:
    with pytest.raises(PlacementError, match="interleaved 1F1B runs v >= 2 model chunks"):
        get_strategy("pp").with_(virtual_stages=2)
    with pytest.raises(PlacementError, match="interleaved 1F1B runs v >= 2 model chunks"):
        get_strategy("pp").with_(pipeline_schedule="interleaved")
    with pytest.raises(PlacementError, match="multiple of the stages"):
        looped_order(4, 0, 6, 2)
    interleaved = get_strategy("pp").with_(pipeline_schedule="interleaved", virtual_stages=4)
    model = TransformerSpec(layers=6, hidden=256, heads=4, seq=128, vocab=1000)
    with pytest.raises(PlacementError, match=r"v·p = 4·2 = 8 chunks .* the model has 6"):
        derive_schedule(interleaved, model, Mesh.of(pipeline=2), get_precision("mixed_adam"))


def test_bubble_time_is_the_bubble_of_the_ideal_time() -> None:
    assert bubble_time(1.0, 4, 8, "interleaved", 2) == 3 / 16
    assert bubble_time(1.0, 4, 8, "zero_bubble") == 3 / 24
    assert bubble_time(1.0, 4, 8) == 3 / 8


# --- placement-edu time --schedule interleaved:V --------------------------------------------------
SHAPE = ["--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "128", "--vocab", "1000"]
RUN = [*SHAPE, "--global-batch", "8", "--mesh", "pipeline=2", "--hardware", "h100-nvlink-ib"]
# NVLink 4 inside a node: 450 GB/s each direction, α = 3 µs per step (the preset's); a boundary
# activation is b·s·h = 128 · 256 bf16 elements, 65,536 B, sent in one step.
NVLINK_W, NVLINK_ALPHA, BOUNDARY_BYTES = 450e9, 3e-6, 2 * 128 * 256


def _time(capsys, schedule: str) -> dict:
    assert main(["time", *RUN, "--schedule", schedule, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _sends(out: dict) -> dict[str, float]:
    return {c["pass"]: c["seconds"] for c in out["breakdown"]["collectives"] if c["op"] == "send"}


def test_time_prices_interleaved_1f1b_by_hand(capsys) -> None:
    # p = 2 stages, m = 8 micro-batches (8 sequences, one data replica, b = 1), v = 2 chunks.
    p, m, v = 2, 8, 2
    send = NVLINK_ALPHA + BOUNDARY_BYTES / NVLINK_W
    plain, interleaved = _time(capsys, "1f1b"), _time(capsys, f"interleaved:{v}")
    compute = interleaved["breakdown"]["compute_s"]
    compute_s = compute["forward"] + compute["backward"]
    assert compute == plain["breakdown"]["compute_s"]  # the same FLOPs, run in another order
    # Narayanan et al. 2021 §2.2.2: (p-1)/(v·m) of the ideal time, against 1F1B's (p-1)/m
    assert interleaved["breakdown"]["bubble_s"] == pytest.approx(compute_s / 16, rel=1e-12)
    assert plain["breakdown"]["bubble_s"] == pytest.approx(compute_s / 8, rel=1e-12)
    # rank 0 sends v activations per micro-batch on (stages 0 and 2) and v - 1 gradients back
    # (stage 2's, to stage 1); 1F1B: one activation, no gradient
    assert _sends(interleaved) == pytest.approx({"forward": m * v * send, "backward": m * send})
    assert _sends(plain) == pytest.approx({"forward": m * send})
    assert (interleaved["pipeline_schedule"], interleaved["virtual_stages"]) == ("interleaved", v)
    assert p == 2


def test_time_prices_zero_bubble_with_a_third_of_the_bubble(capsys) -> None:
    plain, zero = _time(capsys, "1f1b"), _time(capsys, "zero_bubble")
    assert zero["breakdown"]["bubble_s"] == pytest.approx(
        plain["breakdown"]["bubble_s"] / 3, rel=1e-12
    )  # Qi et al. 2024 §2.1, T_F = T_B = T_W
    assert _sends(zero) == _sends(plain) and zero["peak_bytes"] == plain["peak_bytes"]


def test_the_text_report_names_the_interleaved_schedule(capsys) -> None:
    assert main(["time", *RUN, "--schedule", "interleaved:2"]) == 0
    assert "(interleaved:2)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--schedule", "interleaved"], "'interleaved': interleaved 1F1B is interleaved:V"),
        (["--schedule", "interleaved:1"], "an integer >= 2"),
        (["--schedule", "looped"], "accepted: 1f1b, gpipe, zero_bubble, interleaved:V"),
        (["--schedule", "interleaved:3"], "give --layers a multiple of 6"),
        (
            ["--schedule", "interleaved:2", "--global-batch", "6", "--mesh", "pipeline=4"],
            "m = 6 over p = 4",
        ),
    ],
)
def test_bad_schedules_are_one_line_naming_the_value(capsys, argv: list[str], says: str) -> None:
    base = [*SHAPE, "--global-batch", "8", "--mesh", "pipeline=2"]
    assert main(["time", *base, *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_the_report_states_the_schedule_s_bubble() -> None:
    from placement_edu.report import analyze

    model = TransformerSpec(layers=8, hidden=256, heads=4, seq=128, vocab=1000)
    pp = get_strategy("pp").with_(micro_batches=8)
    interleaved = analyze(pp.with_(pipeline_schedule="interleaved", virtual_stages=2), model, 4)
    assert (
        "pipeline bubble",
        "3/16 of ideal time = (p-1)/(2·m); 3/19 of total time = (p-1)/(2·m+p-1)",
    ) in interleaved.lines()
    assert interleaved.to_dict()["pipeline_bubble"] == {"of_ideal": 3 / 16, "of_total": 3 / 19}
    plain = analyze(pp, model, 4)  # 1F1B: the line as before
    assert (
        "pipeline bubble",
        "3/8 of ideal time = (p-1)/m; 3/11 of total time = (p-1)/(m+p-1)",
    ) in plain.lines()
