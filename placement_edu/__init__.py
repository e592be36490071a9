"""placement_edu: distributed training strategies as placements of four training states.

Specification (placement, model, mesh, precision) -> derivation (memory, schedule, correctness)
-> presentation (tables, plots, widgets, CLI). See SPEC.md for the rules this package implements.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Where each public name lives. Imported on first use (PEP 562): a rank of the runtime imports
#: ``placement_edu.runtime.worker``, and with it this package, without the checker and the report
#: it never calls (``from placement_edu import check`` still imports them, then).
_EXPORTS = {
    **dict.fromkeys(["CheckResult", "check"], "placement_edu.checker"),
    "PlacementError": "placement_edu.errors",
    "FAULTS": "placement_edu.faults",
    **dict.fromkeys(["Memory", "derive_memory"], "placement_edu.memory"),
    "Mesh": "placement_edu.mesh",
    **dict.fromkeys(["ConcreteModel", "ModelSpec", "TensorSpec", "TransformerSpec"], "placement_edu.models"),
    **dict.fromkeys(["AXES", "MODEL_STATES", "GradStatus", "Mode", "Placement", "State"],
                    "placement_edu.placement"),
    **dict.fromkeys(["PRESETS", "Precision", "get_precision"], "placement_edu.precision"),
    **dict.fromkeys(["Comparison", "Report", "analyze", "compare"], "placement_edu.report"),
    **dict.fromkeys(["Op", "Schedule", "derive_schedule", "pipeline_bubble", "pipeline_order"],
                    "placement_edu.schedule"),
    **dict.fromkeys(["COMPOSITIONS", "STRATEGIES", "Strategy", "get_strategy"], "placement_edu.strategies"),
    **dict.fromkeys(["GB", "GiB"], "placement_edu.units"),
}

__all__ = [
    "AXES", "COMPOSITIONS", "FAULTS", "GB", "GiB", "MODEL_STATES", "PRESETS", "STRATEGIES",
    "CheckResult", "Comparison", "ConcreteModel", "GradStatus", "Memory", "Mesh", "Mode", "ModelSpec", "Op",
    "Placement", "PlacementError", "Precision", "Report", "Schedule", "State", "Strategy",
    "TensorSpec", "TransformerSpec",
    "analyze", "check", "compare", "derive_memory", "derive_schedule", "get_precision", "get_strategy",
    "pipeline_bubble", "pipeline_order",
]

if TYPE_CHECKING:
    from placement_edu.checker import CheckResult, check
    from placement_edu.errors import PlacementError
    from placement_edu.faults import FAULTS
    from placement_edu.memory import Memory, derive_memory
    from placement_edu.mesh import Mesh
    from placement_edu.models import ConcreteModel, ModelSpec, TensorSpec, TransformerSpec
    from placement_edu.placement import AXES, MODEL_STATES, GradStatus, Mode, Placement, State
    from placement_edu.precision import PRESETS, Precision, get_precision
    from placement_edu.report import Comparison, Report, analyze, compare
    from placement_edu.schedule import Op, Schedule, derive_schedule, pipeline_bubble, pipeline_order
    from placement_edu.strategies import COMPOSITIONS, STRATEGIES, Strategy, get_strategy
    from placement_edu.units import GB, GiB

#: The modules the eager ``__init__`` used to import: ``import placement_edu`` followed by
#: ``placement_edu.schedule.derive_schedule(...)`` keeps working.
_SUBMODULES = frozenset(m.rpartition(".")[2] for m in _EXPORTS.values()) | {"composition"}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value                            # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
