"""What a learner reads is for learners (issue 40, item 7): no sentence of a notebook speaks of the
project's CI, nbval or the machine the course was developed on. A machine fact is computed where
the notebook runs (00 prints this container's memory limit) or not stated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
#: Words about the project's machinery, not the learner's course.
MACHINERY = re.compile(
    r"\bCI\b|nbval|continuous integration|test suite|developed on|this course was built on|"
    r"\b\d+-core\b|\bon \d+ cores\b|share \d+ cores|torch \d+\.\d+ CPU",
    re.I,
)


def _read(cell: dict) -> str:
    text = "".join(cell["source"])
    if cell["cell_type"] == "code":  # a comment is read too
        text = "\n".join(line.partition("#")[2] for line in text.splitlines())
    return text


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_sentence_speaks_of_ci_nbval_or_the_development_machine(notebook):
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    said = [m.group(0) for c in cells for m in MACHINERY.finditer(_read(c))]
    assert said == []


def test_the_words_it_looks_for_are_found():
    for sentence in (
        "a preset fitted on the 2-core CPU machine this course was built on",
        "this cell is checked by nbval in CI",
        "4 ranks share 2 cores",
    ):
        assert MACHINERY.search(sentence)
    assert not MACHINERY.search("the ranks share this machine's few cores")
