"""placement_edu: distributed training strategies as placements of four training states.

Specification (placement, model, mesh, precision) -> derivation (memory, schedule, correctness)
-> presentation (tables, plots, widgets, CLI). The theory: ``docs/theory.md`` ("SPEC §n" is its §n).

The public API, what the course's notebooks import (``tests/test_public_api.py`` checks it):

- ``placement_edu``                 the core: placements, models, meshes, precision, strategies,
                                    memory and schedule derivations, the checker, the planner
- ``placement_edu.timing``          time: hardware presets, α-β collectives, compute, step time
- ``placement_edu.estimators``      DeepSpeed's, Megatron's and Accelerate's estimators reproduced
- ``placement_edu.implementations`` PyTorch's own implementations, predicted
- ``placement_edu.presentation``    widgets, charts and the visual language
- ``placement_edu.runtime``         real runs on torch.distributed, measured against predicted
- ``placement_edu.exercises``       the exercises: ``check_answer``, ``reveal``, ``solution``
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from placement_edu.lazy import exports

#: This release: the one place it is written (pyproject.toml reads it; CHANGELOG.md says what
#: each release changed). A plain string, so ``import placement_edu`` needs nothing installed.
__version__ = "0.2.0"

#: Where each public name lives: the one list (``__all__`` is its keys). Imported on first use
#: (PEP 562): a rank of the runtime imports ``placement_edu.runtime.worker``, and with it this
#: package, without the checker and the report it never calls.
_EXPORTS = {
    **dict.fromkeys(["layers_on_stage"], "placement_edu.axes"),
    **dict.fromkeys(["CheckResult", "check"], "placement_edu.checker"),
    **dict.fromkeys(["RULES", "safety_violations"], "placement_edu.composition"),
    "PlacementError": "placement_edu.errors",
    **dict.fromkeys(
        [
            "MIXTRAL_8X7B",
            "MoESpec",
            "all_to_all_elements",
            "expert_capacity",
            "imbalance_text",
            "rank_load",
        ],
        "placement_edu.experts",
    ),
    **dict.fromkeys(["FAULTS", "applicable_faults", "strategies_for"], "placement_edu.faults"),
    **dict.fromkeys(["Memory", "derive_memory"], "placement_edu.memory"),
    "Mesh": "placement_edu.mesh",
    **dict.fromkeys(
        ["ConcreteModel", "ModelSpec", "TensorSpec", "TransformerSpec", "greedy_partition"],
        "placement_edu.models",
    ),
    **dict.fromkeys(
        ["AXES", "MODEL_STATES", "PHASES", "STARTUP", "GradStatus", "Mode", "Placement", "State"],
        "placement_edu.placement",
    ),
    **dict.fromkeys(["default_transformer", "group_links", "plan"], "placement_edu.planner"),
    **dict.fromkeys(["PRESETS", "Precision", "get_precision"], "placement_edu.precision"),
    **dict.fromkeys(["Comparison", "Report", "analyze", "compare"], "placement_edu.report"),
    **dict.fromkeys(
        [
            "OP_COSTS",
            "RING_FACTOR",
            "ZERO_FACTOR",
            "Op",
            "Schedule",
            "derive_schedule",
            "looped_in_flight",
            "looped_order",
            "looped_timeline",
            "pipeline_bubble",
            "pipeline_order",
            "ring_factor",
        ],
        "placement_edu.schedule",
    ),
    **dict.fromkeys(
        ["COMPOSITIONS", "STRATEGIES", "Strategy", "get_strategy"], "placement_edu.strategies"
    ),
    **dict.fromkeys(["GB", "GiB", "fmt_bytes", "fmt_gb", "wrapped"], "placement_edu.units"),
}

__all__ = sorted(_EXPORTS)

#: The modules of the public API: what a notebook may import from, and the website's reference
#: (one page each). Each lists its names in ``__all__``.
PUBLIC_MODULES = (
    "placement_edu",
    "placement_edu.timing",
    "placement_edu.estimators",
    "placement_edu.implementations",
    "placement_edu.presentation",
    "placement_edu.runtime",
    "placement_edu.exercises",
)

if TYPE_CHECKING:
    from placement_edu.axes import layers_on_stage
    from placement_edu.checker import CheckResult, check
    from placement_edu.composition import RULES, safety_violations
    from placement_edu.errors import PlacementError
    from placement_edu.experts import (
        MIXTRAL_8X7B,
        MoESpec,
        all_to_all_elements,
        expert_capacity,
        imbalance_text,
        rank_load,
    )
    from placement_edu.faults import FAULTS, applicable_faults, strategies_for
    from placement_edu.memory import Memory, derive_memory
    from placement_edu.mesh import Mesh
    from placement_edu.models import (
        ConcreteModel,
        ModelSpec,
        TensorSpec,
        TransformerSpec,
        greedy_partition,
    )
    from placement_edu.placement import (
        AXES,
        MODEL_STATES,
        PHASES,
        STARTUP,
        GradStatus,
        Mode,
        Placement,
        State,
    )
    from placement_edu.planner import default_transformer, group_links, plan
    from placement_edu.precision import PRESETS, Precision, get_precision
    from placement_edu.report import Comparison, Report, analyze, compare
    from placement_edu.schedule import (
        OP_COSTS,
        RING_FACTOR,
        ZERO_FACTOR,
        Op,
        Schedule,
        derive_schedule,
        looped_in_flight,
        looped_order,
        looped_timeline,
        pipeline_bubble,
        pipeline_order,
        ring_factor,
    )
    from placement_edu.strategies import COMPOSITIONS, STRATEGIES, Strategy, get_strategy
    from placement_edu.units import GB, GiB, fmt_bytes, fmt_gb, wrapped

#: The modules the eager ``__init__`` used to import: ``import placement_edu`` followed by
#: ``placement_edu.schedule.derive_schedule(...)`` keeps working.
_SUBMODULES = frozenset(m.rpartition(".")[2] for m in _EXPORTS.values())
__getattr__, __dir__ = exports(__name__, _EXPORTS, globals(), _SUBMODULES)
