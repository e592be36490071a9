"""The run command on real ranks: its JSON reports equivalence and bytes, and two runs started at
once do not collide."""

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


def test_two_runs_started_at_once_do_not_collide():
    cmd = [
        sys.executable,
        "-m",
        "placement_edu.cli",
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
