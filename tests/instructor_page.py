"""docs/instructor.md, written from the exercises: for each notebook's exercises, the question, the
worked answer, and the wrong answers learners give most -- each exercise's named mistakes and the
slips every number invites (×2 and ÷2, ×N and ÷N where the question names N, the answer in another
unit, a percentage for a ratio) -- with what ``check_answer`` replies to each, word for word.

``python -m tests.instructor_page --write`` rewrites the page; tests/test_instructor_page.py fails
when it is not what this writes (an exercise, a mistake or a reply changed, and the page did not).
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

from placement_edu.course import notebooks

# (``slips``: the checker's own slips, one definition)
from placement_edu.exercises import EXERCISES, Exercise, check_answer, slips, solution
from tests.normalise_notebooks import CHECKED

PAGE = Path(__file__).resolve().parents[1] / "docs" / "instructor.md"

HEAD = """# The exercises: wrong answers, and what the checker replies

Generated from the exercises (`python -m tests.instructor_page --write`; a test fails when this
page is not current). For each exercise of each notebook: the question as the notebook asks it,
the worked answer `reveal(name)` shows, and the wrong answers learners give most -- the exercise's
named mistakes, then the slips any number invites (a factor 2, a factor N where the question names
N devices, the answer in another unit, a ratio as a percentage) -- each with `check_answer`'s
reply, word for word. A number is judged at the precision the learner typed (never fewer than 2
significant figures, nor fewer than the question asks), so each wrong answer below is typed to 4
significant figures, or exactly where the question asks for an exact count. The course's page for
instructors is [instructors.md](instructors.md).
"""


def _typed(exercise: Exercise, value: Fraction) -> int | float | str:
    """``value`` as a learner types it: a whole number as it is, else 4 significant figures (all
    of them where the question asks for an exact answer)."""
    if value.denominator == 1:
        return value.numerator
    if exercise.exact:
        return float(value)
    return float(f"{float(value):.4g}")


def _wrong(exercise: Exercise) -> list[object]:
    """The wrong answers to show: the named mistakes, then the slips of a number answer."""
    expected = solution(exercise.name)
    answers: list[object] = [m for m, _ in exercise.mistakes]
    if isinstance(expected, (bool, str)) or not expected:
        return answers
    right = Fraction(expected)
    for factor, _ in slips(exercise, right):
        answers.append(_typed(exercise, right * factor))
    seen: list[object] = []
    for answer in answers:
        shown = _typed(exercise, Fraction(answer)) if isinstance(answer, Fraction) else answer
        if shown not in seen and not check_answer(exercise.name, shown).right:
            seen.append(shown)
    return seen


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _answer(value: object) -> str:
    """A value as the learner would type it in the cell: 2_000_000_000, 16.640625, "SG"."""
    if isinstance(value, Fraction):
        value = value.numerator if value.denominator == 1 else float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"`{value:_}`"
    return f"`{value!r}`"


def _paragraph(text: str) -> str:
    return textwrap.fill(
        " ".join(text.split()), 100, break_long_words=False, break_on_hyphens=False
    )


def section(notebook: Path) -> list[str]:
    """The page's lines for one notebook's exercises, in the order it asks them."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    names = [
        n for c in cells if c["cell_type"] == "code" for n in CHECKED.findall("".join(c["source"]))
    ]
    if not names:
        return []
    lines = [f"## {notebook.stem}", ""]
    for k, name in enumerate(names, 1):
        exercise = EXERCISES[name]
        unit = f" {exercise.unit}" if exercise.unit else ""
        lines += [
            f"### Exercise {k} · `{name}`",
            "",
            _paragraph(exercise.question),
            "",
            _paragraph(f"**Answer:** {_answer(solution(name))}{unit}. {exercise.why}"),
            "",
            "| a learner answers | the checker replies |",
            "|---|---|",
        ]
        lines += [
            f"| {_answer(wrong)} | {_cell(check_answer(name, wrong).message)} |"
            for wrong in _wrong(exercise)
        ]
        lines.append("")
    return lines


def page() -> str:
    lines = [HEAD]
    for notebook in notebooks():
        lines += section(notebook)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip() + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.instructor_page --write")
    PAGE.write_text(page(), encoding="utf-8")
    print(f"wrote {PAGE}")
