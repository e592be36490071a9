"""The run command on real ranks: its JSON reports equivalence and bytes, and two runs started at
once do not collide; the command's own process never imports torch (its launch runs in an agent,
``runtime/processes/agent.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

from placement_edu.cli import main

import pytest

pytestmark = pytest.mark.runtime


def test_cli_run_json_reports_equivalence_and_bytes(capsys):
    assert main(["run", "zero2", "--world-size", "2", "--steps", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["strategy"] == "zero2" and d["world_size"] == 2 and d["steps"] == 2
    assert d["equivalent"] is True and d["broken_conditions"] == []
    assert d["measured"][0]["grads"] == d["predicted"][0]["grads"] == 624 // 2 * 8
    assert len(d["ledger"]) == 2 and d["ledger"][0][0]["op"] == "broadcast"


#: ``placement-edu ...``, then whether the command's own process imported torch, on stderr.
COMMAND = (
    "import sys\n"
    "from placement_edu.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n"
    "sys.exit(code)"
)


def test_two_runs_started_at_once_do_not_collide_and_neither_command_imports_torch():
    cmd = [
        sys.executable,
        "-c",
        COMMAND,
        "run",
        "dp",
        "--world-size",
        "2",
        "--steps",
        "1",
        "--json",
    ]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-500:] for o in outs]
    assert all(json.loads(o[0])["equivalent"] for o in outs)
    assert [o[1] for o in outs] == ["torch imported: False\n"] * 2
