"""Cost depends on the description, not the size (issue 24, item 1).

Before: ``check pp --mesh pipeline=1048576`` derived one schedule per stage (past 120 s;
pipeline=2^40 ended in a MemoryError), and a strategy that gathers per layer built one list entry
per layer (``table`` at 10^6 layers: 91 s and 1 GB; 2^40 layers: a MemoryError traceback in
``table`` and ``plan``). Now the checker derives one stage of each kind (first, middle by layer
count, last) and a run of equal layers is one entry with its count. No test here is timed: each
asserts the structure (how many schedules are derived, how many entries a schedule holds) and that
the figures at large sizes are the closed form the small case scales to.
"""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import pytest

import placement_edu.checker as checker_module
from placement_edu import PlacementError, TransformerSpec, analyze, check, derive_schedule
from placement_edu.cli import main
from placement_edu.errors import MAX_LISTED_OPS
from placement_edu.mesh import Mesh
from placement_edu.models import ModelSpec, greedy_partition, unit_runs_of
from placement_edu.precision import get_precision
from placement_edu.schedule import Repeat, stage_kinds
from placement_edu.strategies import get_strategy
from placement_edu.faults import applicable_faults

pytestmark = pytest.mark.fast

MIXED = get_precision("mixed_adam")
BIG = 2**40


def tiny(layers: int) -> TransformerSpec:
    """The issue's model: every width 1, so only the layer count is large."""
    return TransformerSpec(layers=layers, hidden=1, heads=1, seq=1, vocab=1)


# --- pipeline stages: one of each kind ------------------------------------------------------------
def test_stage_kinds_are_first_middle_by_layer_count_and_last_and_count_every_stage() -> None:
    # 10 layers on 4 stages: stages 0, 1 hold 3 layers, stages 2, 3 hold 2
    assert stage_kinds(4, 10) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert stage_kinds(8, 8) == [(0, 1), (1, 6), (7, 1)]
    assert stage_kinds(1, 5) == [(0, 1)]
    assert stage_kinds(2, 3) == [(0, 1), (1, 1)]
    kinds = stage_kinds(BIG, BIG + 5)  # 5 extra layers: stages 0..4 hold 2
    assert kinds == [(0, 1), (1, 4), (5, BIG - 6), (BIG - 1, 1)]
    assert sum(n for _, n in kinds) == BIG


def listed(strategy, model, mesh: Mesh, stage: int) -> Counter:
    """The ops stage ``stage`` runs in a step (on its first rank, ``mesh.LAYOUT``), as a multiset
    (order set aside)."""
    s = derive_schedule(strategy, model, mesh, MIXED, stage * mesh.stride("pipeline"), strict=False)
    return Counter(o.key() + (o.micro_batches, o.stale) for o in s.ops)


@pytest.mark.parametrize("m, schedule", list(itertools.product((1, 3, 9), ("gpipe", "1f1b"))))
def test_stages_of_one_kind_run_the_same_ops_in_their_own_order(m: int, schedule: str) -> None:
    # 1F1B's warm-up, min(p - stage - 1, m), orders a stage's passes but changes none of its ops
    model = ModelSpec(10**6, layers=10, boundary_elements=64, replicated_elements=96)
    for name, text in MESHES.items():
        strategy = get_strategy(name).with_(micro_batches=m, pipeline_schedule=schedule)
        mesh = Mesh.parse(text)
        kinds = stage_kinds(7, 10)
        starts = [stage for stage, _ in kinds] + [7]
        for (first, count), end in zip(kinds, starts[1:]):
            assert end - first == count
            want = listed(strategy, model, mesh, first)
            for stage in range(first + 1, end):
                assert listed(strategy, model, mesh, stage) == want, (name, stage)


#: A pipeline of 7 stages for each strategy that splits on pipeline.
MESHES = {
    "pp": "pipeline=7",
    "dp×pp": "data=2,pipeline=7",
    "zero1×tp×pp": "data=2,tensor=2,pipeline=7",
}


@pytest.mark.parametrize("name", list(MESHES))
def test_the_checker_says_what_walking_every_stage_says(name: str, monkeypatch) -> None:
    base = get_strategy(name)
    for p, layers, m in ((3, 3, 1), (5, 7, 2), (7, 10, 9)):
        strategy = base.with_(micro_batches=m)
        mesh = Mesh.parse(MESHES[name].replace("pipeline=7", f"pipeline={p}"))
        model = ModelSpec(10**6, layers=layers, boundary_elements=64, replicated_elements=96)
        for fault in (None, *applicable_faults(strategy, mesh)):
            kinds = check(strategy, mesh, fault, model)
            with monkeypatch.context() as patch:
                patch.setattr(checker_module, "stages_to_walk", lambda _m, s: list(range(s)))
                every = check(strategy, mesh, fault, model)
            assert kinds == every, (name, p, fault)


def test_check_pp_on_2_to_the_40_stages_derives_four_schedules_at_most(monkeypatch) -> None:
    derived: list[int] = []
    real = checker_module.derive_schedule

    def counting(*args, **kwargs):
        derived.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(checker_module, "derive_schedule", counting)
    for p in (4, 2**20, BIG):
        derived.clear()
        result = check("pp", f"pipeline={p}")
        assert result.gradient_integrity.holds and result.state_consistency.holds
        assert len(derived) <= 4, (p, len(derived))
    derived.clear()
    broken = check("dp×pp", f"data=2,pipeline={2**20}", fault="skip-grad-reduce")
    assert not broken.gradient_integrity.holds and len(derived) <= 4


# --- layers: a run of equal units is one entry ----------------------------------------------------
@pytest.mark.parametrize("name", ["zero3", "fsdp", "zero3_offload", "fsdp_grad_op"])
def test_a_per_layer_gather_holds_one_entry_whatever_the_layer_count(name: str) -> None:
    small = derive_schedule(get_strategy(name), tiny(10), Mesh.of(data=8), MIXED)
    for layers in (10**6, 10**12, BIG):
        big = derive_schedule(get_strategy(name), tiny(layers), Mesh.of(data=8), MIXED)
        assert len(big.entries) == len(small.entries) <= 12
        runs = [e for e in big.entries if isinstance(e, Repeat) and e.unit]
        assert runs and all(e.times == layers for e in runs)
        # each layer adds the same ops: the step's length grows by one layer's worth per layer
        eleven = derive_schedule(get_strategy(name), tiny(11), Mesh.of(data=8), MIXED)
        assert big.length == small.length + (layers - 10) * (eleven.length - small.length)


def test_zero3_at_10_to_the_12_layers_is_the_closed_form_and_each_gather_one_layer() -> None:
    # every unit is Ψ/L elements; its all-gather over N = 8 sends (N-1)/N of 2 B per element;
    # forward gathers, backward gathers again, the gradient is reduce-scattered: 3 · 2Ψ · 7/8
    layers, n = 10**12, 8
    model = tiny(layers)
    report = analyze("zero3", model, n)
    assert report.ring_bytes == 3 * 2 * model.psi * Fraction(n - 1, n)
    assert report.volume_psi == 3
    gathers = [
        (o, units)
        for o, units, _ in report.schedule.held()
        if o.op == "all_gather" and o.phase == "forward"
    ]
    assert [(o.elements, units) for o, units in gathers] == [(Fraction(model.psi, layers), layers)]
    # the gather window is two layers' parameters (2 B each: the one computing and the next,
    # prefetched), what the small case scales to
    small = analyze("zero3", tiny(10), n)
    window = report.memory.transient["forward"]["gather_window"]
    assert window == 2 * Fraction(2 * model.psi, layers)
    assert small.memory.transient["forward"]["gather_window"] == 2 * Fraction(2 * tiny(10).psi, 10)


def test_tensor_parallel_traffic_at_10_to_the_12_layers_is_one_layers_times_the_count() -> None:
    one = analyze(
        "tp", TransformerSpec(layers=1, hidden=8, heads=8, seq=4, vocab=1), mesh="tensor=8"
    )
    for layers in (10**6, 10**12):
        model = TransformerSpec(layers=layers, hidden=8, heads=8, seq=4, vocab=1)
        report = analyze("tp", model, mesh="tensor=8")
        assert report.ring_bytes == layers * one.ring_bytes
        assert len(report.schedule.entries) == len(one.schedule.entries)


def test_a_concrete_models_equal_layers_are_one_run_and_list_as_before() -> None:
    assert unit_runs_of([3, 3, 5, 5, 5, 3]) == [(3, 2), (5, 3), (3, 1)]
    assert unit_runs_of([]) == []


def test_greedy_partition_on_2_to_the_40_ranks_keeps_a_load_per_tensor_not_per_rank() -> None:
    sizes = [7, 5, 5, 3, 1]
    assert greedy_partition(sizes, BIG) == greedy_partition(sizes, 5) == [0, 1, 2, 3, 4]
    assert greedy_partition(sizes, 2) == [0, 1, 1, 0, 0]


# --- the limits that remain, at the door --------------------------------------------------------
def test_listing_the_units_one_by_one_is_refused_beyond_the_cap_but_the_totals_answer() -> None:
    model = ModelSpec(10**9, gather_units=BIG)
    assert model.unit_runs({}, 8) == [(Fraction(10**9, BIG), BIG)]
    with pytest.raises(PlacementError, match="listing 1,099,511,627,776 gather units"):
        model.unit_elements({}, 8)
    report = analyze("zero3", model, 8)
    with pytest.raises(PlacementError, match="listing them stops at 100,000"):
        report.to_dict()
    assert report.volume_psi == 3


def test_zero1_allreduce_beyond_the_listing_cap_is_refused_in_one_line(capsys) -> None:
    # one broadcast per owner: each op names its owner, so they are not a run of equal ops
    with pytest.raises(PlacementError, match="one broadcast per data rank"):
        analyze("zero1_allreduce", 10**9, MAX_LISTED_OPS + 1)
    assert main(["check", "zero1_allreduce", "--mesh", f"data={BIG}"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "priced up to 100,000 ranks" in err


ISSUE = ["--hidden", "1", "--heads", "1", "--seq", "1", "--vocab", "1"]


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "pp", "--mesh", "pipeline=1048576"],
        ["check", "pp", "--mesh", f"pipeline={BIG}"],
        ["table", "--layers", "1000000", *ISSUE, "--devices", "8", "--strategies", "zero3"],
        ["table", "--layers", str(BIG), *ISSUE, "--devices", str(BIG), "--strategies", "zero3"],
        ["plan", "--layers", str(BIG), *ISSUE, "--devices", "8"],
    ],
)
def test_the_issues_commands_answer(capsys, argv: list[str]) -> None:
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out and not captured.err


def test_table_json_of_10_to_the_6_layers_is_one_line_not_four_million_entries(capsys) -> None:
    argv = ["table", "--layers", "1000000", *ISSUE, "--devices", "8", "--strategies", "zero3"]
    assert main([*argv, "--json"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "2,000,003 operations" in err


def test_a_run_of_units_is_one_row_of_the_report_with_both_counts() -> None:
    rows = dict(analyze(get_strategy("zero3").with_(micro_batches=5), tiny(BIG), 8).lines())
    assert any(f"(×{BIG:,}, one per unit, ×5, one per micro-batch)" in v for v in rows.values())


def test_the_reliability_page_names_the_benchmark_of_every_largest_input_and_its_limit(
    tmp_path,
) -> None:
    """docs/reliability.md's sentence on plan, time, table and fit under 2 s: the benchmark it
    names exists, runs each of those commands, and prints that limit (``LIMIT_S``)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    path = root / "benchmarks" / "bench_issue43_bounds.py"
    spec = importlib.util.spec_from_file_location("bench_issue43_bounds", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    page = " ".join((root / "docs" / "reliability.md").read_text().split())
    assert f"in under {bench.LIMIT_S:g} s: `benchmarks/{path.name}`" in page
    commands = {argv[0] for _, argv in bench.commands(tmp_path)}
    assert commands == {"plan", "time", "table", "fit"}
