"""Runtime pieces that need no processes: activation counts, the reference, the command line."""

from __future__ import annotations

import json

import pytest
import torch

from placement_edu.cli import main
from placement_edu.runtime import RunConfig
from placement_edu.runtime import flat
from placement_edu.runtime.adam import Adam
from placement_edu.runtime.memtrack import MemoryLedger
from placement_edu.runtime.reference import reference_run
from placement_edu.runtime.toy import (TinyMLP, TinyTransformer, init_params, loss_fn, make_batch,
                                       mlp_forward, transformer_forward)


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
    assert _saved_bytes(mlp, lambda p, x: mlp_forward(p, x, range(4))) == mlp.activation_elements(4) * 8


def test_transformer_activations_counted_by_saved_tensor_hooks_equal_the_formula():
    block = TinyTransformer()
    replicated, split = block.activation_elements(4, 1)
    assert _saved_bytes(block, lambda p, x: transformer_forward(p, x, block.heads)) == (replicated + split) * 8


def test_the_reference_is_deterministic():
    a = reference_run(TinyMLP(), 2, 16, 0, torch.float64, Adam())
    b = reference_run(TinyMLP(), 2, 16, 0, torch.float64, Adam())
    assert all(torch.equal(a[1][n], b[1][n]) for n in a[1])


def test_a_fault_that_does_not_apply_is_refused_before_any_process_starts(capsys):
    assert main(["run", "zero3", "--world-size", "2", "--fault", "skip-param-sync"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not apply to zero3" in err


@pytest.mark.parametrize("argv, says", [
    (["run", "zero9", "--world-size", "2"], "unknown strategy 'zero9'"),
    (["run", "zero1xtpxpp", "--world-size", "8"], "no engine for 'zero1×tp×pp'"),
    (["run", "dp", "--world-size", "3"], "does not split into 3 data ranks"),
    (["run", "dpxtp", "--world-size", "4", "--mesh", "data=4"], "tensor"),
    (["run", "dp", "--world-size", "2", "--fault", "nope"], "unknown fault"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_cli_run_json_reports_equivalence_and_bytes(capsys):
    assert main(["run", "zero2", "--world-size", "2", "--steps", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["strategy"] == "zero2" and d["world_size"] == 2 and d["steps"] == 2
    assert d["equivalent"] is True and d["broken_conditions"] == []
    assert d["measured"][0]["grads"] == d["predicted"][0]["grads"] == 624 // 2 * 8
    assert len(d["ledger"]) == 2 and d["ledger"][0][0]["op"] == "broadcast"


def test_config_defaults_put_compositions_on_a_two_by_two_mesh():
    assert str(RunConfig("dp×tp", 4).resolved_mesh()) == "data=2,tensor=2"


def test_world_size_one_is_refused_because_it_is_the_reference(capsys):
    assert main(["run", "dp", "--world-size", "1"]) == 2
    assert "at least 2" in capsys.readouterr().err


def test_two_runs_started_at_once_do_not_collide():
    import subprocess
    import sys
    cmd = [sys.executable, "-m", "placement_edu.cli", "run", "dp", "--world-size", "2", "--steps", "1", "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-500:] for o in outs]
    assert all(json.loads(o[0])["equivalent"] for o in outs)
