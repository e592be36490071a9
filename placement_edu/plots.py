"""Matplotlib charts of derived costs. Presentation only: they draw what a Comparison holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from placement_edu.placement import MODEL_STATES, State
from placement_edu.units import GB

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from placement_edu.report import Comparison

STATE_COLORS = {State.PARAMS: "#4C72B0", State.GRADS: "#DD8452", State.OPTIMIZER: "#55A868"}
OP_COLORS = {"all_reduce": "#8172B3", "reduce_scatter": "#C44E52", "all_gather": "#937860",
             "send": "#DA8BC3"}


def memory_chart(comparison: "Comparison", ax: "Axes") -> None:
    """Stacked persistent bytes per state for each strategy (GB = 1e9 bytes), the transient peak
    terms hatched on top, and each model-state total written above its bar."""
    names = [r.strategy.name for r in comparison.reports]
    bottoms = [0.0] * len(names)
    for state in MODEL_STATES:
        heights = [float(r.memory.device[state]) / GB for r in comparison.reports]
        ax.bar(names, heights, bottom=bottoms, color=STATE_COLORS[state], label=state.value)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    transient = [float(r.memory.peak - r.memory.model_state) / GB for r in comparison.reports]
    ax.bar(names, transient, bottom=bottoms, color="none", edgecolor="grey", hatch="//",
           label="transient at peak (gather window, buckets, activations)")
    tops = [b + t for b, t in zip(bottoms, transient)]
    for i, r in enumerate(comparison.reports):
        ax.annotate(f"{float(r.memory.model_state) / GB:.4g} GB", (i, tops[i]),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, max(tops) * 1.15)
    ax.set_ylabel("bytes per device (GB = 1e9 B)")
    ax.set_title("Memory per device: model state (bars), transient peak (hatched)", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)


def comm_chart(comparison: "Comparison", ax: "Axes") -> None:
    """Per-step communication per device: ZeRO-convention volume (Ψ units), stacked by collective,
    with the exact ring bytes written above each bar."""
    names = [r.strategy.name for r in comparison.reports]
    bottoms = [0.0] * len(names)
    for op, color in OP_COLORS.items():
        heights = [float(sum(o.zero_volume_elements for o in r.schedule.collectives if o.op == op))
                   / r.model.psi for r in comparison.reports]
        if any(heights):
            ax.bar(names, heights, bottom=bottoms, color=color, label=op)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
    for i, r in enumerate(comparison.reports):
        ax.annotate(f"{float(r.volume_psi):g} Ψ\n{float(r.ring_bytes) / GB:.4g} GB ring",
                    (i, bottoms[i]), ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("volume per step (Ψ elements, ZeRO convention)")
    ax.set_ylim(0, max(bottoms + [1.0]) * 1.3)
    ax.set_title("Communication per device per step", fontsize=10)
    if any(bottoms):
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    else:
        ax.text(0.5, 0.5, "one device: nothing to communicate", transform=ax.transAxes, ha="center")
