"""Every figure the package printed when these literals were written, printed again unchanged.

The grid (``tests/golden/cases.py``): ``table --json`` for every one-axis strategy at N = 8 and 64
under four precisions, three transformer shapes and recomputation policies, every composition on
its mesh (sequence parallelism, 8 micro-batches, 10^6 micro-batches), ``check`` of every strategy
and fault, ``plan``, the three ``estimate`` conventions, concrete models under each sharding rule
(ranks 0 and 2 of 3), and step times on two hardware presets. The expected outputs are literals in
``tests/golden/figures.json``, never a second run of the same code. A refactor leaves every one
of them as it was; changing a figure on purpose rewrites the file
(``python -m tests.golden.cases --write``) in the same commit, saying why.
"""

from __future__ import annotations

import difflib
import json

import pytest

from tests.golden.cases import GOLDEN, all_cases

pytestmark = pytest.mark.fast

EXPECTED: dict[str, str] = json.loads(GOLDEN.read_text())
CASES = all_cases()


def test_the_grid_and_the_literals_name_the_same_cases():
    assert sorted(CASES) == sorted(EXPECTED)
    assert len(EXPECTED) >= 170


def test_the_readme_table_is_among_the_literals():
    # SPEC §3's check figures, Ψ = 7.5e9, N = 64: 120, 31.40625, 16.640625, 1.875 GB (ZeRO Table 1)
    text = EXPECTED["cli table --params 7.5e9 --devices 64"]
    for figure in ("120 GB", "31.40625 GB", "16.640625 GB", "1.875 GB"):
        assert figure in text


@pytest.mark.parametrize("name", sorted(CASES), ids=str)
def test_figure_unchanged(name: str) -> None:
    got, want = CASES[name](), EXPECTED[name]
    if got != want:
        diff = difflib.unified_diff(
            want.splitlines(), got.splitlines(), "golden", "now", lineterm="", n=1
        )
        pytest.fail(f"{name}: the figures changed\n" + "\n".join(list(diff)[:60]))
