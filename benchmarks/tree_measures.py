"""Measures of the package's tree (issue 41's "Done when"): import circles, modules over 600
lines, functions over 80 lines, ruff's complexity check at 15, mypy with every definition typed,
pairs of places that repeat six or more lines, and the names ``import placement_edu`` exposes.

    .venv/bin/python benchmarks/tree_measures.py            # everything (mypy takes ~20 s)
    .venv/bin/python benchmarks/tree_measures.py --quick    # without mypy and duplicates

Each line is a measure, its limit and the places over it. Exit status 0 whether or not the limits
hold: the architecture tests (tests/architecture/) assert them.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "placement_edu"
MODULE_LINES = 600
FUNCTION_LINES = 80
COMPLEXITY = 15


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, known: set[str], at_load: bool) -> set[str]:
    """The package modules ``name`` imports: ``at_load``, those that run when it is loaded (its
    module-level imports, not those inside functions or under ``if TYPE_CHECKING``); otherwise every
    import it names anywhere (a circle broken by a deferred import is still a circle of design)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if at_load and isinstance(node, ast.If) and _type_checking_only(node):
                continue
            if not at_load and not isinstance(node, (ast.Import, ast.ImportFrom)):
                visit([n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)])
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                submodules = {f"{base}.{a.name}" for a in node.names} & known
                found.update(submodules)
                if len(submodules) < len(node.names):  # a name from the module itself
                    found.add(base)

    visit(ast.parse(path.read_text()).body)
    return {m for m in found if m in known and m != name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            connect(v)
    return found


def long_functions(paths: dict[str, Path]) -> list[str]:
    rows = []
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    rows.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length})")
    return rows


def tool(*argv: str) -> list[str]:
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    return [line for line in run.stdout.splitlines() if line.strip()]


def report(label: str, rows: list[str], limit: str) -> None:
    print(f"{label}: {len(rows)} ({limit})")
    for row in rows:
        print(f"    {row}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip mypy and duplicates")
    quick = parser.parse_args().quick
    paths = modules()
    for at_load, label in ((True, "at load"), (False, "any import, deferred or for types")):
        graph = {n: imports_of(n, p, set(paths), at_load) for n, p in paths.items()}
        report(f"import circles, {label}", [" <-> ".join(c) for c in circles(graph)], "limit 0")
    big = [
        f"{p.relative_to(ROOT)} ({n})"
        for p in paths.values()
        if (n := len(p.read_text().splitlines())) > MODULE_LINES
    ]
    report(f"modules over {MODULE_LINES} lines", big, "limit 0")
    report(f"functions over {FUNCTION_LINES} lines", long_functions(paths), "limit 0")
    bin_dir = Path(sys.executable).parent
    ruff = [
        str(bin_dir / "ruff"), "check", "placement_edu", "--select", "C90", "--output-format",
        "concise", "--config", f"lint.mccabe.max-complexity={COMPLEXITY}",
    ]  # fmt: skip
    report(f"complexity over {COMPLEXITY}", [r for r in tool(*ruff) if "C901" in r], "limit 0")
    sys.path.insert(0, str(ROOT))
    import placement_edu

    names = sorted(n for n in placement_edu.__all__)
    print(f"names at the root: {len(names)} (limit 30)")
    if quick:
        return
    mypy = [str(bin_dir / "mypy"), "--disallow-untyped-defs", "placement_edu"]
    report("mypy --disallow-untyped-defs", [r for r in tool(*mypy) if "error:" in r], "limit 0")
    if shutil.which("duplicates"):
        rows = tool("duplicates", "--repo", "placement_edu", "--most", "200", "--seconds", "60")
        pairs = [r for r in rows if r.startswith("D")]
        same = [r for r in pairs if " shape" not in r]
        print(
            f"duplicated pairs: {len(pairs)} (limit 30), of identical text: {len(same)} (limit 0)"
        )
        for row in same:
            print(f"    {row}")


if __name__ == "__main__":
    main()
