"""Debian's headless Chromium, driven by Playwright for Python: what every browser test shares.

No browser is downloaded (never ``playwright install``): the tests drive ``/usr/bin/chromium``
(``apt-get install chromium``; ``.ci/run`` installs it) and are skipped, saying why, without it.
``offline_page`` opens a page that records every request leaving the machine (anything but
``file:``, ``data:``, ``blob:`` and 127.0.0.1) and every console error, and answers each outside
request with a refusal, so a page that needs the network shows it at once.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import pytest

CHROMIUM = shutil.which("chromium")
#: As this project's machines need them: no sandbox (root), no GPU, and none of Chromium's own
#: background requests (update checks, sync), which this machine's closed network refuses.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_SCHEMES = {"file", "data", "blob", "about", "chrome-extension", "devtools"}
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def skip_without_a_browser() -> Any:
    """``playwright.sync_api``, or skip the calling module saying what is missing."""
    if CHROMIUM is None:
        pytest.skip(
            "Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)",
            allow_module_level=True,
        )
    return pytest.importorskip(
        "playwright.sync_api",
        reason="Playwright for Python is not installed "
        "(pip install playwright; it is in the test extra)",
    )


def is_outside(url: str) -> bool:
    """Whether a request for ``url`` would leave this machine."""
    parsed = urlparse(url)
    return parsed.scheme not in LOCAL_SCHEMES and parsed.hostname not in LOCAL_HOSTS


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's ``Browser``), closed on exit."""
    sync_api = skip_without_a_browser()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Watched:
    """A page, the outside requests it tried (refused) and the console errors it logged."""

    page: Any
    outside: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return (
            [f"request outside: {url}" for url in self.outside]
            + [f"console error: {text}" for text in self.console_errors]
            + [f"page error: {text}" for text in self.page_errors]
        )


def offline_page(browser: Any, **context_options: Any) -> Watched:
    """A new page in its own context that refuses and records every request leaving the
    machine, and records console and page errors (``Watched.problems``)."""
    context = browser.new_context(**context_options)
    page = context.new_page()
    watched = Watched(page)

    def route(route: Any) -> None:
        if is_outside(route.request.url):
            watched.outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", route)
    page.on("console", lambda m: m.type == "error" and watched.console_errors.append(m.text))
    page.on("pageerror", lambda e: watched.page_errors.append(str(e)))
    return watched
