"""The public API is a list, not whatever the notebooks happen to import (issue 21).

The notebooks import only from the public modules (``placement_edu``, ``.timing``, ``.estimators``,
``.implementations``, ``.presentation``, ``.runtime``, ``.exercises``) and only the names each
lists in ``__all__``; a package's three lists agree (``_EXPORTS``, ``__all__`` and the imports
static tools read under ``TYPE_CHECKING``), and every exported name resolves."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

import placement_edu

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PUBLIC = placement_edu.PUBLIC_MODULES
LAZY = ("placement_edu", "placement_edu.presentation", "placement_edu.runtime")


def notebook_imports(notebook: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from placement_edu... import name`` in the notebook's code
    cells."""
    out = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(
            line for line in cell["source"] if not line.lstrip().startswith(("%", "!"))
        )
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("placement_edu"):
                out += [(node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                out += [(a.name, "") for a in node.names if a.name.startswith("placement_edu")]
    return out


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_imports_only_the_public_api(notebook: Path) -> None:
    outside = [
        f"from {m} import {n}"
        for m, n in notebook_imports(notebook)
        if m not in PUBLIC or n not in importlib.import_module(m).__all__
    ]
    assert outside == [], f"{notebook.name} imports what the public API does not list: {outside}"


def _type_checking_imports(package: str) -> dict[str, str]:
    tree = ast.parse(Path(importlib.import_module(package).__file__).read_text())
    block = next(
        n
        for n in tree.body
        if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
    )
    return {
        a.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }


@pytest.mark.parametrize("package", LAZY)
def test_a_packages_export_lists_agree_and_every_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == sorted(module._EXPORTS)
    assert _type_checking_imports(package) == module._EXPORTS
    for name in module.__all__:
        assert getattr(module, name) is getattr(
            importlib.import_module(module._EXPORTS[name]), name
        )


@pytest.mark.parametrize("module", PUBLIC)
def test_every_listed_name_of_a_public_module_exists(module: str) -> None:
    m = importlib.import_module(module)
    assert [n for n in m.__all__ if not hasattr(m, n)] == []


#: The root's tasks (issue 41 item 7): each has its function there; the helpers live in their
#: modules (``PUBLIC_MODULES``), and the root stays a surface a learner reads at a glance.
TASKS = {"analyze", "compare", "check", "derive_memory", "derive_schedule", "plan", "step_time"}
TASKS |= {"price", "run"}


def test_the_root_holds_the_tasks_in_at_most_30_names() -> None:
    assert len(placement_edu.__all__) <= 30, placement_edu.__all__
    assert TASKS - set(placement_edu.__all__) == set()
    assert placement_edu.price.__module__ == "placement_edu.tasks"  # one configuration's price


def test_the_two_checkers_have_two_names() -> None:
    import placement_edu
    from placement_edu import exercises

    assert "check" in placement_edu.__all__ and "check" not in exercises.__all__
    assert "check_answer" in exercises.__all__
