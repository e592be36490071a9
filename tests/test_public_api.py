"""The public API is a list, not whatever the notebooks happen to import (issue 21).

The notebooks import only from the public modules (``placement_edu``, ``.timing``, ``.estimators``,
``.implementations``, ``.presentation``, ``.runtime``, ``.exercises``) and only the names each
lists in ``__all__``; a package's three lists agree (``_EXPORTS``, ``__all__`` and the imports
static tools read under ``TYPE_CHECKING``), and every exported name resolves."""

from __future__ import annotations

import ast
import dataclasses
import html
import importlib
import inspect
import json
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

import placement_edu
from placement_edu.shown import Shown

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
TASKS |= {"price", "fit", "run", "resolve"}


def test_the_root_holds_the_tasks_in_at_most_30_names() -> None:
    assert len(placement_edu.__all__) <= 30, placement_edu.__all__
    assert set(dir(placement_edu)) - set(placement_edu.__all__) == {
        "__version__",
        "PUBLIC_MODULES",
        "TOPIC_MODULES",
    }
    assert TASKS - set(placement_edu.__all__) == set()
    assert placement_edu.price.__module__ == "placement_edu.tasks"  # one configuration's price


def test_the_two_checkers_have_two_names() -> None:
    import placement_edu
    from placement_edu import exercises

    assert "check" in placement_edu.__all__ and "check" not in exercises.__all__
    assert "check_answer" in exercises.__all__


#: What a task takes (the specs) and what a result is made of (a schedule's entries, a step's
#: overlap streams): values, not results; each prints as its dataclass's repr.
NOT_RESULTS = {"Precision", "Strategy", "TransformerSpec", "ConcreteModel", "Hardware", "Link"}
NOT_RESULTS |= {"Setting"}  # the door's: what the tasks take, resolved
NOT_RESULTS |= {"Op", "Repeat", "Overlapped"}
SHOWN = ("__str__", "_repr_html_", "to_dict")


def returned_dataclasses(function: Callable[..., object]) -> list[type]:
    """The dataclasses ``function``'s return annotation names, in unions and containers too (the
    module's names under ``TYPE_CHECKING`` included)."""
    module = sys.modules[function.__module__]
    names = dict(vars(module))
    for node in ast.parse(Path(module.__file__).read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for i in (n for n in node.body if isinstance(n, ast.ImportFrom)):
                names |= {
                    a.name: getattr(importlib.import_module(i.module), a.name) for a in i.names
                }
    annotation = function.__annotations__.get("return")
    todo = [eval(annotation, names) if isinstance(annotation, str) else annotation]
    found = []
    while todo:
        t = todo.pop()
        if inspect.isclass(t) and dataclasses.is_dataclass(t):
            found.append(t)
        todo += typing.get_args(t)
    return found


def result_types() -> dict[type, str]:
    """Every dataclass a function of a public module returns, with the first such function."""
    found: dict[type, str] = {}
    for name in PUBLIC:
        module = importlib.import_module(name)
        for attribute in module.__all__:
            function = getattr(module, attribute)
            if isinstance(function, types.FunctionType):
                for t in returned_dataclasses(function):
                    found.setdefault(t, f"{name}.{attribute}")
    return found


def test_every_result_type_prints_renders_in_a_notebook_and_serialises() -> None:
    found = result_types()
    assert len(found) >= 25  # the enumeration reaches the results, not only a few
    lacking = [
        f"{t.__module__}.{t.__qualname__} (returned by {where})"
        for t, where in found.items()
        if t.__name__ not in NOT_RESULTS
        and not issubclass(t, Shown)
        and not all(any(m in k.__dict__ for k in t.__mro__[:-1]) for m in SHOWN)
    ]
    assert lacking == [], "inherit shown.Shown, or write __str__, _repr_html_ and to_dict"


def test_price_hands_times_flags_to_price_configuration_with_its_defaults() -> None:
    """``price``'s keywords are ``price_configuration``'s (``PriceOptions``): one that is given
    reaches it (bucketed overlap streams its units; at half the FLOP/s the compute takes twice as
    long), and one left out takes ``price_configuration``'s default, not a copy of it."""
    from placement_edu.pricing import price_configuration

    model = placement_edu.TransformerSpec(layers=32, hidden=4096, heads=32, seq=4096, vocab=32000)
    priced = placement_edu.price("zero3", model, "data=8", 8, overlap="bucketed", efficiency=0.5)
    direct = price_configuration(model, "data=8", "zero3", 8, overlap="bucketed", efficiency=0.5)
    assert priced.to_dict() == direct.to_dict()
    plain = placement_edu.price("zero3", model, "data=8", 8)
    assert priced.overlap == "bucketed" and len(priced.streams) > 0
    assert priced.hardware.flops == plain.hardware.flops / 2
    assert plain.to_dict() == price_configuration(model, "data=8", "zero3", 8).to_dict()
    assert plain.overlap == "per_pass" and plain.streams == ()


def test_a_result_prints_renders_and_serialises_its_own_figures() -> None:
    """ZeRO's Table 1 (Rajbhandari et al. 2020): Ψ = 7.5e9 under ZeRO-3 on 64 devices holds 16Ψ/64
    = 1.875 GB of model state; the step sends 3Ψ's ring bytes, 3 · 2 · 7.5e9 · 63/64 bytes."""
    report = placement_edu.analyze("zero3", 7.5e9, 64)
    model = placement_edu.TransformerSpec(layers=32, hidden=4096, heads=32, seq=4096, vocab=32000)
    priced = placement_edu.price("zero3", model, "data=8", 8)
    setting = placement_edu.resolve("zero3", model, "data=8")  # the same, through the door
    assert placement_edu.price(setting, global_batch=8).to_dict() == priced.to_dict()
    formula = int(placement_edu.analyze("zero3", model, mesh="data=8").memory.peak)
    step = placement_edu.step_time("zero3", model, "data=8", "mixed_adam", "h100-nvlink-ib")
    fit = placement_edu.fit("gpt2", devices=8)
    cases = [
        (report.memory, "1.875 GB", "model_state", 1_875_000_000),
        (report.schedule, "44.296875 GB", "ring_bytes", 3 * 2 * 7_500_000_000 * 63 // 64),
        (placement_edu.check("zero1", fault="skip-param-sync"), "state consistency: BROKEN", "", 0),
        (priced, f"{formula:,}", "peak_bytes", formula),  # pricing's peak is the formula's
        (step, f"step {step.total_s:.4g} s", "total_s", step.compute_s + step.exposed_comm_s),
        # GPT-2 on 8 devices in fp32: FSDPMemTracker measures the optimizer step's peak at
        # 311,129,940 bytes, and so does the derivation (notebooks 05 and 09 hold it to the byte)
        (fit, "optimizer step peak 0.31113 GB", "step_peak_bytes", 311_129_940),
    ]
    for result, printed, key, value in cases:
        assert printed in str(result), str(result)
        assert html.escape(printed) in result._repr_html_()
        serialised = json.loads(json.dumps(result.to_dict()))
        assert key == "" or serialised[key] == value, (key, serialised.get(key), value)
