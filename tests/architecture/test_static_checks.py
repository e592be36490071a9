"""Lint, layout and types, in the suite: ruff (check and format) over the package, the tests and
the benchmarks, and mypy over the files pyproject.toml's ``[tool.mypy]`` lists. Both configured in
pyproject.toml."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.skipif(
    shutil.which("ruff", path=str(Path(sys.executable).parent)) is None,
    reason="ruff is not installed (it is in the test extra)",
)
def test_ruff_finds_nothing():
    done = _run("ruff", "check", "placement_edu", "tests", "benchmarks", "conftest.py")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.skipif(
    shutil.which("ruff", path=str(Path(sys.executable).parent)) is None,
    reason="ruff is not installed (it is in the test extra)",
)
def test_the_code_is_as_ruff_formats_it():
    """``ruff format`` (configured in pyproject.toml) leaves every file as it is."""
    done = _run("ruff", "format", "--check", "placement_edu", "tests", "benchmarks", "conftest.py")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def _mypy_cache() -> Path:
    """mypy's incremental cache, kept outside the clone (as pip's cache and the activation profiles
    are, ``runtime/measurement/profiles.py``): mypy checks every file against it by its contents'
    hash, so a
    fresh clone re-checks what changed since the last run on this machine -- under a second --
    instead of all of it and torch's stubs (about 30 s on 2 cores)."""
    home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(home) / "placement_edu" / "mypy"


def test_mypy_finds_nothing_in_the_core():
    pytest.importorskip("mypy", reason="mypy is not installed (it is in the test extra)")
    done = _run("mypy", "--cache-dir", str(_mypy_cache()))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def private_imports(source: str) -> list[str]:
    """The package's private names (``_x``) that ``source`` imports: ``from placement_edu... import
    _x``, or a module path with a private part."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("placement_edu"):
            module = node.module or ""
            named = [a.name for a in node.names if a.name.startswith("_")]
            parts = [p for p in module.split(".") if p.startswith("_") and p != "__init__"]
            found += [f"{module}.{name}" for name in named + parts]
    return found


def test_the_tests_reach_the_package_through_its_public_names() -> None:
    """A test exercises what a user can call: no test file imports a private name (issue 41, item
    8: the public seams replaced them)."""
    seen = {
        str(path.relative_to(ROOT)): private_imports(path.read_text())
        for path in sorted((ROOT / "tests").rglob("*.py"))
    }
    assert {path: names for path, names in seen.items() if names} == {}
    assert private_imports("from placement_edu.axes import _validate, validate") == [
        "placement_edu.axes._validate"
    ]
