"""The set-up files agree with each other and work off this project's machines: the extras are
cut by audience (the plain install is numpy alone), the pins a fresh machine resolves from PyPI
carry no local version ("+cpu": PyPI serves none), Binder's file keeps the CPU index to itself and
asks for the core and every package of the course extra, and the version is written once."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import placement_edu

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()


def _requirements(path: Path) -> dict[str, str]:
    """name -> the rest of the line (version specifier), for the package lines of a requirements
    file."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        out[_name(line)] = line[len(_name(line)) :].strip()
    return out


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _extra(name: str) -> dict[str, str]:
    """An extra of pyproject.toml as name -> version specifier."""
    wanted = _pyproject()["project"]["optional-dependencies"][name]
    return {_name(r): r[len(_name(r)) :].strip() for r in wanted}


def test_the_plain_install_is_numpy_alone_and_each_extra_serves_one_audience() -> None:
    project = _pyproject()["project"]
    assert project["dependencies"] == ["numpy>=1.24"]
    extras = project["optional-dependencies"]
    assert set(extras) == {"course", "site", "hf", "test", "dev"}  # no "notebooks" alias left
    assert set(_extra("course")) == {
        "jupyterlab",
        "ipykernel",
        "ipywidgets",
        "matplotlib",
        "torch",
        "nbconvert",
        "jupyterlab-rise",
    }
    assert _extra("course")["jupyterlab-rise"] == "==0.43.1"
    # the site is built offline with exactly these (Jupyter Book 2 fetches its theme)
    assert _extra("site") == {
        "sphinx": "==9.0.4",
        "myst-nb": "==1.4.0",
        "sphinx-book-theme": "==1.4.0",
    }
    assert set(_extra("hf")) == {"transformers"}
    assert {"pytest", "nbval", "playwright", "ruff", "mypy", "build", "uv"} <= set(_extra("test"))
    assert extras["dev"] == ["placement-edu[course,site,hf,test]"]


def test_a_fresh_machines_pypi_requirements_pin_torch_without_a_local_version() -> None:
    dev = _requirements(ROOT / "requirements-dev.txt")
    assert dev["torch"] == "==2.13.0"  # never "+cpu": PyPI has no such wheel
    code = [
        line
        for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
        if not line.startswith("#")
    ]
    assert "download.pytorch.org" not in "".join(code)
    assert "-e .[dev]" in code


def test_binder_pins_the_same_torch_release_on_the_cpu_index_and_asks_for_the_course() -> None:
    binder_text = (ROOT / "binder" / "requirements.txt").read_text()
    binder = _requirements(ROOT / "binder" / "requirements.txt")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in binder_text
    assert binder["torch"] == "==2.13.0+cpu"
    assert binder["torch"].split("+")[0] == _requirements(ROOT / "requirements-dev.txt")["torch"]
    wanted = {_name(r): r for r in _pyproject()["project"]["dependencies"]} | _extra("course")
    assert set(binder) == set(wanted)
    for name, specifier in _extra("course").items():
        if name != "torch":
            assert binder[name] == specifier, (name, binder[name], specifier)
    assert binder["numpy"] == ">=1.24"
    assert "pip install --no-deps ." in (ROOT / "binder" / "postBuild").read_text()


def test_the_version_is_written_once_and_pyproject_reads_it() -> None:
    pyproject = _pyproject()
    assert pyproject["project"]["dynamic"] == ["version"] and "version" not in pyproject["project"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "placement_edu.__version__"
    }
    assert re.fullmatch(r"\d+\.\d+\.\d+", placement_edu.__version__)
    assert f"## [{placement_edu.__version__}] - " in (ROOT / "CHANGELOG.md").read_text()


def test_the_project_is_publishable_licence_urls_classifiers_and_types() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License") and (
        "Copyright (c) 2026 the placement_edu contributors" in licence
    )
    urls = project["urls"]
    assert urls["Repository"] == "https://github.com/placement-edu/placement_edu"
    # every other URL is a page of the repository: the address is named once
    assert all(url.startswith(urls["Repository"]) for url in urls.values()), urls
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Changelog"}
    assert "Typing :: Typed" in project["classifiers"]
    assert (ROOT / "placement_edu" / "py.typed").is_file()
    package_data = _pyproject()["tool"]["setuptools"]["package-data"]["placement_edu"]
    assert {"py.typed", "data/profiles/*.json", "course/vendor/**/*"} <= set(package_data)


def test_the_readme_opens_with_the_learners_command_then_the_developers() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    learner, tests = blocks[0], blocks[1]
    assert '".[course]"' in learner and learner.endswith("placement-edu course")
    assert "torch==2.13.0" in learner  # the release requirements-dev.txt pins
    assert tests.endswith(".venv/bin/python -m tests.stages") and "requirements-dev.txt" in tests
    assert tests in (ROOT / ".ci" / "run").read_text()
