"""The pipeline explorer: stages p, micro-batches m and a schedule (GPipe or 1F1B) move a timeline
of forward and backward passes per stage, the bubble in both conventions, and the activations each
stage keeps in flight. Every number is the core's: ``pipeline_timeline`` (the order of
``pipeline_order``, laid out in time), ``pipeline_bubble`` and ``derive_memory``; the widget only
draws them.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from fractions import Fraction

from matplotlib.axes import Axes
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from placement_edu.memory import derive_memory, in_flight
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.presentation.controls import count_slider, dropdown
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import STATE_COLORS, new_figure, png
from placement_edu.schedule import pipeline_bubble, pipeline_timeline
from placement_edu.strategies import PIPELINE_SCHEDULES, PipelineSchedule, get_strategy
from placement_edu.units import GB, fmt_bytes

#: The model whose activations the explorer weighs: Llama-2-7B's widths (Touvron et al. 2023) as a
#: GPT-style block, one sequence of 4,096 tokens per micro-batch, selective recomputation.
MODEL = TransformerSpec(
    layers=32, hidden=4096, heads=32, seq=4096, vocab=32000, recompute="selective"
)
#: Forward passes are drawn in the activations' colour (forward makes them), backward passes in the
#: gradients' colour (backward makes them).
PASS_COLORS = {"F": STATE_COLORS[State.ACTIVATIONS], "B": STATE_COLORS[State.GRADS]}
#: The size of a pass label inside its box (points); 0.6 of it is a digit's width, about.
LABEL_POINTS = 6


@dataclass(frozen=True)
class PipelineView:
    """What the explorer shows for one setting, all from the core."""

    stages: int
    micro_batches: int
    schedule: str
    timeline: list[list[tuple[str, int, int, int]]]  # per stage: (pass, micro-batch, start, end)
    bubble: dict[str, Fraction]  # of_ideal, of_total
    activations: list[Fraction]  # bytes per stage at its peak (derive_memory)
    in_flight: list[int]  # micro-batches whose activations each stage holds at once

    @property
    def length(self) -> int:
        """Time units of the whole step (a forward is 1, a backward 2)."""
        return max(row[-1][3] for row in self.timeline)


def pipeline_view(stages: int, micro_batches: int, schedule: str) -> PipelineView:
    """Ask the core for the timeline, the bubble, each stage's activations (``MODEL``, mixed_adam)
    and the micro-batches they are (``memory.in_flight``: GPipe m, 1F1B min(p - stage, m))."""
    strategy = get_strategy("pp").with_(micro_batches=micro_batches, pipeline_schedule=schedule)
    mesh, precision = Mesh.of(pipeline=stages), get_precision("mixed_adam")
    memories = [derive_memory(strategy, MODEL, mesh, precision, rank=s) for s in range(stages)]
    return PipelineView(
        stages,
        micro_batches,
        schedule,
        pipeline_timeline(schedule, stages, micro_batches),
        pipeline_bubble(stages, micro_batches),
        [Fraction(m.transient_peak("activations")) for m in memories],
        [int(in_flight(strategy, stages, s)) for s in range(stages)],
    )


class PipelineExplorer(Explorer):
    """Sliders for p and m and a schedule choice; the timeline, the bubble and activations in
    flight."""

    def __init__(
        self, stages: int = 4, micro_batches: int = 8, schedule: str = PipelineSchedule.ONE_F_ONE_B
    ) -> None:
        import ipywidgets as w

        self.stages = w.IntSlider(
            value=stages, min=2, max=8, description="p (stages)", continuous_update=False
        )
        self.micro_batches = count_slider(micro_batches, 1, 32, "m (micro-batches)")
        self.schedule = dropdown(PIPELINE_SCHEDULES, schedule, "schedule")
        self.figure = new_figure(9.4, 3.8)
        self.timeline_ax = self.figure.add_axes((0.08, 0.3, 0.6, 0.6))
        self.memory_ax = self.figure.add_axes((0.77, 0.3, 0.21, 0.6))
        self.view: PipelineView | None = None
        self.assemble([self.stages, self.micro_batches, self.schedule], picture="pipeline timeline")

    def update(self) -> PipelineView:
        view = pipeline_view(self.stages.value, self.micro_batches.value, self.schedule.value)
        self.view = view
        self._draw(view)
        self.image.value = png(self.figure)
        b = view.bubble
        self.readout.value = (
            "<table><tbody>"
            "<tr><td>bubble, of ideal time (p−1)/m (Narayanan et al. 2021)</td>"
            f"<td>{b['of_ideal']} = "
            f"{float(b['of_ideal']):.1%}</td></tr>"
            "<tr><td>bubble, of total time (p−1)/(m+p−1) (GPipe, Huang et al. 2019)</td>"
            f"<td>{b['of_total']} = "
            f"{float(b['of_total']):.1%}</td></tr>"
            f"<tr><td>activations in flight on stage 0</td><td>{view.in_flight[0]} micro-batch"
            f"{'es' * (view.in_flight[0] != 1)} = "
            f"{html.escape(fmt_bytes(view.activations[0]))}</td></tr>"
            "</tbody></table>"
        )
        return view

    def _draw(self, view: PipelineView) -> None:
        ax, mem = self.timeline_ax, self.memory_ax
        ax.clear()
        mem.clear()
        p = view.stages
        self.blocks = []
        # A pass is labelled only where its label fits inside its box (at p = 8, m = 16 a forward
        # box is ~6 points wide, "F10" ~11): no label runs into its neighbour's.
        span = max(end for row in view.timeline for *_, end in row)
        points_per_unit = ax.get_position().width * self.figure.get_figwidth() * 72 / span
        for stage, row in enumerate(view.timeline):
            y = p - 1 - stage
            for kind, k, start, end in row:
                self.blocks.append(
                    ax.barh(
                        y,
                        end - start,
                        left=start,
                        height=0.8,
                        color=PASS_COLORS[kind],
                        edgecolor="white",
                        linewidth=0.5,
                    )[0]
                )
                if (end - start) * points_per_unit >= 0.6 * LABEL_POINTS * len(f"{kind}{k}"):
                    ax.text(
                        (start + end) / 2,
                        y,
                        f"{kind}{k}",
                        ha="center",
                        va="center",
                        fontsize=LABEL_POINTS,
                    )
        ax.set_yticks(range(p), [f"stage {p - 1 - y}" for y in range(p)], fontsize=8)
        ax.set_xlim(0, view.length)
        ax.set_xlabel(
            "time (units: a forward pass = 1, a backward = 2); white = bubble", fontsize=8
        )
        ax.set_title(
            f"{view.schedule}, p = {p}, m = {view.micro_batches}: "
            f"bubble {view.bubble['of_total']} of total "
            f"= {view.bubble['of_ideal']} of ideal",
            fontsize=9,
        )
        ax.legend(
            handles=[
                Patch(color=PASS_COLORS["F"], label="forward (makes activations)"),
                Patch(color=PASS_COLORS["B"], label="backward (makes gradients)"),
            ],
            fontsize=7,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.22),
            ncol=2,
            frameon=False,
        )
        gb = [float(a) / GB for a in view.activations]
        self.activation_bars = mem.barh(
            [p - 1 - s for s in range(p)], gb, color=STATE_COLORS[State.ACTIVATIONS]
        )
        for s, (value, n) in enumerate(zip(gb, view.in_flight)):
            mem.text(value, p - 1 - s, f" {n}×", va="center", fontsize=7)
        mem.set_yticks(range(p), [f"stage {p - 1 - y}" for y in range(p)], fontsize=7)
        mem.set_xlim(0, max(gb) * 1.35)
        mem.set_xlabel("GB (1e9 bytes)", fontsize=8)
        mem.set_title("activations in flight", fontsize=9)
        mem.tick_params(labelsize=7)


def bubble_chart(ax: Axes, stages: tuple[int, ...] = (4, 8), max_micro_batches: int = 64) -> Axes:
    """The pipeline bubble against m, in both conventions (``pipeline_bubble``): of the ideal time
    (p−1)/m, Megatron's, in vermillion, and of the total time (p−1)/(m+p−1), GPipe's, in blue; one
    line style per p. Both axes are logarithmic: m runs 1 to 64 and the bubble from 7× the ideal
    time down to a few percent of it, so a straight line (p−1)/m stays readable at every m."""
    ms = range(1, max_micro_batches + 1)
    for p, style in zip(stages, ("-", "--", ":", "-.")):
        for of, colour, formula in (
            ("of_ideal", "#D55E00", "(p−1)/m, of ideal time"),
            ("of_total", "#0072B2", "(p−1)/(m+p−1), of total time"),
        ):
            ax.plot(
                ms,
                [float(pipeline_bubble(p, m)[of]) for m in ms],
                style,
                color=colour,
                label=f"p = {p}: {formula}",
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(FixedLocator([2**k for k in range(max_micro_batches.bit_length())]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda m, _: f"{m:g}"))
    ax.yaxis.set_major_locator(FixedLocator([0.05, 0.1, 0.2, 0.5, 1, 2, 5]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda f, _: f"{f:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("micro-batches per step, m (log scale)", fontsize=8)
    ax.set_ylabel("bubble: idle time ÷ ideal or total time (log)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", color="#dddddd", lw=0.5)
    ax.set_title("The same bubble in two conventions (pipeline_bubble)", fontsize=9)
    ax.legend(fontsize=7, loc="lower left", framealpha=0.9)
    return ax
