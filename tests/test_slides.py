"""The slide decks (issue 38, item 3): ``placement_edu.course.slides.build`` writes one reveal.js
deck per notebook and the lecture deck, each loading only files copied beside it; opened from
disk in Debian's headless Chromium, a deck advances slide by slide with no request leaving the
machine, no console error, its font from the vendored files, and its widgets drawn from their saved
state (controls, with the still hidden)."""

from __future__ import annotations

import re

import pytest

from placement_edu.course import notebooks
from tests.browser_support import chromium, offline_page, skip_without_a_browser
from tests.gallery import widget_cells

pytestmark = pytest.mark.browser

skip_without_a_browser()
pytest.importorskip("nbconvert", reason="nbconvert is in the course extra")

from placement_edu.course.slides import LECTURE, build  # noqa: E402  (needs nbconvert)

#: What a page loads by itself: scripts and style sheets (links a reader clicks are not loaded).
LOADED = re.compile(r"<(?:script|link)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"")


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    out = tmp_path_factory.mktemp("slides")
    return out, build(out)


def test_one_deck_per_notebook_then_the_lecture_deck(decks):
    out, paths = decks
    expected = [f"{p.stem}.slides.html" for p in notebooks()] + ["lecture.slides.html"]
    assert [p.name for p in paths] == expected and len(paths) == 17
    assert all(p.parent == out and p.stat().st_size > 100_000 for p in paths)


def test_every_script_and_style_a_deck_loads_is_a_file_beside_it(decks):
    out, paths = decks
    for path in paths:
        loaded = LOADED.findall(path.read_text(encoding="utf-8"))
        assert len(loaded) >= 4, path.name  # require.js, jQuery, reveal.js's and its theme's css
        assert [u for u in loaded if not (out / u).is_file()] == [], path.name
    assert (out / "_vendor" / "reveal.js" / "dist" / "reveal.js").is_file()
    text = paths[0].read_text(encoding="utf-8")  # (the widget manager is added by a script)
    assert "widgetRendererSrc = '_vendor/embed-amd.js'" in text
    assert not re.search(r"https?://(unpkg|cdn|fonts\.)", text)


def open_deck(browser, path):
    """A deck opened from disk (``file:``), once reveal.js is ready; the page refuses and records
    every request leaving the machine."""
    watched = offline_page(browser, viewport={"width": 1280, "height": 800})
    watched.page.goto(path.as_uri())
    watched.page.wait_for_function("window.Reveal?.isReady()", timeout=30_000)
    return watched


def advance(page, slides: int) -> list[str]:
    """Press "next" ``slides`` times; the indices of each slide reached, each different."""
    seen = [page.evaluate("JSON.stringify(Reveal.getIndices())")]
    for _ in range(slides):
        page.evaluate("Reveal.next()")
        seen.append(page.evaluate("JSON.stringify(Reveal.getIndices())"))
        assert seen[-1] != seen[-2], f"Reveal.next() stayed at {seen[-1]}"
    return seen


def test_a_deck_opened_from_disk_advances_with_nothing_from_outside_and_its_widget_drawn(decks):
    out, paths = decks
    with chromium() as browser:
        watched = open_deck(browser, paths[0])  # 00: its grids and the mode explorer
        page = watched.page
        assert page.evaluate("Reveal.getTotalSlides()") >= 10
        assert len(set(advance(page, 8))) == 9
        live = page.locator(".placement-edu-live")
        live.first.locator("select").first.wait_for(state="attached", timeout=30_000)
        assert live.count() == len(widget_cells(notebooks()[0])) >= 1
        assert live.first.locator("select, .noUi-handle, .slider").count() >= 2  # its controls
        assert not page.locator(".placement-edu-still").first.is_visible()  # (drawn: hidden)
        assert page.evaluate("document.fonts.check('16px \"Source Sans Pro\"')")
        assert watched.problems == []

        lecture = open_deck(browser, paths[-1])
        seen = advance(lecture.page, 12)
        assert lecture.page.evaluate("Reveal.getTotalSlides()") >= len(LECTURE) * 3
        assert "50-minute lecture" in lecture.page.locator("section").first.text_content()
        assert len(set(seen)) == 13 and lecture.problems == []
