"""Exercises and the course's notebooks: every reference answer is right, a wrong answer is wrong
and says why, bad answers are refused by name; every notebook has at least three checked exercises,
a widget and checked outputs (issue 13)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from placement_edu.errors import PlacementError
from placement_edu.exercises import EXERCISES, check, solution

pytestmark = pytest.mark.fast

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_reference_answer_is_right_and_another_is_not(name):
    answer = solution(name)
    assert check(name, answer).right
    if isinstance(answer, bool):
        wrong = not answer
    elif isinstance(answer, str):
        wrong = answer + " not"
    else:
        wrong = Fraction(answer) * 2 + 1
    verdict = check(name, wrong)
    assert not verdict.right and verdict.message


def test_a_known_mistake_is_explained_and_bad_answers_are_refused():
    assert "ZeroRedundancyOptimizer" in check("zero1-comm", 3).message
    assert check("zero2-memory", 16.64).right               # within the stated 0.1%
    with pytest.raises(PlacementError, match="takes a number in Ψ, got 'two'"):
        check("zero1-comm", "two")
    with pytest.raises(PlacementError, match="unknown exercise 'nope'"):
        check("nope", 1)
    with pytest.raises(PlacementError, match="got nan"):
        check("zero1-comm", float("nan"))


def _sources(notebook: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_has_three_checked_exercises_a_widget_and_checked_outputs(notebook):
    code = _sources(notebook)
    checked = {name for name in EXERCISES for cell in code if f'check("{name}"' in cell}
    assert len(checked) >= 3, f"{notebook.name}: exercises checked: {sorted(checked)}"
    assert any("NBVAL_CHECK_OUTPUT" in cell for cell in code)
    assert any("Explorer" in cell or "Widget" in cell or "Table(" in cell for cell in code), "no widget"
