"""Issue 41 item 8: the suite in stages (``tests/stages.py``), the fast tier first and a failure
there stopping the run; no ``-n`` in pyproject's addopts, so ``pytest -p no:xdist`` runs."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests import stages

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent


def test_every_tier_runs_in_exactly_one_stage_fast_first() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    tiers = {m.split(":")[0] for m in pyproject["ini_options"]["markers"]} - {"slow"}
    selected = [set(expr.split(" or ")) for expr in stages.STAGES.values()]
    assert sorted(t for s in selected for t in s) == sorted(tiers)  # each tier once
    assert list(stages.STAGES)[0] == "fast" and list(stages.STAGES)[-1] == "browser"
    assert "-n" not in pyproject["ini_options"]["addopts"].split()


def test_a_failing_stage_stops_the_run(monkeypatch, capsys) -> None:
    ran: list[list[str]] = []

    def call(argv: list[str]) -> int:
        ran.append(argv)
        return 1 if argv[argv.index("-m", 3) + 1] == "fast" else 0

    monkeypatch.setattr(stages.subprocess, "call", call)
    assert stages.main([]) == 1
    assert len(ran) == 1 and "stage fast failed; the later stages did not run" in (
        capsys.readouterr().out
    )
    ran.clear()
    # whole and passing: the fast stage, then the rest in one run (the browser beside the ranks)
    monkeypatch.setattr(stages.subprocess, "call", lambda argv: ran.append(argv) or 0)
    assert stages.main([]) == 0
    assert [r[r.index("-m", 3) + 1] for r in ran] == ["fast", "runtime or notebook or browser"]
    ran.clear()
    assert stages.main(["runtime", "browser", "--", "-x"]) == 0
    assert [r[r.index("-m", 3) + 1] for r in ran] == ["runtime or notebook", "browser"]
    assert all(r[-1] == "-x" for r in ran)
    # every core for the fast stage; one worker more than the cores where the ranks wait
    assert stages.command(("fast",), [])[5:7] == ["-n", "auto"]
    assert stages.command(("runtime",), [])[5:7] == ["-n", str((os.cpu_count() or 1) + 1)]
    assert stages.main(["fats"]) == 2
    assert "unknown stage 'fats'; the stages: fast, runtime, browser" in capsys.readouterr().err


def test_pytest_runs_without_xdist() -> None:
    """With ``-n auto`` in addopts, ``pytest -p no:xdist`` stopped on an unknown option."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider"]
        + ["--collect-only", "-q", "tests/test_tiers.py"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0 and "test_every_test_file_names_exactly_one_tier" in done.stdout


def test_readme_ci_and_contributing_run_the_stages() -> None:
    command = ".venv/bin/python -m tests.stages"
    assert command in (ROOT / "README.md").read_text()
    assert command in (ROOT / ".ci" / "run").read_text()
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    assert f"{command} fast" in contributing and f"{command} runtime browser -- -x" in contributing
