"""placement_edu: distributed training strategies as placements of four training states.

Specification (placement, model, mesh, precision) -> derivation (memory, schedule, correctness)
-> presentation (tables, plots, widgets, CLI). See SPEC.md for the rules this package implements.
"""

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

__all__ = [
    "AXES", "COMPOSITIONS", "FAULTS", "GB", "GiB", "MODEL_STATES", "PRESETS", "STRATEGIES",
    "CheckResult", "Comparison", "ConcreteModel", "GradStatus", "Memory", "Mesh", "Mode", "ModelSpec", "Op",
    "Placement", "PlacementError", "Precision", "Report", "Schedule", "State", "Strategy",
    "TensorSpec", "TransformerSpec",
    "analyze", "check", "compare", "derive_memory", "derive_schedule", "get_precision", "get_strategy",
    "pipeline_bubble", "pipeline_order",
]
