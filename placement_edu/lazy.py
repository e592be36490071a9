"""Names a package exports, imported on first use (PEP 562).

``__getattr__, __dir__ = exports(__name__, EXPORTS, globals())`` in a package's ``__init__``: each
name of ``EXPORTS`` (name -> the module that defines it) is imported when first looked up, then kept
in the package's namespace. A rank of the runtime imports ``placement_edu.runtime.worker``, and
with it these packages, without importing what it never calls (the checker, matplotlib, widgets).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str,
    names: Mapping[str, str],
    namespace: dict[str, Any],
    submodules: frozenset[str] = frozenset(),
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``names`` lazily, and ``submodules`` (short
    names) as attributes too."""

    def __getattr__(name: str) -> object:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
