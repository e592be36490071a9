"""Presentation: the widgets the notebooks use, charts, and one visual language. Reads the core's
derivations; the core never imports it. Tables and JSON live beside the derivations in
``report.py``.

- ``style.py``  a colour per state and per collective, the device grid ("who holds what"), PNGs
- ``layout.py`` where ranks sit: a mesh's ranks in their nodes, and the link each group runs on
- ``live.py``   a widget cell that says to run the cells and shows a still until it is live
- ``controls.py`` the controls the widgets share
- one module per widget: ``grid_explorer``, ``mode_explorer``, ``activation_explorer``,
  ``convention_explorer``, ``mesh_explorer``, ``pipeline_explorer``, ``time_explorer``,
  ``context_explorer`` (long context), ``expert_explorer`` (mixture of experts),
  ``roofline_explorer`` (a Llama block's ops on the roofline), ``runtime_explorer``,
  ``fit_explorer``, ``widgets`` (ZeRO and the checker); ``plots.py`` the cost charts
- will one rank's step fit (issue 22; the answers are the core's, ``placement_edu.fitting``):
  ``fit_answers`` (a profile not kept, measured for a notebook), ``fit_tracker`` (PyTorch's
  tracker, in a child process), ``fit_three_ways`` (the three side by side), ``fit_chart`` (what
  ``fit_explorer`` draws)
- one peak (issue 39): ``policies`` (recomputation policies on one block), ``mesh_fit`` (``fit``
  on a mesh, rank by rank), ``module_plan`` (the planner with a real module's peaks)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from placement_edu.lazy import exports

_P = "placement_edu.presentation."
#: Where each public name lives (``__all__`` is its keys); imported on first use.
_EXPORTS = {
    **dict.fromkeys(
        [
            "ActivationExplorer",
            "CONFIGS",
            "KORTHIKANTI_TABLE_3",
            "LiveSetExplorer",
            "config_label",
            "korthikanti_model",
        ],
        _P + "activation_explorer",
    ),
    "ContextExplorer": _P + "context_explorer",
    **dict.fromkeys(["context_costs", "long_context_model"], "placement_edu.long_context"),
    "ConventionExplorer": _P + "convention_explorer",
    "ExpertExplorer": _P + "expert_explorer",
    "FitExplorer": _P + "fit_explorer",
    "fit_comparison": _P + "fit_three_ways",
    "fit_peak": _P + "fit_answers",
    "policy_table": _P + "policies",
    "mesh_fit": _P + "mesh_fit",
    "module_plan": _P + "module_plan",
    "GridExplorer": _P + "grid_explorer",
    "rank_layout": _P + "layout",
    "MeshExplorer": _P + "mesh_explorer",
    **dict.fromkeys(["ModeExplorer", "schedule_text"], _P + "mode_explorer"),
    **dict.fromkeys(["PipelineExplorer", "bubble_chart"], _P + "pipeline_explorer"),
    **dict.fromkeys(
        ["RooflineExplorer", "forward_shares", "llama_at", "roofline_chart"],
        _P + "roofline_explorer",
    ),
    **dict.fromkeys(["RuntimeExplorer", "deviation_chart"], _P + "runtime_explorer"),
    **dict.fromkeys(
        [
            "MODE_LEGEND",
            "OP_COLORS",
            "STATE_COLORS",
            "device_grid",
            "legend_lines",
            "new_figure",
            "png",
        ],
        _P + "style",
    ),
    **dict.fromkeys(["PlanTable", "TimeExplorer"], _P + "time_explorer"),
    **dict.fromkeys(["CheckExplorer", "ZeroExplorer"], _P + "widgets"),
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from placement_edu.presentation.activation_explorer import (
        CONFIGS,
        KORTHIKANTI_TABLE_3,
        ActivationExplorer,
        LiveSetExplorer,
        config_label,
        korthikanti_model,
    )
    from placement_edu.long_context import context_costs, long_context_model
    from placement_edu.presentation.context_explorer import ContextExplorer
    from placement_edu.presentation.convention_explorer import ConventionExplorer
    from placement_edu.presentation.expert_explorer import ExpertExplorer
    from placement_edu.presentation.fit_answers import fit_peak
    from placement_edu.presentation.fit_explorer import FitExplorer
    from placement_edu.presentation.fit_three_ways import fit_comparison
    from placement_edu.presentation.grid_explorer import GridExplorer
    from placement_edu.presentation.layout import rank_layout
    from placement_edu.presentation.mesh_explorer import MeshExplorer
    from placement_edu.presentation.mode_explorer import ModeExplorer, schedule_text
    from placement_edu.presentation.pipeline_explorer import PipelineExplorer, bubble_chart
    from placement_edu.presentation.roofline_explorer import (
        RooflineExplorer,
        forward_shares,
        llama_at,
        roofline_chart,
    )
    from placement_edu.presentation.policies import policy_table
    from placement_edu.presentation.mesh_fit import mesh_fit
    from placement_edu.presentation.module_plan import module_plan
    from placement_edu.presentation.runtime_explorer import RuntimeExplorer, deviation_chart
    from placement_edu.presentation.style import (
        MODE_LEGEND,
        OP_COLORS,
        STATE_COLORS,
        device_grid,
        legend_lines,
        new_figure,
        png,
    )
    from placement_edu.presentation.time_explorer import PlanTable, TimeExplorer
    from placement_edu.presentation.widgets import CheckExplorer, ZeroExplorer

__getattr__, __dir__ = exports(__name__, _EXPORTS, globals())
