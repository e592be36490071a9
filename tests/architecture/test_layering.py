"""Layers are enforced, not only described (STYLE.md): data flows specification -> derivation ->
presentation, and the runtime measures beside the core. Every import of every module under
placement_edu is read with ``ast`` -- at module level and inside functions -- and checked:

1. the core (the top-level modules) imports no presentation
   (plots, widgets), no command line and no runtime;
2. the runtime imports no command line and no presentation;
3. the modules import each other without a cycle (``test_tree_measures.test_no_import_circle``,
   with ``benchmarks/tree_measures.py``'s reader and cycle finder: one of each);
4. ``placement-edu table``, ``check`` and ``estimate`` never import torch.
5. a rank's entry module (``runtime/worker.py``) imports no presentation, command line, checker
   or report (nor matplotlib, ipywidgets, IPython);
6. within the core, the derivation of the ideal model's memory (``memory.py``) imports nothing of
   the real module's peak (``peak.py``, ``peak_axes.py``): the peak builds on the memory
   derivation, never the reverse;
7. the other tools' estimators (``estimators/``) import no report (``report.py``): a report sets
   the estimators beside our derivation, so an estimator that read a report would be reconciled
   with itself. (``estimators.reconcile.ours`` reads a report's fields; it names the type for
   mypy only, under ``TYPE_CHECKING``.)

Imports under ``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

PACKAGE = Path(__file__).resolve().parents[2] / "placement_edu"
ROOT = "placement_edu"
PRESENTATION = ("placement_edu.presentation",)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str) -> list[tuple[str, bool]]:
    """(imported placement_edu module, at module level?) for every import statement of ``module``
    that can run. ``from placement_edu.runtime import worker`` imports placement_edu.runtime.worker;
    ``from placement_edu.errors import expect`` imports placement_edu.errors."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    visit_statement(other, top)
                continue
            visit_statement(child, top)

    def visit_statement(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(
                (alias.name, top) for alias in node.names if alias.name.split(".")[0] == ROOT
            )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from .args import y
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] == ROOT:
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.append((sub if sub in MODULES else base, top))
        inside = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        visit(node, inside)

    visit(ast.parse(path.read_text(), str(path)), True)
    return [
        (name, top) for name, top in found if name in MODULES or name.rpartition(".")[0] in MODULES
    ]


def _is_under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


#: Everything but the layers above the core (presentation, the command line, the runtime, the
#: course's server files): the top-level modules and the core's packages (schedule/, timing/,
#: models/, estimators/, checker/, exercises/).
ABOVE_THE_CORE = ("presentation", "cli", "runtime", "course")
CORE = sorted(
    m
    for m in MODULES
    if m != ROOT and not any(_is_under(m, f"{ROOT}.{layer}") for layer in ABOVE_THE_CORE)
)
RUNTIME = sorted(m for m in MODULES if _is_under(m, "placement_edu.runtime"))


def test_the_module_lists_are_what_the_rules_are_about() -> None:
    # A guard on the guard: if the walk found nothing, every rule below would pass vacuously.
    assert {"placement_edu.models", "placement_edu.errors", "placement_edu.report"} <= set(CORE)
    assert {"placement_edu.timing.step", "placement_edu.schedule.derive"} <= set(CORE)
    assert {"placement_edu.runtime.worker", "placement_edu.runtime.args"} <= set(RUNTIME)
    assert ("placement_edu.runtime.args", False) in _imports("placement_edu.runtime.worker")
    assert ("placement_edu.cli.table", True) in _imports("placement_edu.cli")


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_presentation_command_line_or_runtime(module: str) -> None:
    forbidden = (*PRESENTATION, "placement_edu.cli", "placement_edu.runtime")
    bad = [name for name, _ in _imports(module) if any(_is_under(name, f) for f in forbidden)]
    assert bad == [], f"{module} (core) imports {bad}"


@pytest.mark.parametrize("module", RUNTIME)
def test_the_runtime_imports_no_command_line_or_presentation(module: str) -> None:
    forbidden = (*PRESENTATION, "placement_edu.cli")
    bad = [name for name, _ in _imports(module) if any(_is_under(name, f) for f in forbidden)]
    assert bad == [], f"{module} (runtime) imports {bad}"


def test_the_memory_derivation_imports_nothing_of_the_real_modules_peak() -> None:
    peak = ("placement_edu.peak", "placement_edu.peak_axes")
    bad = [name for name, _ in _imports("placement_edu.memory") if name in peak]
    assert bad == [], f"placement_edu.memory imports {bad}: the peak builds on it, not the reverse"


ESTIMATORS = [m for m in MODULES if _is_under(m, "placement_edu.estimators")]


@pytest.mark.parametrize("module", ESTIMATORS)
def test_the_estimators_import_no_report(module: str) -> None:
    bad = [name for name, _ in _imports(module) if _is_under(name, "placement_edu.report")]
    assert bad == [], f"{module} imports {bad}: a report sets the estimators beside our derivation"


def test_the_rules_read_an_import_under_type_checking_as_none(tmp_path: Path) -> None:
    # The guard behind rule 7's exception: the walk leaves out what never runs.
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from placement_edu.report import Report\n"
    )
    MODULES["placement_edu._probe"] = tmp_path / "probe.py"
    (tmp_path / "probe.py").write_text(source + "from placement_edu.units import GB\n")
    try:
        assert _imports("placement_edu._probe") == [("placement_edu.units", True)]
    finally:
        del MODULES["placement_edu._probe"]


def _fresh(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a fresh Python: nothing is imported before it."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _loads_torch(imports: str) -> bool:
    """Whether the import statements ``imports``, run by a fresh Python, load torch."""
    result = _fresh(f"import sys\n{imports}\nprint('TORCH', 'torch' in sys.modules)")
    assert "TORCH " in result.stdout, result.stderr[-2000:]
    return "TORCH True" in result.stdout


#: A transformer small enough to derive at once, as ``table``'s flags give it.
SMALL = "--layers 8 --hidden 64 --heads 4 --seq 16 --vocab 100"


@pytest.mark.parametrize(
    "argv",
    [
        ["table", "--params", "7.5e9", "--devices", "64", "--json"],
        f"table {SMALL} --devices 4 --strategies tp,pp --recompute selective "
        "--sequence-parallel".split(),
        ["check", "zero3"],
        ["check", "dp×tp", "--json"],
        ["table", "--params", "nan", "--devices", "8"],  # the error path too
        ["plan", "--params", "7e9", "--devices", "16", "--json"],
        ["estimate", "--convention", "deepspeed", "--params", "2.851e9", "--gpus-per-node", "8"],
        "estimate --convention megatron --layers 4 --hidden 64 --heads 4 --seq 16 --vocab 100 "
        "--tensor 2 --recompute selective --sequence-parallel".split(),
    ],
)
def test_derivation_commands_never_import_torch(argv: list[str]) -> None:
    code = textwrap.dedent(f"""
        import sys
        from placement_edu.cli import main
        status = main({argv!r})
        print("STATUS", status, file=sys.stderr)
        print("TORCH", "torch" in sys.modules, file=sys.stderr)
    """)
    result = _fresh(code)
    assert "TORCH False" in result.stderr, result.stderr[-2000:]
    expected = 2 if "nan" in argv else 0
    assert f"STATUS {expected}" in result.stderr, result.stderr[-2000:]


def test_the_torch_check_would_see_torch_if_it_were_imported() -> None:
    # The toy models are torch modules: the same probe must report torch there.
    assert _loads_torch("from placement_edu.runtime import TinyTransformer")


def test_torch_free_runtime_modules_import_without_torch() -> None:
    # runtime/__init__.py is lazy (PEP 562): the run options come without torch.
    assert not _loads_torch("import placement_edu.runtime.args, placement_edu.runtime.verdict")


def test_a_rank_imports_no_presentation_command_line_checker_or_report() -> None:
    # Every rank imports its entry module (worker.py) with torch: nothing else it never calls.
    # (placement_edu/__init__.py is lazy, PEP 562, so the package brings no core module along.)
    code = (
        "import sys\nimport placement_edu.runtime.worker\n"
        "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in "
        "('matplotlib', 'ipywidgets', 'IPython', 'placement_edu')))"
    )
    result = _fresh(code)
    line = next((s for s in result.stdout.splitlines() if s.startswith("LOADED")), None)
    assert line is not None, result.stderr[-2000:]
    loaded = ast.literal_eval(line.removeprefix("LOADED "))
    assert "placement_edu.runtime.worker" in loaded  # the probe sees what the import brought
    forbidden = (
        "matplotlib",
        "ipywidgets",
        "IPython",
        *PRESENTATION,
        "placement_edu.cli",
        "placement_edu.checker",
        "placement_edu.report",
        "placement_edu.runtime.processes.launcher",
    )
    bad = [m for m in loaded if any(_is_under(m, f) for f in forbidden)]
    assert bad == [], f"a rank's entry module imports {bad}"


def test_the_peak_derivation_and_a_cached_profile_import_no_torch() -> None:
    # Issue 22: placement_edu.peak and placement_edu.architectures are core (plain data and
    # arithmetic); reading a cached activation profile (runtime/measurement/profiles.py) needs no
    # torch either.
    assert not _loads_torch(
        "import placement_edu.peak, placement_edu.architectures\n"
        "import placement_edu.runtime.measurement.profiles\n"
        "import placement_edu.cli.fit"
    )
    assert {"placement_edu.peak", "placement_edu.architectures"} <= set(CORE)


def test_a_notebooks_imports_bring_no_torch_until_a_cell_runs_ranks() -> None:
    # Issue 28: a kernel that imported torch holds ~125 MiB more for its life, and a learner
    # leaves every notebook's kernel open. Every widget and chart the notebooks import, and the
    # runtime's entry points, come without torch: it is imported by the call that runs ranks.
    code = (
        "import sys\n"
        "import placement_edu, placement_edu.presentation as p, placement_edu.runtime as r\n"
        "for name in p.__all__: getattr(p, name)\n"
        "for name in set(r.__all__) - {'Adam', 'TinyTransformer'}: getattr(r, name)\n"
        "from placement_edu.runtime import RunConfig\n"
        "from placement_edu.runtime.result import predict\n"
        "config = RunConfig('zero3', 4)\n"
        "for c in (config, RunConfig('tp', 2), RunConfig('dp×tp', 4), RunConfig('pp', 2)):\n"
        "    c.validate(); predict(c)\n"  # what a kernel derives beside a run's measurements
        "print('TORCH', 'torch' in sys.modules, config.label, config.precision.name)"
    )
    result = _fresh(code)
    assert "TORCH False zero3 on data=4 fp64_adam" in result.stdout, result.stderr[-2000:]


def test_the_toy_shapes_read_without_torch_list_the_parameters_the_torch_modules_train() -> None:
    # runtime/engines/toy_shapes.py states the toy models' sizes for a kernel without torch; the
    # modules
    # the ranks train (runtime/engines/toy.py) must list exactly those parameters, in the same
    # order.
    from placement_edu.models import ConcreteModel
    from placement_edu.runtime import RunConfig

    for config in (RunConfig("zero3", 4), RunConfig("dp", 2, width=20, layers=3)):
        module, shape = config.module(), config.shape()
        assert ConcreteModel.from_module(shape) == ConcreteModel.from_module(module)
        assert module.activation_elements(4) == shape.activation_elements(4)
    assert RunConfig("dp", 2, width=20, layers=3).shape().activation_elements(4) == 3 * 4 * 20
    block = RunConfig("tp", 2)
    assert ConcreteModel.from_module(block.shape()) == ConcreteModel.from_module(block.module())
    assert block.concrete_model().psi == 576  # 5 h·h + 2 h·f, h = 8, f = 16
