"""The course as a website: every notebook a chapter, the theory split into chapters, the guides,
an API reference from the docstrings, and the instructor page, built offline with Sphinx.

``build(out)`` copies the sources into a temporary *stage*, rewrites them there (never the
sources), runs Sphinx on the stage and writes the site into ``out``:

- the notebooks keep their saved outputs and widget state (nothing is executed); a note on each
  page with widgets says they recompute only in a live notebook;
- ``docs/theory.md`` (the "SPEC") becomes one page per ``## `` section (``split_theory``), so a
  link ``theory.md#s4`` leads to the chapter of §4 (``relink``), and every plain "SPEC §n" becomes
  such a link (``link_spec``);
- a relative link to a file the site does not carry (``../README.md``) leads to the repository;
- require.js and the widget manager's ``embed-amd.js`` (with its icon fonts) are copied from
  ``vendor/`` into ``out/_vendor/``: a page loads nothing from outside, and opens from disk
  (``file://``);
- each chapter has launch buttons (Binder; JupyterHub where one is given) built from the one
  repository URL (``placement_edu.course.repository()``), and its download button gives the
  notebook as the course has it.

Needs the ``[site]`` extra (Sphinx, myst-nb, sphinx-book-theme). ``placement-edu course --site OUT``
calls ``build``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import re
import shutil
import tempfile
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_edu import PUBLIC_MODULES, TOPIC_MODULES
from placement_edu.course import BRANCH, content_root, notebooks, repository
from placement_edu.errors import PlacementError

VENDOR = Path(__file__).resolve().parent / "vendor"
#: What a page with saved widgets loads (``nb_ipywidgets_js``), in order, copied into
#: ``out/_vendor/`` with the widget manager's icon fonts (``html-manager/``; vendor/README.md).
WIDGET_SCRIPTS = ("require.js", "require-paths.js", "embed-amd.js")
WIDGET_FONTS = "html-manager"
#: The guides (``docs/<name>.md``), in the order the site lists them; a missing one is left out.
GUIDES = ("cli", "python", "reliability", "peak", "time", "calibration", "measured")
#: Imported by the API's modules, mocked for the reference when not installed (a [site] install).
OPTIONAL_IMPORTS = ("torch", "transformers", "matplotlib", "ipywidgets", "IPython")
BINDERHUB = "https://mybinder.org"
#: The JupyterHub a course runs on (nbgitpuller opens the notebook there); none unless set.
JUPYTERHUB_VARIABLE = "PLACEMENT_EDU_JUPYTERHUB_URL"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_NOTE = (
    "```{note}\n"
    "The controls and figures on this page are shown as they were saved: here they do not "
    "recompute. They do in a live notebook: use the launch button above (Binder or JupyterHub), "
    "or run `placement-edu course`.\n"
    "```"
)


# --- the theory as chapters ---------------------------------------------------------------------
@dataclass(frozen=True)
class Chapter:
    """One ``## `` section of the theory as its own page: ``name`` is the file's stem ("s4",
    "notation"), ``text`` its Markdown (headings one level up), ``anchors`` the fragments a link
    into the whole theory may name that now live on this page."""

    name: str
    text: str
    anchors: frozenset[str]


#: A ``## `` heading, with the explicit anchor line (``<a id="s4"></a>``) that may precede it.
SECTION = re.compile(r'(?m)^(?:<a id="[^"]+"></a>\n+)?## (?P<title>.+)$')
ANCHOR = re.compile(r'(?m)^<a id="(?P<id>[^"]+)"></a>$')
HEADING = re.compile(r"(?m)^#{1,6} (?P<title>.+)$")


def github_anchor(heading: str) -> str:
    """The fragment GitHub (and MyST) gives a heading: lower case, punctuation dropped, spaces
    to hyphens ("4. Communication derivation" -> "4-communication-derivation")."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def chapter_name(title: str) -> str:
    """A section's page: "s4" for "4. Communication derivation", else the title's anchor."""
    number = re.match(r"(\d+)\. ", title)
    return f"s{number.group(1)}" if number else github_anchor(title)


def split_theory(text: str) -> tuple[str, list[Chapter]]:
    """The theory's introduction (up to its first ``## ``) and one chapter per ``## `` section.

    In each chapter the headings move one level up (its ``## `` is the page's title) and an
    explicit anchor ``<a id="s4-rule-1"></a>`` becomes a MyST target ``(s4-rule-1)=``, which
    Sphinx resolves across pages."""
    starts = [m.start() for m in SECTION.finditer(text)]
    bounds = zip(starts, [*starts[1:], len(text)])
    chapters = []
    for start, end in bounds:
        part = text[start:end].strip() + "\n"
        title = SECTION.match(part)
        assert title is not None  # each part starts at a match
        anchors = {m["id"] for m in ANCHOR.finditer(part)}
        anchors |= {github_anchor(m["title"]) for m in HEADING.finditer(part)}
        part = re.sub(r"(?m)^#(#+) ", r"\1 ", part)
        part = ANCHOR.sub(lambda m: f"({m['id']})=", part)
        chapters.append(Chapter(chapter_name(title["title"]), part, frozenset(anchors)))
    return text[: starts[0] if starts else len(text)], chapters


# --- links --------------------------------------------------------------------------------------
#: Text that is left as it is (code, fenced or inline), and Markdown links and images.
SPANS = re.compile(
    r"(?P<code>```.*?```|~~~.*?~~~|`[^`\n]+`)"
    r"|(?P<text>!?\[[^\]]*\])\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)",
    re.S,
)
#: What a docstring (reST) leaves as it is: ``literals``, `interpreted text`, :role:`...`.
RST_SPANS = re.compile(r"``.*?``|(?::[\w:-]+:)?`[^`]*`_{0,2}")
#: A plain citation of the theory: "SPEC §4", "SPEC §4 rule 1" (a line may break before the rule).
CITATION = re.compile(r"SPEC §(?P<section>\d+)(?:\.\d+)?(?P<rule>\s+rule\s+(?P<n>\d+))?")


def cite_spec(text: str, spans: re.Pattern[str], link: Callable[[str, str], str]) -> str:
    """``text`` with each plain citation of the theory outside ``spans`` (code, existing links)
    replaced by ``link(words, target)``: the target is the theory's anchor, "s4" or "s4-rule-1"."""

    def cite(match: re.Match[str]) -> str:
        target = f"s{match['section']}" + (f"-rule-{match['n']}" if match["rule"] else "")
        return link(" ".join(match.group().split()), target)

    pieces, at = [], 0
    for span in spans.finditer(text):
        pieces += [CITATION.sub(cite, text[at : span.start()]), span.group()]
        at = span.end()
    return "".join([*pieces, CITATION.sub(cite, text[at:])])


def link_spec(text: str, theory: str) -> str:
    """Every plain "SPEC §n" (and "SPEC §n rule m") of Markdown ``text`` as a link into the
    theory, at the relative path ``theory`` (code and existing links are left alone)."""
    return cite_spec(text, SPANS, lambda words, anchor: f"[{words}]({theory}#{anchor})")


def link_spec_in_docstring(
    app: object, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """Sphinx's ``autodoc-process-docstring``: each plain "SPEC §n" of a docstring (reST) as a
    reference to the theory's target (``s4``, ``s4-rule-1``: the chapters' MyST targets)."""
    for i, line in enumerate(lines):
        lines[i] = cite_spec(line, RST_SPANS, lambda words, anchor: f":ref:`{words} <{anchor}>`")


@dataclass(frozen=True)
class Places:
    """Where the stage puts each source (paths relative to the content root and to the stage, in
    ``/`` form), which theory chapter holds each anchor, and the repository that holds the rest."""

    staged: Mapping[str, str]
    chapters: Mapping[str, str]
    repository: str
    theory: str = "docs/theory.md"

    def target(self, path: str, fragment: str) -> str | None:
        """Where a link to source ``path`` (and ``#fragment``) goes on the site, relative to the
        stage; None when the site does not carry it."""
        if path == self.theory and fragment in self.chapters:
            return f"docs/theory/{self.chapters[fragment]}.md"
        return self.staged.get(path)


def relink(text: str, source: str, here: str, places: Places) -> str:
    """Markdown ``text`` of the source file ``source``, staged at ``here``, with each relative link
    pointed where the stage put its target: a theory anchor to its chapter, a file the site does
    not carry to the repository. Links with a scheme (``https:``) are left as they are."""

    def move(span: re.Match[str]) -> str:
        if span["code"] or re.match(r"[a-z][a-z0-9+.-]*:", span["target"]):
            return span.group()
        file, _, fragment = span["target"].partition("#")
        path = (
            posixpath.normpath(posixpath.join(posixpath.dirname(source), file)) if file else source
        )
        target = places.target(path, fragment)
        if target is None and (path.startswith("..") or span["text"].startswith("!")):
            return span.group()  # outside the repository, or an image: left to Sphinx to find
        if target is None:
            new = f"{places.repository}/blob/{BRANCH}/{path}"
        elif target == here and fragment:
            new = ""
        else:
            new = posixpath.relpath(target, posixpath.dirname(here))
        new += f"#{fragment}" if fragment else ""
        return f"{span['text']}({new}{span['title'] or ''})"

    return SPANS.sub(move, text)


def course_markdown(text: str, source: str, places: Places, here: str | None = None) -> str:
    """The Markdown of ``source`` as the site shows it at ``here`` (by default where the stage puts
    ``source``): SPEC cited by links, every link pointing where the stage put its target."""
    theory = posixpath.relpath(places.theory, posixpath.dirname(source))
    return relink(link_spec(text, theory), source, here or places.staged[source], places)


# --- the stage ----------------------------------------------------------------------------------
def saved_widget_views(notebook: Mapping[str, Any]) -> int:
    """How many widget views ``notebook`` shows from its saved state (0 without saved state)."""
    state = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {})
    if not state.get("state"):
        return 0
    return sum(
        WIDGET_VIEW in output.get("data", {})
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
    )


def staged_notebook(notebook: dict[str, Any], source: str, places: Places) -> dict[str, Any]:
    """``notebook`` with its Markdown cells as the site shows them, and the widget note after its
    title where it shows saved widgets."""
    cells = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            cell = {**cell, "source": course_markdown(text, source, places)}
        cells.append(cell)
    if saved_widget_views(notebook):
        note = {"cell_type": "markdown", "id": "site-note", "metadata": {}, "source": WIDGET_NOTE}
        cells.insert(1, note)
    return {**notebook, "cells": cells}


#: The reference's pages: one per public module, the core's topics on the root's page (each page
#: costs the build a second or two: every page carries the whole sidebar).
API = tuple(m for m in PUBLIC_MODULES if m not in TOPIC_MODULES)


def api_page(module: str, sections: Sequence[str] = ()) -> str:
    """The reference page of ``module``: its docstring and its public names (``__all__``), then
    each module of ``sections`` under its own heading."""
    return "".join(
        f"{'#' if m == module else '##'} `{m}`\n\n```{{eval-rst}}\n.. automodule:: {m}\n"
        "   :members:\n   :undoc-members:\n   :show-inheritance:\n```\n\n"
        for m in (module, *sections)
    )


def toctree(caption: str, entries: list[str]) -> str:
    """A hidden table of contents: the site's sidebar lists ``entries`` under ``caption``."""
    lines = "\n".join(entries)
    return f"\n```{{toctree}}\n:caption: {caption}\n:hidden:\n\n{lines}\n```\n"


def stage(into: Path, repository: str) -> None:
    """Write the site's sources into ``into``, from the course (``content_root()``)."""
    root, chapters_in_order = content_root(), notebooks()
    guides = [g for g in GUIDES if (root / "docs" / f"{g}.md").is_file()]
    extra = ["instructors"] if (root / "docs" / "instructors.md").is_file() else []
    intro, chapters = split_theory((root / "docs" / "theory.md").read_text(encoding="utf-8"))
    staged = {"docs/index.md": "index.md", "docs/theory.md": "docs/theory.md"}
    staged |= {f"notebooks/{nb.name}": f"notebooks/{nb.name}" for nb in chapters_in_order}
    staged |= {f"docs/{page}.md": f"docs/{page}.md" for page in [*guides, *extra]}
    chapter_of = {anchor: c.name for c in chapters for anchor in c.anchors}
    places = Places(staged, chapter_of, repository)

    def write(path: str, text: str) -> None:
        (into / path).parent.mkdir(parents=True, exist_ok=True)
        (into / path).write_text(text, encoding="utf-8")

    for source, path in staged.items():
        if source.endswith(".ipynb"):
            notebook = json.loads((root / source).read_text(encoding="utf-8"))
            write(path, json.dumps(staged_notebook(notebook, source, places), ensure_ascii=False))
        elif source != "docs/theory.md":
            write(
                path, course_markdown((root / source).read_text(encoding="utf-8"), source, places)
            )
    write("docs/theory.md", course_markdown(intro, "docs/theory.md", places))
    for chapter in chapters:
        # A chapter's links are written in docs/theory.md ("#s4" is a place in the whole theory)
        here = f"docs/theory/{chapter.name}.md"
        write(here, course_markdown(chapter.text, "docs/theory.md", places, here))
    for module in API:
        write(f"api/{module}.md", api_page(module, TOPIC_MODULES if module == API[0] else ()))
    write(
        "api/index.md",
        "# API reference\n" + toctree("Modules", list(API)).replace(":hidden:\n", ""),
    )
    index = (into / "index.md").read_text(encoding="utf-8")
    index += toctree("The course", [f"notebooks/{nb.stem}" for nb in chapters_in_order])
    index += toctree("The theory", ["docs/theory"] + [f"docs/theory/{c.name}" for c in chapters])
    index += toctree("Guides", [f"docs/{g}" for g in guides] + ["api/index"])
    index += toctree("For instructors", [f"docs/{page}" for page in extra]) if extra else ""
    write("index.md", index)


# --- the build ----------------------------------------------------------------------------------
def configuration(repository: str, jupyterhub_url: str) -> dict[str, Any]:
    """Sphinx's settings for the site (no conf.py: these are its overrides)."""
    launch = {"binderhub_url": BINDERHUB, "notebook_interface": "jupyterlab"}
    if jupyterhub_url:
        launch["jupyterhub_url"] = jupyterhub_url
    return {
        "project": "Placement semantics",
        "extensions": ["myst_nb", "sphinx.ext.autodoc"],
        "nb_execution_mode": "off",  # the saved outputs are the page
        # Sphinx puts these under _static/; "../" takes them out, to the site's _vendor/, so only
        # the pages that show widgets load them. No crossorigin: a file:// page would refuse them.
        "nb_ipywidgets_js": {f"../_vendor/{name}": {} for name in WIDGET_SCRIPTS},
        "myst_heading_anchors": 3,
        "autodoc_mock_imports": [m for m in OPTIONAL_IMPORTS if not importlib.util.find_spec(m)],
        "autodoc_member_order": "bysource",
        "toc_object_entries": False,  # the sidebar lists pages, not each function (and is fast)
        "html_theme": "sphinx_book_theme",
        "html_title": "Placement semantics",
        "html_show_sourcelink": False,
        "html_context": {"default_mode": "auto"},  # light or dark as the reader's system is
        "html_theme_options": {
            "repository_url": repository,
            "repository_branch": BRANCH,
            "path_to_docs": "",  # the stage mirrors the repository: notebooks/NN_name.ipynb
            "use_repository_button": True,
            "launch_buttons": launch,
            "home_page_in_toc": True,
        },
    }


def build(out: Path, *, jupyterhub_url: str | None = None) -> Path:
    """Build the website into ``out`` and return the path of its ``index.html``.

    ``jupyterhub_url`` (default: the environment variable ``PLACEMENT_EDU_JUPYTERHUB_URL``) adds a
    JupyterHub launch button beside Binder's. Sphinx's output goes to a log; a failed build raises
    ``PlacementError`` naming the log (its stage is kept for a look)."""
    try:
        from sphinx.application import Sphinx
        from sphinx.util.console import nocolor
    except ImportError:
        raise PlacementError(
            "building the site needs Sphinx: pip install 'placement-edu[site]'"
        ) from None
    hub = os.environ.get(JUPYTERHUB_VARIABLE, "") if jupyterhub_url is None else jupyterhub_url
    url = repository()
    # Sphinx writes into the stage (myst-nb also writes beside its output folder), then the site
    # is copied to ``out``.
    work = Path(tempfile.mkdtemp(prefix="placement-edu-site-"))
    html, log = work / "html", work / "sphinx.log"
    try:
        stage(work / "src", url)
        (html / "_vendor").mkdir(parents=True)
        for name in WIDGET_SCRIPTS:
            shutil.copyfile(VENDOR / name, html / "_vendor" / name)
        shutil.copytree(VENDOR / WIDGET_FONTS, html / "_vendor" / WIDGET_FONTS)
        nocolor()  # a log, not a terminal
        with (
            log.open("w", encoding="utf-8") as stream,
            warnings.catch_warnings(record=True) as caught,
        ):
            app = Sphinx(
                work / "src",
                None,
                html,
                work / "doctrees",
                "html",
                confoverrides=configuration(url, hub),
                status=stream,
                warning=stream,
                freshenv=True,
            )
            app.connect("autodoc-process-docstring", link_spec_in_docstring)
            app.build()
            stream.writelines(f"{w.filename}:{w.lineno}: {w.message}\n" for w in caught)
        if app.statuscode:
            raise RuntimeError(f"Sphinx ended with status {app.statuscode}")
        for notebook in notebooks():  # the download button gives the notebook as the course has it
            shutil.copyfile(notebook, html / "_sources" / "notebooks" / notebook.name)
        shutil.copytree(html, out, dirs_exist_ok=True)
    except Exception as error:
        with log.open("a", encoding="utf-8") as stream:
            stream.write(traceback.format_exc())
        raise PlacementError(f"the site did not build ({error}); Sphinx's log: {log}") from error
    shutil.rmtree(work)
    return Path(out).resolve() / "index.html"
