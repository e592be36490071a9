"""Every widget of the course in one notebook, so the browser test runs widgets, not whole
notebooks.

nbval executes every notebook top to bottom; the browser test then needs each *widget* live, not
each notebook re-run. ``gallery`` takes each widget cell of each notebook (a code cell whose saved
output is the widget's still, ``.placement-edu-still``) with just the earlier statements it needs:
the imports and assignments that bind its free names, found by walking the notebook's code cells
backwards (``needed``). The gallery is made from the notebooks at test time, so it follows them.
"""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path

STILL = "placement-edu-still"


def code_cells(notebook: Path) -> list[tuple[str, list]]:
    """(source, outputs) of each code cell, IPython magics (``%matplotlib inline``) left out."""
    cells = json.loads(notebook.read_text())["cells"]
    return [
        (
            "".join(line for line in c["source"] if not line.lstrip().startswith("%")),
            c.get("outputs", []),
        )
        for c in cells
        if c["cell_type"] == "code"
    ]


def widget_cells(notebook: Path) -> list[int]:
    """Indices (among the code cells) of the cells whose saved output is a widget's still."""
    return [
        i for i, (_, outputs) in enumerate(code_cells(notebook)) if STILL in json.dumps(outputs)
    ]


def _free_names(node: ast.AST) -> set[str]:
    bound = {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    bound |= {
        a.arg
        for n in ast.walk(node)
        if isinstance(n, ast.Lambda | ast.FunctionDef)
        for a in n.args.args
    }
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - bound - set(dir(builtins))


def _binds(statement: ast.stmt) -> set[str]:
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    if isinstance(statement, ast.Assign):
        return {n.id for t in statement.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(statement, ast.FunctionDef | ast.ClassDef):
        return {statement.name}
    return set()


def needed(sources: list[str], source: str) -> list[str]:
    """The statements of ``sources`` (earlier cells, in order) that ``source`` needs, in order: for
    each free name the last statement binding it before, then what that statement needs."""
    statements = [(s, text) for text in sources for s in ast.parse(text).body]
    wanted, chosen = _free_names(ast.parse(source)), []
    for i in range(len(statements) - 1, -1, -1):
        statement, text = statements[i]
        if _binds(statement) & wanted:
            wanted = (wanted - _binds(statement)) | _free_names(statement)
            chosen.append(i)
    return [
        ast.get_source_segment(statements[i][1], statements[i][0]) or "" for i in sorted(chosen)
    ]


def gallery(notebooks: list[Path]) -> dict:
    """A notebook (nbformat 4, as JSON) with, for each widget cell of each notebook, a heading
    naming the notebook and one code cell: the statements it needs, then the cell itself."""
    cells: list[dict] = [
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "%matplotlib inline",
        }
    ]
    for notebook in notebooks:
        code = code_cells(notebook)
        for index in widget_cells(notebook):
            source = code[index][0]
            setup = needed([text for text, _ in code[:index]], source)
            cells.append(
                {
                    "cell_type": "markdown",
                    "metadata": {},
                    "source": f"## {notebook.stem}, cell {index}",
                }
            )
            cells.append(
                {
                    "cell_type": "code",
                    "metadata": {},
                    "execution_count": None,
                    "outputs": [],
                    "source": "\n".join(setup + [source]),
                }
            )
    for number, cell in enumerate(cells):
        cell["id"] = f"gallery-{number}"
    # The course's own kernel metadata, so that JupyterLab starts that kernel without asking.
    course = json.loads(notebooks[0].read_text())["metadata"]
    metadata = {key: course[key] for key in ("kernelspec", "language_info")}
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
