"""Runtime pieces that need no processes: activation counts, the reference, the command line."""

from __future__ import annotations

import os
import re
import signal

import pytest
import torch

from placement_edu.cli import main
from placement_edu.runtime import RunConfig
from placement_edu.runtime.engines import flat
from placement_edu.runtime.engines.adam import Adam
from placement_edu.runtime.measurement.memtrack import MemoryLedger
from placement_edu.runtime.engines.reference import Reference, rounding_floor
from placement_edu.runtime.engines.toy import (
    TinyMLP,
    TinyTransformer,
    init_params,
    loss_fn,
    make_batch,
    mlp_forward,
    transformer_forward,
)

pytestmark = pytest.mark.fast


def _saved_bytes(module, forward) -> int:
    shapes = [(n, tuple(p.shape)) for n, p in module.named_parameters()]
    leaf = flat.flatten(init_params(module, 0, torch.float64), shapes).requires_grad_()
    x, y = make_batch(0, module, 4, 0, torch.float64)
    mem = MemoryLedger()
    mem.parameters_live_in(leaf)
    with mem.forward(0):
        loss = loss_fn(forward(flat.views(leaf, shapes), x), y)
    loss.backward()
    return mem.to_dict()["activations_peak"]


def test_mlp_activations_counted_by_saved_tensor_hooks_equal_the_formula():
    mlp = TinyMLP(width=12, layers=4)
    assert (
        _saved_bytes(mlp, lambda p, x: mlp_forward(p, x, range(4)))
        == mlp.activation_elements(4) * 8
    )


def test_transformer_activations_counted_by_saved_tensor_hooks_equal_the_formula():
    block = TinyTransformer()
    replicated, split = block.activation_elements(4, 1)
    assert (
        _saved_bytes(block, lambda p, x: transformer_forward(p, x, block.heads))
        == (replicated + split) * 8
    )


def test_the_reference_is_deterministic():
    a, b = (Reference(TinyMLP(), 16, 0, torch.float64, Adam()) for _ in range(2))
    for step in range(2):
        a.step(step)
        b.step(step)
    assert all(torch.equal(a.params[n], b.params[n]) for n in a.params)


def test_the_reference_streams_one_step_at_a_time_and_keeps_no_history():
    # Issue 24 (item 3): the whole history was computed before the first step (O(steps) memory).
    ref = Reference(TinyMLP(), 16, 0, torch.float64, Adam())
    held = [ref.flat, ref.m, ref.v]
    for step in range(5):
        ref.step(step)
    assert [ref.flat, ref.m, ref.v] == held  # the same three buffers, updated in place
    assert ref.flat.grad is None and ref.steps == 5
    with pytest.raises(ValueError, match="at step 5, not 7"):
        ref.step(7)


@pytest.mark.parametrize("module", [TinyMLP(), TinyTransformer()], ids=["mlp", "transformer"])
def test_the_twin_reference_differs_from_the_reference_by_rounding_only(module):
    ref, twin = (
        Reference(module, 16, 0, torch.float64, Adam(), reversed_rows=r) for r in (False, True)
    )
    floors = []
    for step in range(20):
        ref.step(step)
        twin.step(step)
        floors.append(rounding_floor(ref, twin))
    assert 0 < max(floors) < 1e-13  # another summation order: the last bits, not zero


def test_a_fault_that_does_not_apply_is_refused_before_any_process_starts(capsys):
    assert main(["run", "zero3", "--world-size", "2", "--fault", "skip-param-sync"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not apply to zero3" in err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "zero9", "--world-size", "2"], "unknown strategy 'zero9'"),
        (["run", "zero1xtpxpp", "--world-size", "8"], "the runtime cannot execute zero1×tp×pp"),
        (["run", "dp", "--world-size", "3"], "does not split into 3 data ranks"),
        (["run", "dpxtp", "--world-size", "4", "--mesh", "data=4"], "tensor"),
        (["run", "dp", "--world-size", "2", "--fault", "nope"], "unknown fault"),
        # Nothing is split on tensor: refused by the core before any process starts (once: 4
        # processes died on a bare AssertionError).
        (
            ["run", "dp", "--world-size", "4", "--mesh", "data=2,tensor=2"],
            "keeps params whole on the tensor axis",
        ),
        (
            ["run", "dp", "--world-size", "4", "--micro-batches", "2"],
            "only the pipeline engine splits a step",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_config_defaults_put_compositions_on_a_two_by_two_mesh():
    assert str(RunConfig("dp×tp", 4).resolved_mesh()) == "data=2,tensor=2"


def test_world_size_one_is_refused_because_it_is_the_reference(capsys):
    assert main(["run", "dp", "--world-size", "1"]) == 2
    assert "at least 2" in capsys.readouterr().err


def test_engines_are_chosen_by_placement_not_by_name():
    from placement_edu import Mesh, Placement, Strategy, get_strategy
    from placement_edu.runtime.engines import engine_for
    from placement_edu.runtime.engines.zero1 import Zero1
    from placement_edu.runtime.engines.zero1_allreduce import Zero1AllReduce
    from placement_edu.runtime.engines.zero2 import Zero2
    from placement_edu.runtime.engines.zero3 import Zero3

    data4 = Mesh.of(data=4)
    assert engine_for(Strategy("mine", Placement(grads="S", optimizer="S")), data4) is Zero2
    assert (
        engine_for(
            Strategy(
                "mine",
                Placement(params="SG", grads="S", optimizer="S"),
                reshard_after_forward=False,
            ),
            data4,
        )
        is Zero3
    )
    zero1 = get_strategy("zero1")
    assert engine_for(zero1, data4) is Zero1
    assert engine_for(zero1.with_(owner_update="allreduce_broadcast"), data4) is Zero1AllReduce
    assert engine_for(get_strategy("zero1_allreduce"), data4) is Zero1AllReduce


@pytest.mark.parametrize(
    "strategy, mesh, says",
    [
        (("zero3", {"sequence_parallel": True}), "data=4", "sequence parallelism"),
        (("zero2", {"shard_dims": {"data": "dim0"}}), "data=4", "shard_dims"),
        (("zero1×tp×pp", {}), "data=2,tensor=2,pipeline=2", "at most one axis besides data"),
        (("hsdp", {}), "replica=2,data=2,tensor=2", "at most one axis besides data"),
    ],
)
def test_a_placement_no_engine_executes_is_refused_with_the_reason(strategy, mesh, says):
    from placement_edu import Mesh, PlacementError, get_strategy
    from placement_edu.runtime.engines import RUNNABLE, engine_for

    name, changes = strategy
    with pytest.raises(PlacementError) as error:
        engine_for(get_strategy(name).with_(**changes), Mesh.parse(mesh))
    assert says in str(error.value) and ", ".join(RUNNABLE) in str(error.value)


def test_a_run_of_a_user_defined_strategy_is_labelled_with_its_name():
    from placement_edu import Placement, Strategy

    config = RunConfig(Strategy("my_zero2", Placement(grads="S", optimizer="S")), 4)
    config.validate()
    assert config.label == "my_zero2 on data=4"


def test_the_runtime_widget_offers_only_world_sizes_the_strategy_runs_on():
    from placement_edu.presentation.runtime_explorer import RuntimeExplorer

    assert RuntimeExplorer.world_sizes("zero3") == [2, 4]
    assert RuntimeExplorer.world_sizes("dp×tp") == [4]  # data=2 x tensor=2
    assert RuntimeExplorer.world_sizes("hsdp") == [4]  # replica=2 x data=2


def test_progress_reads_rank_0s_line_and_treats_a_half_written_file_as_starting(tmp_path):
    from placement_edu.runtime.processes import progress

    path = str(tmp_path / "progress")
    starting = progress.read(path, 1.5, 4, ranks_ready=2)  # no file yet
    assert (starting.text, starting.fraction) == ("starting 4 ranks: 2 of 4 up", 0.0)
    (tmp_path / "progress").write_text("1 2 3")  # half written
    assert not progress.read(path, 1.6, 4).started
    progress.write(path, 1, 2, 3, 5, "zero3 on data=4")  # run 2 of 2, step 3 of 5
    now = progress.read(path, 1.7, 4, ranks_ready=4)
    assert now.text == "zero3 on data=4: step 3/5 (run 2 of 2)"
    assert now.fraction == (1 + 3 / 5) / 2


def test_a_stopped_run_says_where_it_was_and_a_calibration_counts_probes(tmp_path):
    # once: calibrate's Ctrl-C line always said "while they were starting" (no probe was written)
    from placement_edu.runtime.processes import progress
    from placement_edu.runtime.processes.explain import interrupted

    assert interrupted(signal.SIGINT, str(tmp_path), 2) == (
        "interrupted by SIGINT: stopped 2 ranks while they were starting"
    )
    progress.write(str(tmp_path / "progress"), 0, 1, 5, 22, "calibration on 2 ranks", "probe")
    assert progress.read(str(tmp_path / "progress"), 4.0, 2).text == (
        "calibration on 2 ranks: probe 5/22"
    )
    assert interrupted(signal.SIGINT, str(tmp_path), 2) == (
        "interrupted by SIGINT: stopped 2 ranks of calibration on 2 ranks after probe 5 of 22"
    )


def test_a_calibrating_rank_writes_each_probe_it_has_done(tmp_path):
    import torch.distributed as dist

    from placement_edu.runtime.processes import progress
    from placement_edu.runtime.calibration.probes import Calibration, run_rank

    job = Calibration(2, sizes=(1024, 2048, 4096), repeats=1, warmup=0, ops=("all_reduce",))
    path = str(tmp_path / "progress")
    dist.init_process_group(
        "gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1
    )
    try:
        times = run_rank(job, None, [0], path)
    finally:
        dist.destroy_process_group()
    assert times is not None and len(times["ops"]) == 3 and len(times["compute"]) == 2
    # 3 sizes of all_reduce, then the matmul and the toy step: 5 probes
    assert progress.read(path, 1.0, 2).text == "calibration on 2 ranks: probe 5/5"


# --- issue 24, item 2: the verdict separates rounding from a broken condition ------------------
def _drift(steps: int, end: float) -> list[float]:
    """A rounding floor growing as measured ones do: exponentially, from 1e-16 to ``end``."""
    return [1e-16 * (end / 1e-16) ** (k / (steps - 1)) for k in range(steps)]


def test_rounding_drift_within_a_multiple_of_the_floor_is_equivalent():
    from placement_edu.runtime.verdict import ROUNDING_MULTIPLE, equivalent, tolerances

    # dp on 2 ranks at 9,000 steps measured 1.2e-09 against a floor of 6.3e-10: the fixed 1e-10
    # called it broken.
    floor = _drift(9000, 6.3e-10)
    deviation = [2 * f for f in floor]
    tolerance = tolerances(1e-10, floor, len(deviation))
    assert max(deviation) > 1e-10 and equivalent(deviation, tolerance)
    assert tolerance[0] == 1e-10 + ROUNDING_MULTIPLE * 1e-16
    assert tolerance[-1] == pytest.approx(1e-10 + ROUNDING_MULTIPLE * 6.3e-10)
    assert equivalent([tolerance[0]], tolerance[:1])  # at the tolerance: still rounding
    assert not equivalent([ROUNDING_MULTIPLE * 2 * f + 1e-10 for f in floor], tolerance)


def test_a_fault_is_broken_however_far_rounding_carries_the_floor_by_the_end():
    from placement_edu.runtime.verdict import decisive_step, equivalent, tolerances

    # Rounding alone drives the two references O(1) apart by the end of a very long run; a fault
    # shows from its first step, when the floor is at the last bit.
    floor = _drift(10**5, 1.0)
    deviation = [1e-4] * len(floor)
    tolerance = tolerances(1e-10, floor, len(floor))
    assert max(deviation) < tolerance[-1] and not equivalent(deviation, tolerance)
    assert decisive_step(deviation, tolerance) == 0


def test_the_tolerance_keeps_the_largest_floor_so_far_and_needs_no_floor():
    from placement_edu.runtime.verdict import ROUNDING_MULTIPLE, tolerances

    m = ROUNDING_MULTIPLE
    assert tolerances(1e-10, [1e-12, 0.0, 3e-12], 3) == [
        1e-10 + m * 1e-12,
        1e-10 + m * 1e-12,
        1e-10 + m * 3e-12,
    ]
    assert tolerances(1e-4, [], 2) == [1e-4, 1e-4]  # a result built by hand: the base


def test_the_report_prints_the_tolerance_beside_the_deviation_and_one_short_per_step_line():
    from placement_edu.runtime.result import RunResult, predict

    config = RunConfig("dp", 2, steps=9000)
    floor = _drift(9000, 6.3e-10)
    result = RunResult(config, [2 * f for f in floor], predict(config), predict(config), [], {})
    assert not result.equivalent  # no floor given: the base tolerance alone
    result.floor = floor
    assert result.equivalent and result.tolerance == result.tolerances[-1] > 1e-10
    lines = re.split(r"\n(?! )", str(result))  # a line wrapped at 100 characters, joined
    lines = [" ".join(line.split()) for line in lines]
    assert "tolerance 1.0e-08 (= 1e-10 + 16 × rounding floor 6.3e-10)" in lines[1]
    assert lines[1].endswith("-> equivalent to one process")
    assert lines[2].startswith("per step: 2.0e-16, 2.0e-16, 2.0e-16, …, ") and len(lines[2]) < 120
    assert "(9,000 steps; max 1.3e-09 at step 9,000)" in lines[2]
    d = result.to_dict()
    assert d["tolerance"] == result.tolerance and d["rounding_floor"] == floor[-1]


def test_the_api_refuses_more_steps_than_the_command_line_takes():
    from placement_edu.errors import MAX_STEPS, PlacementError

    with pytest.raises(PlacementError, match=r"steps must be at most 10\^6 .* got 1,000,001"):
        RunConfig("dp", 2, steps=MAX_STEPS + 1).validate()
    RunConfig("dp", 2, steps=MAX_STEPS).validate()
    assert main(["run", "dp", "--world-size", "2", "--steps", str(MAX_STEPS + 1)]) == 2


def test_the_ledger_keeps_a_step_only_when_it_differs_from_the_step_before():
    # Issue 24 (item 3): one dict per entry per step grew a rank by ~1.6 KB a step.
    from placement_edu.runtime.measurement.comm import Comm
    from placement_edu.runtime.result import expand_ledger

    comm, t = Comm({}, 1.0), torch.zeros(4, dtype=torch.float64)
    full = []

    def record(step: int, phase: str, op: str) -> None:
        comm.at(step, phase)
        comm._record(op, "grads", "data", 2, t)
        full.append((step, phase, op))

    record(-1, "startup", "broadcast")
    for step in range(9):
        record(step, "backward", "all_reduce" if step not in (5, 6) else "reduce_scatter")
    entries, repeats = comm.ledger()
    assert [(e["step"], e["op"]) for e in entries] == [
        (-1, "broadcast"),
        (0, "all_reduce"),
        (5, "reduce_scatter"),
        (7, "all_reduce"),
    ]
    assert repeats == [[1, 4], [6, 6], [8, 8]]
    assert [(e["step"], e["phase"], e["op"]) for e in expand_ledger(entries, repeats)] == full


def test_a_rank_whose_launch_let_go_of_its_semaphores_ends_without_a_traceback(
    capsys, monkeypatch
) -> None:
    # Ctrl-C between the forkserver's fork and the launcher learning the pid: the launcher stops the
    # ranks it knows and removes the run's semaphores; the rank it did not know fails to rebuild one
    # (FileNotFoundError in SemLock.__setstate__), and the server's excepthook prints nothing for
    # that one case (CI once showed its traceback under the one-line 'interrupted by SIGINT').
    import multiprocessing.synchronize as synchronize
    import sys
    from multiprocessing import spawn

    # (the module sets the server's hooks when imported: put this process's back after the test)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(spawn, "prepare", spawn.prepare)
    from placement_edu.runtime.processes.server_setup import quiet_if_its_launch_is_gone

    gone = synchronize.Lock.__new__(synchronize.Lock)
    with pytest.raises(FileNotFoundError) as removed:
        gone.__setstate__((0, 1, 1, "/mp-placement-edu-removed"))
    quiet_if_its_launch_is_gone(removed.type, removed.value, removed.tb)
    assert capsys.readouterr().err == ""
    with pytest.raises(FileNotFoundError) as other:  # any other failure: printed as before
        open("/placement-edu-no-such-file")
    quiet_if_its_launch_is_gone(other.type, other.value, other.tb)
    assert "FileNotFoundError" in capsys.readouterr().err


def test_a_rank_failure_is_a_checked_field_and_fails_only_its_rank_at_its_moment(
    tmp_path, monkeypatch
):
    # Issue 41 item 8: fault injection is a documented type, not a test hook's dict.
    from placement_edu.errors import PlacementError
    from placement_edu.runtime.processes.failure import KINDS, RankFailure

    for bad, words in (
        ({"kind": "explode"}, "failure kind 'explode': give one of raise, hang, kill, freeze"),
        ({"at": "end"}, "failure at 'end': give one of met, start"),
        ({"rank": -1}, "failure rank -1: give a whole number >= 0"),
    ):
        with pytest.raises(PlacementError, match=f"^{re.escape(words)}$"):
            RankFailure(**bad)
    assert set(KINDS) == {"raise", "hang", "kill", "freeze"}
    told = RankFailure("raise", rank=2, at="start", pid_dir=str(tmp_path))
    monkeypatch.setenv("RANK", "2")
    told.inject("met", 1.0)  # not its moment: nothing, not even the pid file
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="injected failure: this rank raised on purpose"):
        told.inject("start", 1.0)
    monkeypatch.setenv("RANK", "1")
    told.inject("start", 1.0)  # another rank: writes its pid, does not fail
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]
    assert (tmp_path / "1").read_text() == str(os.getpid())
