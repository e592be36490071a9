"""The course's website, as a reader opens it from disk: built once (``placement_edu.course.site``,
what ``placement-edu course --site OUT`` runs), then every page opened in headless Chromium from
``file://`` with every request that would leave the machine refused and recorded.

On each page: no request outside, no console or page error, every image shown loaded; on each
chapter whose notebook saved widget state, every saved widget view drawn by the vendored widget
manager (never "Error displaying widget"). The build writes nothing outside its folder, and every
"SPEC §n" on the site is a link; each chapter has its launch buttons. (How long the build takes:
``benchmarks/bench_site.py``, target under a minute.)
"""

from __future__ import annotations

import json
import re
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest

import placement_edu
from placement_edu.course import notebooks, repository
from placement_edu.course.site import build, saved_widget_views
from tests.browser_support import chromium, offline_page, skip_without_a_browser

pytestmark = pytest.mark.browser

skip_without_a_browser()
pytest.importorskip("sphinx", reason="the site needs the [site] extra (Sphinx, myst-nb)")

#: A course's own JupyterHub: the test builds with one, so both launch buttons are there.
HUB = "https://hub.example.org"
#: The widget views the manager drew: a subarea it made, with the view attached inside.
DRAWN = "document.querySelectorAll('div.widget-subarea > .jupyter-widgets').length"
SAVED = "document.querySelectorAll('script[type=\"application/vnd.jupyter.widget-view+json\"]')"
#: The images a reader sees (not those a widget hides, display: none), once all have loaded.
SHOWN_IMAGES = "[...document.images].filter(i => i.getClientRects().length)"
LOADED = f"{SHOWN_IMAGES}.every(i => i.complete)"
BROKEN_IMAGES = f"{SHOWN_IMAGES}.filter(i => i.naturalWidth === 0).map(i => i.src)"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site's index.html."""
    stages = set(Path(tempfile.gettempdir()).glob("placement-edu-site-*"))
    index = build(tmp_path_factory.mktemp("site") / "out", jupyterhub_url=HUB)
    assert set(Path(tempfile.gettempdir()).glob("placement-edu-site-*")) <= stages  # removed
    return index


def pages(out: Path) -> list[Path]:
    """The site's pages (not the theme's templates under _static/)."""
    return sorted(p for p in out.rglob("*.html") if not p.relative_to(out).match("_*/**"))


class BodyText(HTMLParser):
    """The text of a page's <main> outside links and code: ``plain``, and its links' ``hrefs``."""

    LEFT_OUT = {"a", "pre", "code", "script", "style"}

    def __init__(self) -> None:
        super().__init__()
        self.plain: list[str] = []
        self.hrefs: list[str] = []
        self.inside: list[str] = []
        self.main = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.main |= tag == "main"
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href") or "")
        if tag in self.LEFT_OUT:
            self.inside.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.LEFT_OUT and tag in self.inside:
            del self.inside[len(self.inside) - 1 - self.inside[::-1].index(tag)]

    def handle_data(self, data: str) -> None:
        if self.main and not self.inside:
            self.plain.append(data)


def test_the_site_builds_into_its_folder(site: Path) -> None:
    index = site
    assert index.name == "index.html" and index.is_file()
    assert [p.name for p in index.parent.parent.iterdir()] == ["out"]  # nothing beside it
    assert len(pages(index.parent)) > 40


def test_every_spec_citation_is_a_link_and_every_chapter_launches(site: Path) -> None:
    out = site.parent
    unlinked, spec_links = [], 0
    for path in pages(out):
        body = BodyText()
        body.feed(path.read_text(encoding="utf-8"))
        text = " ".join("".join(body.plain).split())
        unlinked += [f"{path.name}: {m}" for m in re.findall(r".{0,30}SPEC §\d.{0,10}", text)]
        spec_links += sum("theory/s" in href or "#s" in href for href in body.hrefs)
    assert unlinked == []
    assert spec_links > 200  # notebooks, guides and docstrings cite the theory throughout
    binder = (
        "https://mybinder.org/v2/gh/placement-edu/placement_edu/main"
        "?urlpath=lab/tree/notebooks/02_replicated.ipynb"
    )
    assert repository() == "https://github.com/placement-edu/placement_edu"
    chapter = (out / "notebooks" / "02_replicated.html").read_text(encoding="utf-8")
    assert f'href="{binder}"' in chapter
    hub = (  # nbgitpuller clones the repository into the hub, then opens the notebook
        f"{HUB}/hub/user-redirect/git-pull?repo={quote(repository(), safe='/')}"
        "&urlpath=lab/tree/placement_edu/notebooks/02_replicated.ipynb&branch=main"
    )
    assert f'href="{hub}"' in chapter
    assert "here they do not recompute" in chapter  # the note on saved widgets
    download = out / "_sources" / "notebooks" / "02_replicated.ipynb"
    assert 'href="../_sources/notebooks/02_replicated.ipynb"' in chapter
    assert download.read_bytes() == (notebooks()[2]).read_bytes()  # as the course has it


def test_the_api_reference_documents_the_root_and_each_topics_helpers(
    site: Path,
) -> None:
    """Built from the docstrings: a page per public module, the core's topics on the root's; every
    name of the root there, and helpers that left it for their topic (a function, a constant with
    its ``#:`` comment, a result type)."""
    api = site.parent / "api"
    documented = {
        name
        for page in api.glob("*.html")
        for name in re.findall(r'id="([^"]+)"', page.read_text(encoding="utf-8"))
    }
    assert {p.stem for p in api.glob("placement_edu*.html")} == {
        m for m in placement_edu.PUBLIC_MODULES if m not in placement_edu.TOPIC_MODULES
    }
    assert [n for n in placement_edu.__all__ if f"placement_edu.{n}" not in documented] == []
    helpers = ["units.GB", "units.fmt_bytes", "units.wrapped", "precision.PRESETS"]
    helpers += ["planner.Plan", "planner.group_links", "schedule.pipeline_bubble"]
    assert [h for h in helpers if f"placement_edu.{h}" not in documented] == []


def test_every_page_opens_from_disk_with_nothing_from_outside(site: Path) -> None:
    out = site.parent
    views = {
        f"notebooks/{path.stem}.html": saved_widget_views(json.loads(path.read_text("utf-8")))
        for path in notebooks()
    }
    assert len(views) == 16 and all(views.values())  # every notebook of the course has a widget
    problems: dict[str, list[str]] = {}
    images = 0
    with chromium() as browser:
        watched = offline_page(browser)
        page = watched.page
        for path in pages(out):
            name = path.relative_to(out).as_posix()
            seen = len(watched.problems)
            page.goto(path.as_uri(), wait_until="load")
            found = []
            if name in views:
                page.wait_for_function(f"{DRAWN} >= {views[name]}", timeout=15_000)
                page.evaluate("document.fonts.ready.then(() => true)")  # the controls' icons
                drawn, saved = page.evaluate(f"[{DRAWN}, {SAVED}.length]")
                if not drawn == saved == views[name] or "Error displaying widget" in page.content():
                    found.append(f"{drawn} of {saved} widget views drawn ({views[name]} saved)")
            page.wait_for_function(LOADED, timeout=10_000)
            images += page.evaluate(f"{SHOWN_IMAGES}.length")
            found += [f"image not loaded: {src}" for src in page.evaluate(BROKEN_IMAGES)]
            found += watched.problems[seen:]
            if found:
                problems[name] = found
    print(f"{len(pages(out))} pages opened, {sum(views.values())} widget views, {images} images")
    assert problems == {}
    assert images > 30  # the notebooks' figures, the widgets' and the theme's
