"""The course as slides: every heading a slide, presented live with RISE or exported as decks.

Each notebook's cells carry ``metadata.slideshow.slide_type``, set by one rule (``slide_type``): a
slide starts where the argument moves on. A title or a section (``#``, ``##``) starts a new slide;
a subsection (``###`` and deeper), or a paragraph that follows a code cell (the next step after a
result), starts a slide below it; every other cell continues the slide before it. A heading is
always the first line of its cell (the notebooks are saved so), so every section is a slide.
RISE (``jupyterlab-rise``) presents a notebook live in JupyterLab from this metadata; ``build``
exports it as reveal.js decks with the saved outputs.

``build(out)`` writes one deck per notebook (``OUT/<notebook>.slides.html``) and the lecture deck
(``OUT/lecture.slides.html``): the 50-minute lecture path that notebook 00 describes, made of the
sections ``LECTURE`` names, in its order. The decks load nothing from outside: reveal.js, its
theme's font, require.js, jQuery and the widget manager are copied beside them (``OUT/_vendor/``),
and the template drops what nbconvert's loads from CDNs (MathJax, mermaid: no notebook uses
them). Widgets show their saved state (controls and figure as last run; they recompute only in a
live notebook).
"""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placement_edu.course import BRANCH, notebooks, repository

if TYPE_CHECKING:  # nbconvert and nbformat come with the course extra, imported by ``build``
    from nbconvert import SlidesExporter
    from nbformat import NotebookNode

#: The scripts, styles and fonts the decks load, copied into ``OUT/_vendor/`` (see its README.md).
VENDOR = Path(__file__).resolve().parent / "vendor"
#: A heading line of Markdown: its ``#``s and its text.
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
#: A Markdown link, ``[text](target)``: a heading is named by its text without the target.
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
#: A Markdown link's target that a deck cannot follow as it is: another notebook of the course
#: (``03_sharded.ipynb``) or a page of its docs (``../docs/theory.md#s4``).
COURSE_LINK = re.compile(r"\]\((?:(\d\d_\w+)\.ipynb|\.\./(docs/[^)\s]+))")
#: The deepest heading that starts a new slide (``##``); deeper ones start a slide below it.
SLIDE_LEVEL = 2
#: What the saved widget state of a notebook is stored under in its metadata.
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


# --- the rule: every heading a slide ------------------------------------------------------------
def heading(cell: Mapping[str, Any]) -> tuple[int, str] | None:
    """(level, text) of the heading a markdown cell starts with -- the text with links reduced to
    their words -- or None: a code cell, or markdown that starts otherwise."""
    if cell["cell_type"] != "markdown":
        return None
    source = "".join(cell["source"]).lstrip("\n")
    match = HEADING.match(source.split("\n", 1)[0])
    return (len(match.group(1)), LINK.sub(r"\1", match.group(2))) if match else None


def slide_type(cell: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> str:
    """The ``slide_type`` of ``cell``, after the cell ``previous``: "slide" for a title or a
    section, "subslide" (a slide below) for a subsection or markdown after a code cell, "-"
    (continue the slide) for every other cell."""
    found = heading(cell)
    if found is not None:
        return "slide" if found[0] <= SLIDE_LEVEL else "subslide"
    after_code = previous is not None and previous["cell_type"] == "code"
    return "subslide" if cell["cell_type"] == "markdown" and after_code else "-"


def title(cells: Sequence[Mapping[str, Any]]) -> str:
    """A notebook's title: the text of its first heading ("0 · Start here")."""
    return next(found[1] for cell in cells if (found := heading(cell)) is not None)


# --- the lecture path ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Stop:
    """One stop of the lecture path: a notebook (its file name without ``.ipynb``), the minutes
    spent on it, what is shown there (as notebook 00 says it), and the sections presented from it
    (their headings' text), in order."""

    notebook: str
    minutes: int
    what: str
    sections: tuple[str, ...]


#: The 50-minute lecture path that notebook 00 describes: six stops, each some sections of one
#: notebook (tests/test_notebook_front.py checks 00 says the same).
LECTURE: tuple[Stop, ...] = (
    Stop(
        "00_start_here",
        8,
        "the four states and the grids",
        ("Define: four training states", "Define: five placement modes", "Derive: who holds what"),
    ),
    Stop(
        "01_collectives_and_time",
        10,
        "the ring's 2(N−1)/N and the compute-bound threshold",
        ("Derive: the ring", "Derive: when does communication hide?"),
    ),
    Stop(
        "04_sharded_with_gather",
        8,
        "SG and the 1.5×",
        ("1 · Define: the sharded-with-gather mode", "3 · Derive communication: rule 3, and 3Ψ"),
    ),
    Stop(
        "07_zero_reproduced",
        8,
        "ZeRO's Table 1 reproduced",
        ("Check: ZeRO Table 1, exactly", 'Where does "8×" really come from? (SPEC §8)'),
    ),
    Stop(
        "08_correctness",
        8,
        "one fault, run and diagnosed",
        (
            "Define: two conditions",
            "Five named faults, each breaking one condition directly",
            "Measure: every fault, run for real",
        ),
    ),
    Stop(
        "11_composition_and_planning",
        8,
        "the planner's ranking",
        ("8 · Planning: which composition for a 70B model on 64 GPUs?",),
    ),
)


def lecture_minutes() -> int:
    """The lecture path's length, in minutes: the sum of its stops'."""
    return sum(stop.minutes for stop in LECTURE)


def lecture_path() -> str:
    """The lecture path as notebook 00 states it: "00 (the four states and the grids, 8 min)
    → 01 (...) → ..."."""
    return " → ".join(f"{s.notebook[:2]} ({s.what}, {s.minutes} min)" for s in LECTURE)


def section(cells: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    """The cells of the section headed ``name``: its heading cell and every cell up to the next
    heading of the same or a higher level (its subsections included)."""
    headings = [(i, found) for i, cell in enumerate(cells) if (found := heading(cell)) is not None]
    starts = [(i, level) for i, (level, text) in headings if text == name]
    if len(starts) != 1:
        raise LookupError(f"{len(starts)} sections are headed {name!r}; the lecture needs one")
    ((start, level),) = starts
    end = next((i for i, (deeper, _) in headings if i > start and deeper <= level), len(cells))
    return list(cells[start:end])


def _markdown(source: str, kind: str = "slide") -> dict[str, Any]:
    return {
        "cell_type": "markdown",
        "metadata": {"slideshow": {"slide_type": kind}},
        "source": source,
    }


def lecture() -> NotebookNode:
    """The lecture deck's notebook: a title slide naming the path and its minutes, then for each
    stop a slide naming the notebook and the minutes, and the sections it names, with their saved
    outputs (and the widget state of every notebook it draws from)."""
    import nbformat

    by_name = {path.stem: path for path in notebooks()}
    stops = "\n".join(
        f"{i}. **{s.notebook[:2]}** {s.what} — {s.minutes} min" for i, s in enumerate(LECTURE, 1)
    )
    cells: list[Mapping[str, Any]] = [
        _markdown(
            f"# Placement semantics: a {lecture_minutes()}-minute lecture\n\n"
            f"Where each training state lives, and what that costs. The path through the "
            f"course's notebooks:\n\n{stops}"
        )
    ]
    widgets: dict[str, Any] = {}
    first = None
    for stop in LECTURE:
        notebook = nbformat.read(by_name[stop.notebook], as_version=4)
        first = first or notebook
        cells.append(
            _markdown(f"# {title(notebook.cells)}\n\n**{stop.minutes} minutes**: {stop.what}.")
        )
        for name in stop.sections:
            cells += copy.deepcopy(section(notebook.cells, name))
        saved = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {})
        widgets.update(saved.get("state", {}))
    assert first is not None
    deck = nbformat.v4.new_notebook(metadata=copy.deepcopy(first.metadata))
    deck.metadata["widgets"] = {
        WIDGET_STATE: {"state": widgets, "version_major": 2, "version_minor": 0}
    }
    for i, cell in enumerate(cells):
        cell = nbformat.from_dict(copy.deepcopy(cell))
        cell["id"] = f"lecture-{i}"  # (ids unique in the deck, whichever notebook a cell is from)
        deck.cells.append(cell)
    return deck


# --- the decks ----------------------------------------------------------------------------------
#: nbconvert's reveal template, offline: MathJax and mermaid (loaded from CDNs, used by no
#: notebook) left out, the widget manager loaded only when it is vendored (with
#: ``require-paths.js``, which points it to its vendored icon fonts), and reveal.js started from
#: the local copy without MathJax's re-render (it would fail on every slide change).
TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_requirejs -%}
{{ super() }}
{%- if resources.widget_renderer_url %}
<script src="{{ resources.require_paths_url }}"></script>
{%- endif -%}
{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}
{%- if resources.widget_renderer_url -%}{{ super() }}{%- endif -%}
{%- endblock jupyter_widgets -%}
{%- block footer_js -%}
<script>
require(["{{ resources.reveal.url_prefix }}/dist/reveal.js"], function (Reveal) {
  window.Reveal = Reveal;  // (an AMD module sets no global; the console and tests use it)
  Reveal.initialize({
    controls: true, progress: true, history: true, center: false,
    transition: "{{ resources.reveal.transition }}",
    width: 1280, height: 800,  // (a line of 100 characters of code fits; scaled to the screen)
  });
  // A slide taller than the screen scrolls (a section with several figures).
  function scrollTall() {
    var h = $('.reveal').height() * 0.95;
    $('section.present').find('section').addBack('section.present')
      .filter(function () { return $(this).height() > h; })
      .css('height', '95vh').css('overflow-y', 'auto');
  }
  Reveal.on('ready', scrollTall);
  Reveal.on('slidechanged', scrollTall);
});
</script>
{%- endblock footer_js -%}
"""
#: Where the decks find the vendored files, relative to the decks.
VENDORED = "_vendor"


def exporter() -> SlidesExporter:
    """nbconvert's reveal.js exporter with the offline template, the "white" theme (its font
    vendored), no prompts, and every script from ``_vendor/`` beside the deck."""
    from jinja2 import DictLoader
    from nbconvert import SlidesExporter

    widgets = (VENDOR / "embed-amd.js").is_file()
    return SlidesExporter(
        extra_loaders=[DictLoader({"offline.html.j2": TEMPLATE})],
        template_file="offline.html.j2",
        reveal_url_prefix=f"{VENDORED}/reveal.js",
        reveal_theme="white",
        reveal_transition="none",
        require_js_url=f"{VENDORED}/require.js",
        jquery_url=f"{VENDORED}/jquery/jquery.min.js",
        widget_renderer_url=f"{VENDORED}/embed-amd.js" if widgets else "",
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )


def deck_links(markdown: str) -> str:
    """``markdown`` with its links into the course made for a deck: another notebook's becomes
    its deck (``03_sharded.slides.html``, beside this one), a docs page's the page in the
    repository (``docs/`` does not travel with the decks)."""

    def target(match: re.Match[str]) -> str:
        notebook, page = match.groups()
        if notebook:
            return f"]({notebook}.slides.html"
        return f"]({repository()}/blob/{BRANCH}/{page}"

    return COURSE_LINK.sub(target, markdown)


def export(notebook: NotebookNode, deck: Path, slides: SlidesExporter | None = None) -> Path:
    """Write ``notebook`` as a reveal.js deck to ``deck`` (its ``_vendor/`` must sit beside it),
    its links into the course made for a deck (``deck_links``)."""
    slides = slides or exporter()
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = deck_links(cell.source)
    resources = {
        "metadata": {"name": title(notebook.cells)},
        "require_paths_url": f"{VENDORED}/require-paths.js",
    }
    body, _ = slides.from_notebook_node(notebook, resources=resources)
    deck.write_text(body, encoding="utf-8")
    return deck


def build(out: Path) -> list[Path]:
    """Write the course's decks into ``out``: one per notebook, ``<notebook>.slides.html``, in
    reading order, then ``lecture.slides.html``; the vendored files go to ``out/_vendor/``.
    Returns the decks' paths."""
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        VENDOR, out / VENDORED, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.md")
    )
    slides = exporter()
    decks = [
        export(nbformat.read(path, as_version=4), out / f"{path.stem}.slides.html", slides)
        for path in notebooks()
    ]
    return decks + [export(lecture(), out / "lecture.slides.html", slides)]
