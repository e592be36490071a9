"""The set-up files agree with each other and work off this project's machines: the pins a fresh
machine resolves from PyPI carry no local version ("+cpu": PyPI serves none), Binder's file keeps
the CPU index to itself and asks for every dependency pyproject.toml declares."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent


def _requirements(path: Path) -> dict[str, str]:
    """name -> the rest of the line (version specifier), for the package lines of a requirements
    file."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name = re.match(r"[A-Za-z0-9_.\-]+", line).group(0).lower()
        out[name] = line[len(name) :].strip()
    return out


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_a_fresh_machines_pypi_requirements_pin_torch_without_a_local_version() -> None:
    dev = _requirements(ROOT / "requirements-dev.txt")
    assert dev["torch"] == "==2.13.0"  # never "+cpu": PyPI has no such wheel
    assert "download.pytorch.org" not in "".join(
        line
        for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
        if not line.startswith("#")
    )


def test_binder_pins_the_same_torch_release_on_the_cpu_index_and_asks_for_every_dependency() -> (
    None
):
    binder_text = (ROOT / "binder" / "requirements.txt").read_text()
    binder = _requirements(ROOT / "binder" / "requirements.txt")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in binder_text
    assert binder["torch"].split("+")[0] == _requirements(ROOT / "requirements-dev.txt")["torch"]
    project = _pyproject()
    wanted = project["dependencies"] + project["optional-dependencies"]["notebooks"]
    for requirement in wanted:
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()
        assert name in binder, (
            f"binder/requirements.txt lacks {name} (pyproject asks {requirement})"
        )
        if name != "torch":
            assert binder[name] == requirement[len(name) :].strip(), (
                name,
                binder[name],
                requirement,
            )


def test_the_readme_opens_with_the_two_commands_ci_and_a_fresh_machine_use() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    main, tests = blocks[0], blocks[1]
    assert (
        "pip install -r requirements-dev.txt" in main
        and "jupyter lab --allow-root notebooks/00_start_here.ipynb" in main
    )
    assert tests.endswith(".venv/bin/python -m pytest")
    assert tests in (ROOT / ".ci" / "run").read_text()
