"""What a learner reads is for learners (issue 40, item 7): no sentence of a notebook (its text, its
code's comments, what it prints) or of the course's pages (the website's guides) speaks of the
project's CI, nbval, pytest or the machine the course was developed on. A machine fact is computed
where the notebook runs (00 prints this container's memory limit, 01 this machine's cores) or not
stated. CONTRIBUTING.md, benchmarks/ and the instructors' pages are for contributors and
instructors, and say such things where they belong; the few sentences of a learner's page that
must name a machine are ``EXCEPTIONS``, each with its reason."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from placement_edu.course.site import GUIDES

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: The course's pages a learner reads beside the notebooks: the website's front page and guides,
#: and the docs folder's own front page (the theory is checked too; instructors' pages are not).
PAGES = [ROOT / "docs" / f"{page}.md" for page in ("index", "README", "theory", *GUIDES)]
#: Words about the project's machinery, not the learner's course.
MACHINERY = re.compile(
    r"\bCI\b|nbval|pytest|continuous integration|test suite|the suite\b|GitHub Actions|"
    r"developed on|development machine|this course was built on|the package's tests|"
    r"estimator tests|"
    r"\b\d+-core\b|\bon \d+ cores\b|share \d+ cores|torch \d+\.\d+ CPU",
    re.I,
)
#: (page, the words found, why a learner's page says them): a machine named where a measured
#: figure is given, as its source.
EXCEPTIONS = {
    ("calibration", "2-core"): "the stored preset this_machine: the machine it was measured on",
    ("calibration", "on 2 cores"): "that run's N = 4 ranks, read against its preset",
    ("measured", "on 2 cores"): "how long a benchmark that prints a table takes, and where",
}


def _read(cell: dict) -> str:
    """What a learner reads of ``cell``: markdown, a code cell's comments and what it prints."""
    text = "".join(cell["source"])
    if cell["cell_type"] == "code":  # a comment is read too
        text = "\n".join(line.partition("#")[2] for line in text.splitlines())
    for output in cell.get("outputs", []):
        text += "\n" + "".join(
            output.get("text", "") or output.get("data", {}).get("text/plain", "")
        )
    return text


#: A notebook whose owner has yet to rewrite a sentence found here (strict: the test fails once it
#: is rewritten, so the entry goes with it).
PENDING: dict[str, str] = {}


@pytest.mark.parametrize(
    "notebook",
    [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=PENDING[p.stem]))
        if p.stem in PENDING
        else p
        for p in NOTEBOOKS
    ],
    ids=lambda p: p.stem,
)
def test_no_sentence_speaks_of_ci_nbval_or_the_development_machine(notebook):
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    said = [m.group(0) for c in cells for m in MACHINERY.finditer(_read(c))]
    assert said == []


def test_the_words_it_looks_for_are_found():
    for sentence in (
        "a preset fitted on the 2-core CPU machine this course was built on",
        "this cell is checked by nbval in CI",
        "4 ranks share 2 cores",
        "the package's tests pin the same numbers",
    ):
        assert MACHINERY.search(sentence)
    assert not MACHINERY.search("the ranks share this machine's few cores")


def test_a_cells_printed_output_is_read_too():
    cell = {"cell_type": "code", "source": "x = 1", "outputs": [{"text": "checked by nbval\n"}]}
    assert MACHINERY.search(_read(cell))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_no_sentence_of_a_course_page_speaks_of_ci_nbval_or_the_development_machine(page):
    said = {m.group(0) for m in MACHINERY.finditer(page.read_text(encoding="utf-8"))}
    assert said - {words for stem, words in EXCEPTIONS if stem == page.stem} == set()


@pytest.mark.parametrize("exception", EXCEPTIONS, ids=" ".join)
def test_every_exception_is_still_said_where_it_is_named(exception):
    stem, words = exception
    assert words in (ROOT / "docs" / f"{stem}.md").read_text(encoding="utf-8")
