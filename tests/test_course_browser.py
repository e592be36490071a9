"""``placement-edu course DIR`` from the built wheel, as a learner gets it: a fresh venv with the
wheel and its ``[course]`` extra, nothing else (torch pinned to the release requirements-dev.txt
names, from this machine's wheels, never a CUDA download). The command copies the course into DIR
and starts JupyterLab on ``notebooks/00_start_here.ipynb``; Chromium opens that notebook, every
cell renders, and the notebook is not marked modified. Then the server is stopped (SIGTERM, a
second Ctrl-C): it exits 0, no process of it is left (its kernels included), and the TMPDIR it
was given is as it was found: empty.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from placement_edu.course import FIRST
from tests.browser_support import chromium, offline_page, skip_without_a_browser
from tests.test_setup import _requirements
from tests.test_wheel import build_wheel, fresh_venv

pytestmark = pytest.mark.browser

skip_without_a_browser()

ROOT = Path(__file__).resolve().parents[1]
#: Lab settings: every cell in the page (no windowing: a cell off screen is still in the DOM), and
#: no question about Jupyter's news over the notebook.
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}
#: The notebook in the main area, seen through JupyterLab's own objects (the test's config
#: exposes the app as window.jupyterapp).
WIDGET = "window.jupyterapp.shell.currentWidget"
KERNEL_IDLE = f"{WIDGET}?.sessionContext?.session?.kernel?.status === 'idle'"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_naming(text: str) -> list[str]:
    """The command lines of this machine's processes that contain ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended while we looked
            continue
        if text in line:
            found.append(line.strip())
    return found


@pytest.fixture(scope="module")
def course_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv's bin/ with the wheel and its course extra."""
    _, wheel = build_wheel(tmp_path_factory.mktemp("build"))
    torch = _requirements(ROOT / "requirements-dev.txt")["torch"]
    return fresh_venv(
        tmp_path_factory.mktemp("course") / "venv",
        f"placement-edu[course] @ {wheel.as_uri()}",
        f"torch{torch}",
    )


@dataclass
class Served:
    """The command's JupyterLab, running; ``stop`` ends it and says what is left."""

    server: subprocess.Popen
    url: str
    dir: Path
    root: Path
    log: Path

    def stop(self) -> tuple[int, list[str], list[str]]:
        """(its exit status, the processes still naming its folder -- its kernels' command lines
        name their connection files there --, what is left in the TMPDIR it was given)."""
        if self.server.poll() is None:
            # SIGTERM: how a service manager (or a second Ctrl-C in a terminal) stops the server
            # -- it shuts its kernels down, then exits. (A first Ctrl-C asks y/n on a terminal.)
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        left = sorted(p.name for p in (self.root / "tmp").iterdir())
        return self.server.returncode, _processes_naming(str(self.root)), left


@pytest.fixture(scope="module")
def served(course_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``placement-edu course DIR --no-browser --port P`` with JUPYTER_TOKEN, started in a folder
    of its own, with a TMPDIR and Jupyter folders of its own."""
    root = tmp_path_factory.mktemp("learner")
    jupyter = root / "jupyter"
    (root / "tmp").mkdir()
    for name, value in SETTINGS.items():
        path = jupyter / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    (jupyter / "config").mkdir()
    (jupyter / "config" / "jupyter_lab_config.json").write_text(
        json.dumps({"LabApp": {"expose_app_in_browser": True}})
    )
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_TOKEN=token,
        TMPDIR=str(root / "tmp"),
        JUPYTER_CONFIG_DIR=str(jupyter / "config"),
        JUPYTER_RUNTIME_DIR=str(jupyter / "runtime"),
        JUPYTER_DATA_DIR=str(jupyter / "data"),
        JUPYTERLAB_SETTINGS_DIR=str(jupyter / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(jupyter / "workspaces"),
    )
    log = root / "lab.log"
    command = [str(course_bin / "placement-edu"), "course", "DIR", "--no-browser"]
    with open(log, "w") as out:
        server = subprocess.Popen(
            [*command, "--port", str(port)], cwd=root, env=env, stdout=out, stderr=out
        )
    served = Served(
        server, f"http://127.0.0.1:{port}/lab/tree/{FIRST}?token={token}", root / "DIR", root, log
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"the course's JupyterLab did not start:\n{log.read_text()[-3000:]}"
                    )
                time.sleep(0.3)
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def opened(served: Served) -> dict[str, Any]:
    """00_start_here as the command's JupyterLab shows it, its kernel connected and idle."""
    with chromium() as browser:
        watched = offline_page(browser, viewport={"width": 1400, "height": 1000})
        page = watched.page
        page.goto(served.url)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        page.wait_for_function(KERNEL_IDLE, timeout=60_000)
        time.sleep(1)  # (anything that would mark it modified on opening has happened by now)
        return {
            "title": page.evaluate(f"{WIDGET}.title.label"),
            "path": page.evaluate(f"{WIDGET}.context.path"),
            "dirty": page.evaluate(f"{WIDGET}.context.model.dirty"),
            "dirty_tabs": page.locator(".lm-TabBar-tab.jp-mod-dirty").count(),
            "cells": page.locator(".jp-Notebook .jp-Cell").count(),
            "heading": page.locator(".jp-RenderedMarkdown h1").first.inner_text(),
            "problems": [p for p in watched.problems if "request outside" in p],
        }


def test_the_command_copies_the_course_and_opens_00_start_here(
    opened: dict[str, Any], served: Served
) -> None:
    assert (opened["title"], opened["path"]) == ("00_start_here.ipynb", FIRST)
    notebook = json.loads((served.dir / FIRST).read_text())
    assert opened["cells"] == len(notebook["cells"])  # every cell rendered
    first = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    heading = next(line for line in "".join(first["source"]).splitlines() if line.startswith("# "))
    assert opened["heading"].strip().rstrip("¶").strip() == heading[2:].strip()
    assert (served.dir / "docs" / "theory.md").is_file()
    assert opened["problems"] == []  # JupyterLab asked nothing of the outside world


def test_the_notebook_opens_unmodified(opened: dict[str, Any]) -> None:
    assert opened["dirty"] is False and opened["dirty_tabs"] == 0


def test_the_server_stops_cleanly_leaving_nothing_behind(
    opened: dict[str, Any], served: Served
) -> None:
    """SIGTERM to the command -- JupyterLab, which took its process's place (``os.execv``)."""
    status, processes, tmpdir = served.stop()
    assert status == 0, served.log.read_text()[-3000:]
    assert processes == []  # the server and the notebook's kernel have ended
    assert tmpdir == []
    assert "Shutting down" in served.log.read_text()
