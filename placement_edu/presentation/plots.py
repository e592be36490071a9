"""Matplotlib charts of derived costs. Presentation only: they draw what a Comparison holds.

``CostCharts`` builds its artists once and then only moves them (bar heights, labels, limits). The
static parts (titles, legends, x labels) are rendered once as a background; an update restores that
background and redraws only what moved -- matplotlib's blitting, the standard trick for fast
animation -- then encodes PNG bytes for an ``ipywidgets.Image`` (a plain ``Figure`` on the Agg
canvas: no pyplot state involved).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Sequence

from PIL import Image

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from placement_edu.placement import MODEL_STATES
from placement_edu.units import GB

if TYPE_CHECKING:
    from placement_edu.report import Comparison

from placement_edu.schedule.costs import OpKind
from placement_edu.presentation.style import (
    FIGURE_DPI,
    OP_COLORS as _OP_COLORS,
    STATE_COLORS,
)  # one visual language

OP_COLORS = {
    op: _OP_COLORS[op]
    for op in (OpKind.ALL_REDUCE, OpKind.REDUCE_SCATTER, OpKind.ALL_GATHER, OpKind.SEND)
}


class CostCharts:
    """Per-device memory (stacked persistent bytes per state, transient peak hatched on top) and
    per-step communication (ZeRO-convention volume in Ψ, stacked by collective, exact ring bytes
    written above) for a fixed list of strategies."""

    def __init__(
        self,
        strategies: Sequence[str],
        figsize: tuple[float, float] = (11, 4.4),
        dpi: int = FIGURE_DPI,
    ) -> None:
        self.names = list(strategies)
        self.figure = Figure(figsize=figsize, dpi=dpi)
        self.canvas = FigureCanvasAgg(self.figure)  # Agg's: it copies regions and gives RGBA bytes
        self.memory_ax, self.comm_ax = self.figure.subplots(1, 2)
        self.figure.subplots_adjust(left=0.07, right=0.99, top=0.92, bottom=0.24, wspace=0.22)
        zeros = [0.0] * len(self.names)
        m, c = self.memory_ax, self.comm_ax
        self.state_bars = {
            s: m.bar(self.names, zeros, color=STATE_COLORS[s], label=s.value) for s in MODEL_STATES
        }
        self.transient_bars = m.bar(
            self.names,
            zeros,
            color="none",
            edgecolor="grey",
            hatch="//",
            label="transient at peak (gather window, buckets, activations)",
        )
        self.op_bars = {
            op: c.bar(self.names, zeros, color=color, label=op) for op, color in OP_COLORS.items()
        }
        self.memory_labels = [
            m.annotate("", (i, 0), ha="center", va="bottom", fontsize=9)
            for i in range(len(self.names))
        ]
        self.comm_labels = [
            c.annotate("", (i, 0), ha="center", va="bottom", fontsize=9)
            for i in range(len(self.names))
        ]
        self.silence = c.text(
            0.5, 0.5, "one device: nothing to communicate", transform=c.transAxes, ha="center"
        )
        m.set_ylabel("bytes per device (GB = 1e9 B)")
        m.set_title("Memory per device: model state (bars), transient peak (hatched)", fontsize=10)
        c.set_ylabel("volume per step (Ψ elements, ZeRO convention)")
        c.set_title("Communication per device per step", fontsize=10)
        m.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
        c.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=4)
        for ax in (m, c):
            ax.yaxis.set_major_locator(MaxNLocator(5, steps=[1, 2, 5, 10]))
            ax.yaxis.set_animated(True)
        for artist in self._moving():
            artist.set_animated(True)
        self.figure.canvas.draw()  # everything that never moves, once
        self.background = self.canvas.copy_from_bbox(self.figure.bbox)

    def _moving(self) -> list:
        bars = [
            b
            for group in (*self.state_bars.values(), self.transient_bars, *self.op_bars.values())
            for b in group
        ]
        return bars + self.memory_labels + self.comm_labels + [self.silence]

    def update(self, comparison: "Comparison") -> None:
        reports = comparison.reports
        if [r.strategy.name for r in reports] != self.names:
            raise ValueError(
                f"these charts show {self.names}, got {[r.strategy.name for r in reports]}"
            )
        bottoms = [0.0] * len(reports)
        for state, bars in self.state_bars.items():
            heights = [float(r.memory.device[state]) / GB for r in reports]
            bottoms = _stack(bars, heights, bottoms)
        transient = [float(r.memory.peak - r.memory.model_state) / GB for r in reports]
        tops = _stack(self.transient_bars, transient, bottoms)
        for label, r, top in zip(self.memory_labels, reports, tops):
            label.set_text(f"{float(r.memory.model_state) / GB:.4g} GB")
            label.xy = label.xyann = (label.xy[0], top)  # xyann: where the text sits
        self.memory_ax.set_ylim(0, max(tops + [1e-9]) * 1.15)

        bottoms = [0.0] * len(reports)
        for op, bars in self.op_bars.items():
            heights = [
                float(sum(o.zero_volume_elements for o in r.schedule.collectives if o.op == op))
                / r.model.psi
                for r in reports
            ]
            bottoms = _stack(bars, heights, bottoms)
        for label, r, top in zip(self.comm_labels, reports, bottoms):
            label.set_text(
                f"{float(r.volume_psi):g} Ψ\n{float(r.ring_bytes) / GB:.4g} GB ring" if top else ""
            )
            label.xy = label.xyann = (label.xy[0], top)
        self.comm_ax.set_ylim(0, max(bottoms + [1.0]) * 1.3)
        self.silence.set_visible(not any(bottoms))

    def png(self) -> bytes:
        """The figure as PNG bytes (what a notebook shows): the static background, then the
        y axes and every moving artist drawn over it."""
        canvas = self.canvas
        canvas.restore_region(self.background)
        for ax in (self.memory_ax, self.comm_ax):
            ax.draw_artist(ax.yaxis)
        for artist in self._moving():
            artist.axes.draw_artist(artist)
        width, height = canvas.get_width_height(physical=True)
        image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
        image = image.convert("RGB")  # an opaque figure: a third less to encode, at 2x pixels
        buffer = io.BytesIO()
        image.save(buffer, format="png", compress_level=1)
        return buffer.getvalue()


def _stack(bars: BarContainer, heights: list[float], bottoms: list[float]) -> list[float]:
    """Set each bar's height and bottom; return the new tops."""
    for bar, h, b in zip(bars, heights, bottoms):
        bar.set_height(h)
        bar.set_y(b)
    return [b + h for b, h in zip(bottoms, heights)]
