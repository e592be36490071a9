"""The course's website, as a reader opens it from disk: built once (``placement_edu.course.site``,
what ``placement-edu course --site OUT`` runs), then every page opened in headless Chromium from
``file://`` with every request that would leave the machine refused and recorded.

On each page: no request outside, no console or page error, every image loaded; on each chapter
whose notebook saved widget state, every saved widget view drawn by the vendored widget manager
(never "Error displaying widget"). The build itself takes under a minute.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from placement_edu.course import notebooks
from placement_edu.course.site import build, saved_widget_views
from tests.browser_support import chromium, offline_page, skip_without_a_browser

pytestmark = pytest.mark.browser

skip_without_a_browser()
pytest.importorskip("sphinx", reason="the site needs the [site] extra (Sphinx, myst-nb)")

#: A course's own JupyterHub: the test builds with one, so both launch buttons are there.
HUB = "https://hub.example.org"
#: The widget views the manager drew: a subarea it made, with the view attached inside.
DRAWN = "document.querySelectorAll('div.widget-subarea > .jupyter-widgets').length"
#: The images a reader sees (not those a widget hides, display: none), once all have loaded.
SHOWN_IMAGES = "[...document.images].filter(i => i.getClientRects().length)"
LOADED = f"{SHOWN_IMAGES}.every(i => i.complete)"
BROKEN_IMAGES = f"{SHOWN_IMAGES}.filter(i => i.naturalWidth === 0).map(i => i.src)"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """The built site's index.html, and the seconds the build took."""
    start = time.perf_counter()
    index = build(tmp_path_factory.mktemp("site") / "out", jupyterhub_url=HUB)
    seconds = time.perf_counter() - start
    print(f"\nthe site built in {seconds:.1f} s")
    return index, seconds


def views_by_page() -> dict[str, int]:
    """notebooks/NN_name.html -> the widget views its notebook saved (only those with some)."""
    counts = {
        f"notebooks/{path.stem}.html": saved_widget_views(json.loads(path.read_text("utf-8")))
        for path in notebooks()
    }
    return {page: n for page, n in counts.items() if n}


def test_the_site_builds_in_under_a_minute(site: tuple[Path, float]) -> None:
    index, seconds = site
    assert index.name == "index.html" and index.is_file()
    assert seconds < 60, f"the site took {seconds:.0f} s to build"


def test_every_page_opens_from_disk_with_nothing_from_outside(site: tuple[Path, float]) -> None:
    out = site[0].parent
    pages = sorted(p for p in out.rglob("*.html") if not p.relative_to(out).match("_*/**"))
    views = views_by_page()
    assert len(views) == 15  # every notebook of the course has a widget
    problems: dict[str, list[str]] = {}
    with chromium() as browser:
        watched = offline_page(browser)
        page = watched.page
        for path in pages:
            name = path.relative_to(out).as_posix()
            seen = len(watched.problems)
            page.goto(path.as_uri(), wait_until="load")
            found = []
            if name in views:
                page.wait_for_function(f"{DRAWN} >= {views[name]}", timeout=15_000)
                page.evaluate("document.fonts.ready.then(() => true)")  # the controls' icons
                drawn = page.evaluate(DRAWN)
                text = page.inner_text("body")
                if drawn != views[name] or "Error displaying widget" in text:
                    found.append(f"{drawn} of {views[name]} widget views drawn")
            page.wait_for_function(LOADED, timeout=10_000)
            found += [f"image not loaded: {src}" for src in page.evaluate(BROKEN_IMAGES)]
            found += watched.problems[seen:]
            if found:
                problems[name] = found
    print(f"{len(pages)} pages opened, {sum(views.values())} widget views drawn")
    assert problems == {}
    assert {"index.html", "docs/theory/s4.html", "api/placement_edu.timing.html"} <= {
        p.relative_to(out).as_posix() for p in pages
    }
