"""What a learner meets first in the notebooks (issue 38, items 3 and 6): saved as
``tests/normalise_notebooks.normalise`` leaves them (ipykernel's kernelspec, so JupyterLab does not
mark them modified on open; every heading a slide; every "SPEC §n" a link into the theory), 00's
header speaking to the learner (the two commands, the CPU-torch note, Binder, the website, what SPEC
is), no sentence for CI, no exercise placeholder that is a right answer, and the lecture path 00
describes being the one the lecture deck is made of."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from placement_edu.course import binder_url
from placement_edu.course.slides import (
    LECTURE,
    heading,
    lecture_minutes,
    lecture_path,
    section,
    slide_type,
)
from placement_edu.exercises import check_answer
from tests.normalise_notebooks import KERNELSPEC, heading_lines, link_spec, normalise

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
START = ROOT / "notebooks" / "00_start_here.ipynb"


def _notebook(path: Path) -> dict:
    """A notebook as nbformat reads it: each source one string."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        cell["source"] = "".join(cell["source"])
    return notebook


def _markdown(path: Path) -> list[str]:
    return [c["source"] for c in _notebook(path)["cells"] if c["cell_type"] == "markdown"]


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_is_saved_as_the_normaliser_leaves_it(path):
    notebook = _notebook(path)
    assert normalise(notebook) == notebook, "run: python -m tests.normalise_notebooks"


def test_the_kernelspec_is_ipykernels_own_so_jupyterlab_leaves_a_notebook_unmodified():
    # JupyterLab writes the running kernel's spec into the notebook it opens; "Python 3" (the
    # notebooks' old display name) against ipykernel's "Python 3 (ipykernel)" marked every
    # notebook modified on open (tests/test_browser.py opens each and checks it is not).
    kernelspec = pytest.importorskip("ipykernel.kernelspec")
    spec = kernelspec.get_kernel_dict()
    assert KERNELSPEC == {
        "display_name": spec["display_name"],
        "language": spec["language"],
        "name": kernelspec.KERNEL_NAME,
    }
    assert {json.dumps(_notebook(p)["metadata"]["kernelspec"]) for p in NOTEBOOKS} == {
        json.dumps(KERNELSPEC)
    }


# --- slides ---------------------------------------------------------------------------------------
CODE = {"cell_type": "code", "source": "grid('dp')"}
TEXT = {"cell_type": "markdown", "source": "**zero2** — P stays R"}
SLIDES = [
    ({"cell_type": "markdown", "source": "# 3 · Sharded"}, None, "slide"),
    (
        {"cell_type": "markdown", "source": "## Derive: the ring\n\nPut the N devices"},
        CODE,
        "slide",
    ),
    ({"cell_type": "markdown", "source": "### Who holds what"}, TEXT, "subslide"),
    (TEXT, CODE, "subslide"),  # the next step after a result
    (TEXT, TEXT, "-"),
    ({"cell_type": "markdown", "source": "#hashtag is not a heading"}, TEXT, "-"),
    ({"cell_type": "code", "source": "# a comment, not a heading"}, TEXT, "-"),
    (CODE, CODE, "-"),
]


@pytest.mark.parametrize("cell,previous,kind", SLIDES, ids=lambda x: str(x)[:40])
def test_a_section_is_a_slide_a_subsection_or_the_step_after_a_result_a_slide_below(
    cell, previous, kind
):
    assert slide_type(cell, previous) == kind


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_heading_starts_its_cell_and_a_slide(path):
    cells = _notebook(path)["cells"]
    for cell in cells:
        kind = cell["metadata"].get("slideshow", {}).get("slide_type", "-")
        if cell["cell_type"] == "markdown":
            assert heading_lines(cell["source"]) in ([], [0]), cell["source"][:200]
        if heading(cell) is not None:
            assert kind == ("slide" if heading(cell)[0] <= 2 else "subslide"), cell["source"][:80]
    assert cells[0]["metadata"]["slideshow"]["slide_type"] == "slide"  # the title
    assert sum(heading(c) is not None and heading(c)[0] <= 2 for c in cells) >= 6


def test_a_heading_inside_a_code_block_is_not_a_heading():
    assert heading_lines("text\n```bash\n# a shell comment\n```\n## A section") == [4]


# --- the theory, one click away -------------------------------------------------------------------
def test_spec_citations_become_links_to_their_section_or_rule_once():
    text = "(SPEC §4 rule\n1), SPEC §8.2, SPEC §5's table, SPEC §6 rules 1 and 3"
    linked = link_spec(text)
    assert linked == (
        "([SPEC §4 rule\n1](../docs/theory.md#s4-rule-1)), [SPEC §8.2](../docs/theory.md#s8), "
        "[SPEC §5](../docs/theory.md#s5)'s table, [SPEC §6](../docs/theory.md#s6) rules 1 and 3"
    )
    assert link_spec(linked) == linked


def test_every_spec_citation_in_the_markdown_is_a_link_to_an_anchor_the_theory_has():
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', (ROOT / "docs" / "theory.md").read_text()))
    links = 0
    for path in NOTEBOOKS:
        for text in _markdown(path):
            unlinked = re.sub(r"\[SPEC\s+§[^\]]*\]\([^)]*\)", "", text)
            assert not re.search(r"SPEC\s+§\d", unlinked), (path.name, unlinked[:300])
            for target in re.findall(r"\[SPEC\s+§[^\]]*\]\(([^)]*)\)", text):
                file, _, anchor = target.partition("#")
                assert file == "../docs/theory.md" and anchor in anchors, (path.name, target)
                links += 1
    assert links >= 70  # (74 today)


# --- 00's header -------------------------------------------------------------------------------
def test_00_says_how_to_run_it_where_without_installing_and_what_spec_is():
    header = _markdown(START)[0]
    flat = _flat(header)
    assert 'pip install "placement-edu[course]"\nplacement-edu course\n' in header
    assert "copies the course into `./placement-edu-course` and opens this notebook" in flat
    assert "`--extra-index-url https://download.pytorch.org/whl/cpu`" in flat
    assert "PyPI's default torch is the CUDA build" in flat
    assert f"[Binder]({binder_url('00_start_here')})" in flat
    assert "placement-edu course --site OUT" in flat
    assert "[docs/theory.md](../docs/theory.md)" in flat and "arXiv 2601.02311" in flat
    assert "OWNER" not in flat and "requirements-dev" not in flat


#: Words addressed to CI or to the test suite, not to a learner.
FOR_CI = re.compile(r"nbval|\bCI\b|tests/|test suite|pytest")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_sentence_in_the_markdown_speaks_to_ci(path):
    assert [t[:200] for t in _markdown(path) if FOR_CI.search(t)] == []


# --- placeholders -------------------------------------------------------------------------------
PLACEHOLDER = re.compile(r'check_answer\("([\w-]+)", answer\)')
EXAMPLE = re.compile(r"e\.g\. answer = (.+)$", re.M)


def _placeholders() -> list[tuple[str, object]]:
    found = []
    for path in NOTEBOOKS:
        for cell in _notebook(path)["cells"]:
            name = PLACEHOLDER.search(cell["source"])
            if cell["cell_type"] == "code" and name:
                for example in EXAMPLE.findall(cell["source"]):
                    found.append((name.group(1), ast.literal_eval(example.strip())))
    return found


def test_no_exercise_placeholder_is_a_right_answer():
    # 07's "e.g. answer = 16.6" and 08's "3e-6" were (ZeRO's printed 16.6 GB; 3/1000004)
    examples = _placeholders()
    assert len(examples) >= 40
    assert [(name, value) for name, value in examples if check_answer(name, value).right] == []
    assert check_answer("zero2-memory", 16.6).right  # (the check would catch the old one)


# --- the lecture path ----------------------------------------------------------------------------
def test_00_describes_the_lecture_path_the_lecture_deck_is_made_of():
    assert lecture_minutes() == 50
    said = _flat(" ".join(_markdown(START)))
    assert f"**A {lecture_minutes()}-minute lecture path:** {lecture_path()}." in said
    for stop in LECTURE:
        cells = _notebook(ROOT / "notebooks" / f"{stop.notebook}.ipynb")["cells"]
        for name in stop.sections:
            found = section(cells, name)
            assert heading(found[0])[1] == name and len(found) >= 2, (stop.notebook, name)


def test_a_section_runs_to_the_next_heading_of_its_level_with_its_subsections():
    cells = [
        {"cell_type": "markdown", "source": "## A"},
        {"cell_type": "code", "source": "x = 1"},
        {"cell_type": "markdown", "source": "### A.1"},
        {"cell_type": "markdown", "source": "## B"},
    ]
    assert section(cells, "A") == cells[:3] and section(cells, "A.1") == cells[2:3]
    with pytest.raises(LookupError, match="0 sections are headed 'C'"):
        section(cells, "C")


def test_the_lecture_deck_is_a_title_then_each_stop_and_its_sections_in_order():
    pytest.importorskip("nbformat", reason="nbformat comes with the course extra")
    from placement_edu.course.slides import lecture

    deck = lecture()
    titles = [heading(cell)[1] for cell in deck.cells if heading(cell) is not None]
    expected = ["Placement semantics: a 50-minute lecture"]
    for stop in LECTURE:
        notebook = _notebook(ROOT / "notebooks" / f"{stop.notebook}.ipynb")
        expected.append(heading(notebook["cells"][0])[1])  # the notebook's title, then its sections
        expected += [
            heading(cell)[1]
            for name in stop.sections
            for cell in section(notebook["cells"], name)
            if heading(cell) is not None
        ]
    assert titles == expected
    assert "8 minutes" in deck.cells[1].source and "0 · Start here" in deck.cells[1].source
    assert len({cell.id for cell in deck.cells}) == len(deck.cells)
    state = deck.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    views = [
        output.data["application/vnd.jupyter.widget-view+json"]["model_id"]
        for cell in deck.cells
        for output in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in output.get("data", {})
    ]
    assert views and all(view in state for view in views)  # each widget drawn from saved state
