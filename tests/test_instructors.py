"""docs/instructors.md states what the package does (issue 38): each number and name on the page
is read here from where the package keeps it -- the lecture path (``slides.LECTURE``), the Binder
link, the count of exercises, the server's and the pool's idle times, RISE's pin and theme -- so
the page cannot drift from the course."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from placement_edu.course import SERVER_CONFIG, binder_url, notebooks
from placement_edu.course.site import JUPYTERHUB_VARIABLE
from placement_edu.course.slides import LECTURE, lecture_minutes
from placement_edu.exercises import EXERCISES
from placement_edu.runtime.processes.pool import IDLE_S
from tests.normalise_notebooks import RISE

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
FLAT = " ".join(PAGE.split())


def test_the_lecture_table_is_the_lecture_path_the_deck_is_made_of():
    assert f"## The {lecture_minutes()}-minute lecture path" in PAGE
    rows = re.findall(r"^\| (?!stop |---)(.+) \|$", PAGE, flags=re.M)
    assert rows == [
        f"{s.what} | [{s.notebook[:2]}](../notebooks/{s.notebook}.ipynb) | {s.minutes} | "
        + "; ".join(s.sections)
        for s in LECTURE
    ]


def test_the_commands_links_and_names_are_the_packages():
    assert binder_url("00_start_here") in PAGE.split("```text\n", 1)[1].split("\n```")[0]
    first, last = notebooks()[0].stem, notebooks()[-1].stem
    assert f"`OUT/{first}.slides.html` to `OUT/{last}.slides.html`" in FLAT
    assert "`OUT/lecture.slides.html`" in FLAT and "`OUT/_vendor/`" in FLAT
    assert f"`{JUPYTERHUB_VARIABLE}`" in FLAT
    assert f'its "{RISE["theme"]}" theme' in FLAT
    course = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["course"]
    (rise,) = [pin for pin in course if pin.startswith("jupyterlab-rise")]
    assert f"with jupyterlab-rise {rise.split('==')[1]} and ipywidgets 8" in FLAT


def test_the_numbers_are_the_courses():
    assert len(notebooks()) == 16 and PAGE.startswith("# For instructors\n\nThe course is sixteen")
    # (at least three a notebook: tests/test_exercises.py)
    assert f"at least three exercises, {len(EXERCISES)} in all" in FLAT
    idle = re.search(r"cull_idle_timeout = (\d+)", SERVER_CONFIG.read_text())
    assert idle and f"a kernel idle for {int(idle.group(1)) // 60} minutes" in FLAT
    assert f"warm ranks close after {int(IDLE_S) // 60} idle minutes" in FLAT
    start = json.loads((ROOT / "notebooks" / "00_start_here.ipynb").read_text())
    said = " ".join("".join(c["source"]) for c in start["cells"] if c["cell_type"] == "markdown")
    # 00 states no container size (a learner's machine is not Binder): it prints the limit it runs
    # under (runtime.memory_limit); this page gives Binder's, for the instructor
    assert "(the cell below prints this container's)" in " ".join(said.split())
    assert "memory_limit()" in " ".join("".join(c["source"]) for c in start["cells"])
    assert "1–2 GiB for everything" in FLAT
