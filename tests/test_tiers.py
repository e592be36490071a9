"""Every test file names exactly one tier, so ``pytest -m fast`` leaves nothing pure out and lets
nothing slow in (conftest.py says what each tier means)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

TESTS = Path(__file__).resolve().parent
TIERS = {"fast", "runtime", "browser"}


def module_tiers(path: Path) -> list[str]:
    """The tier markers named by the module-level ``pytestmark = pytest.mark.X`` of ``path``."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == "pytestmark" for t in node.targets
        ):
            marks = (
                node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            )
            found += [m.attr for m in marks if isinstance(m, ast.Attribute) and m.attr in TIERS]
    return found


@pytest.mark.parametrize("path", sorted(TESTS.rglob("test_*.py")), ids=lambda p: p.name)
def test_every_test_file_names_exactly_one_tier(path: Path) -> None:
    assert len(module_tiers(path)) == 1, (
        f"{path.name}: add one of pytestmark = pytest.mark.{sorted(TIERS)}"
    )


def test_the_tier_reader_sees_a_missing_and_a_double_tier(tmp_path: Path) -> None:
    (tmp_path / "none.py").write_text("import pytest\n")
    (tmp_path / "two.py").write_text(
        "import pytest\npytestmark = [pytest.mark.fast, pytest.mark.runtime]\n"
    )
    assert module_tiers(tmp_path / "none.py") == [] and len(module_tiers(tmp_path / "two.py")) == 2


def test_notebook_cells_are_the_notebook_tier() -> None:
    root = TESTS.parent
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "notebook",
            "-p",
            "no:cacheprovider",
            "notebooks/00_start_here.ipynb",
            "tests/test_core.py",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    ).stdout
    cells = [line for line in listed.splitlines() if "::" in line]
    assert cells and all(
        line.startswith("notebooks/00_start_here.ipynb::Cell") for line in cells
    ), listed[-2000:]
