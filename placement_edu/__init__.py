"""placement_edu: distributed training strategies as placements of four training states.

Specification (placement, model, mesh, precision) -> derivation (memory, schedule, correctness)
-> presentation (tables, plots, widgets, CLI). The theory: ``docs/theory.md`` ("SPEC §n" is its §n).

The public API, what the course's notebooks import (``tests/test_public_api.py`` checks it):

- ``placement_edu``                 by task: the specs (model, mesh, precision, placement,
                                    strategy) and ``resolve``, the one door; analyze, compare,
                                    check, plan, step_time, price, fit, run and the results
                                    they return; ``PlacementError``
- ``placement_edu.placement``, ``.strategies``, ``.models``, ``.precision``, ``.schedule``,
  ``.faults``, ``.composition``, ``.planner``, ``.experts``, ``.units``: each topic's helpers
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

#: Where each public name lives: the one list (``__all__`` is its keys), by task: the specs, the
#: tasks, their results, the error. Helpers live in their modules (``PUBLIC_MODULES``). Imported
#: on first use (PEP 562): a rank of the runtime imports ``placement_edu.runtime.worker``, and with
#: it this package, without the checker and the report it never calls.
_EXPORTS = {
    # the specs: what to train, on what, how; the one door resolves them into a Setting
    **dict.fromkeys(["ModelSpec", "TransformerSpec"], "placement_edu.models"),
    "Mesh": "placement_edu.mesh",
    **dict.fromkeys(["Precision", "get_precision"], "placement_edu.precision"),
    **dict.fromkeys(["Placement", "State"], "placement_edu.placement"),
    **dict.fromkeys(["Strategy", "get_strategy"], "placement_edu.strategies"),
    **dict.fromkeys(["Setting", "resolve"], "placement_edu.setting"),
    # the tasks and what they return
    **dict.fromkeys(["Comparison", "Report", "analyze", "compare"], "placement_edu.report"),
    **dict.fromkeys(["Memory", "derive_memory"], "placement_edu.memory"),
    **dict.fromkeys(["Schedule", "derive_schedule"], "placement_edu.schedule"),
    **dict.fromkeys(["CheckResult", "check"], "placement_edu.checker"),
    "plan": "placement_edu.planner",
    "step_time": "placement_edu.timing",
    **dict.fromkeys(["fit", "price"], "placement_edu.tasks"),
    "run": "placement_edu.runtime",
    # what a bad input raises
    "PlacementError": "placement_edu.errors",
}

__all__ = sorted(_EXPORTS)

#: The core's topics: each one's helpers, beside the root's tasks (on the root's reference page).
TOPIC_MODULES = (
    "placement_edu.placement",
    "placement_edu.strategies",
    "placement_edu.models",
    "placement_edu.precision",
    "placement_edu.schedule",
    "placement_edu.faults",
    "placement_edu.composition",
    "placement_edu.planner",
    "placement_edu.experts",
    "placement_edu.roofline",
    "placement_edu.units",
)
#: The modules of the public API: what a notebook may import from, and the website's reference
#: (a page each, the topics on the root's). Each lists its names in ``__all__``.
PUBLIC_MODULES = (
    "placement_edu",
    *TOPIC_MODULES,
    "placement_edu.timing",
    "placement_edu.estimators",
    "placement_edu.implementations",
    "placement_edu.presentation",
    "placement_edu.runtime",
    "placement_edu.exercises",
)

if TYPE_CHECKING:
    from placement_edu.checker import CheckResult, check
    from placement_edu.errors import PlacementError
    from placement_edu.memory import Memory, derive_memory
    from placement_edu.mesh import Mesh
    from placement_edu.models import ModelSpec, TransformerSpec
    from placement_edu.placement import Placement, State
    from placement_edu.planner import plan
    from placement_edu.precision import Precision, get_precision
    from placement_edu.report import Comparison, Report, analyze, compare
    from placement_edu.runtime import run
    from placement_edu.schedule import Schedule, derive_schedule
    from placement_edu.setting import Setting, resolve
    from placement_edu.strategies import Strategy, get_strategy
    from placement_edu.tasks import fit, price
    from placement_edu.timing import step_time

#: The modules the eager ``__init__`` used to import: ``import placement_edu`` followed by
#: ``placement_edu.schedule.derive_schedule(...)`` keeps working.
_SUBMODULES = frozenset(m.rpartition(".")[2] for m in [*_EXPORTS.values(), *PUBLIC_MODULES[1:]])
__getattr__, _ = exports(__name__, _EXPORTS, globals(), _SUBMODULES)


def __dir__() -> list[str]:
    """What a learner's tab completion offers: the surface, the version and the module lists (not
    the machinery above: ``TYPE_CHECKING``, ``exports``)."""
    return sorted([*__all__, "__version__", "PUBLIC_MODULES", "TOPIC_MODULES"])
