"""Showing runs: the per-step deviation chart and a strategy-and-fault picker for notebooks.
Presentation only -- every number comes from a ``RunResult``."""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator

from placement_edu.faults import FAULTS
from placement_edu.presentation.live import sharp_image, show
from placement_edu.presentation.style import FIGURE_DPI
from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.engines import RUNNABLE
from placement_edu.runtime.processes.progress import Progress
from placement_edu.runtime.result import RunResult

FLOOR = 1e-18  # a deviation of exactly 0 is drawn here on the log scale
#: One colour per fault, the same in every panel (Okabe & Ito's palette, as the states'); a correct
#: run is black.
FAULT_COLORS = dict(
    zip(
        FAULTS,
        ("#E69F00", "#56B4E9", "#009E73", "#D55E00", "#CC79A7", "#0072B2", "#999999"),
        strict=True,
    )
)
#: One marker per strategy within a chart, so two strategies' lines that coincide stay apart.
MARKERS = ("o", "s", "^", "D")


def deviation_chart(results: Sequence[RunResult], ax: Axes | None = None) -> Axes:
    """Max |θ − θ_one_process| per step, log scale: correct runs (black) lie flat at rounding level,
    faulted runs (a colour per fault, dashed) many orders of magnitude above the grey tolerance.

    A line is named by its fault ("correct" for none); when ``results`` hold several strategies,
    by its strategy too, each with its own marker."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    strategies = list(dict.fromkeys(r.config.resolved_strategy().name for r in results))
    for r in results:
        strategy, fault = r.config.resolved_strategy().name, r.config.fault
        label = str(fault) if fault else "correct"
        ax.plot(
            range(1, len(r.deviation) + 1),
            [max(d, FLOOR) for d in r.deviation],
            "--" if fault else "-",
            color=FAULT_COLORS.get(str(fault), "black"),
            lw=1.2 if fault else 2,
            marker=MARKERS[strategies.index(strategy) % len(MARKERS)],
            markersize=5,
            label=f"{strategy}: {label}" if len(strategies) > 1 else label,
        )
    # The tolerance per step: the dtype's base + a multiple of the run's rounding floor.
    tolerance = results[0].tolerances if results else [1e-10]
    if len(tolerance) > 1:
        ax.plot(range(1, len(tolerance) + 1), tolerance, color="grey", lw=0.8)
    else:
        ax.axhline(tolerance[0], color="grey", lw=0.8)
    ax.annotate(
        f"tolerance {tolerance[0]:.0e}",
        (0, tolerance[0]),
        xycoords=("axes fraction", "data"),
        xytext=(4, 3),
        textcoords="offset points",
        color="grey",
        fontsize=7,
    )
    ax.set_yscale("log")
    ax.set_ylim(FLOOR / 10, 10)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("optimizer step", fontsize=8)
    ax.set_ylabel("max |θ − θ one process| (log)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title("deviation from one process, per step", fontsize=9)
    # The lines gather near 1 (faults) and near 1e-16 (correct runs): the legend sits between,
    # above the tolerance (1e-10 is 0.45 of the way up from 1e-19 to 10).
    ax.legend(fontsize=7, loc="center right", bbox_to_anchor=(1, 0.64), framealpha=0.9)
    return ax


class RuntimeExplorer:
    """Pick a strategy, a world size and a fault; Run trains on the kernel's warm ranks and shows
    the deviation curve beside the correct run, and measured against predicted bytes.

    Everything it shows is widget state set from the kernel's main thread -- a progress bar, a
    chart image, a text block -- never an Output widget fed while the run goes on (a browser drops
    such output mid-run). Run is disabled from the click until the result (or the error) is drawn;
    the result replaces the bar. The chart is hidden while there is none: an empty image is a
    broken-image icon.
    """

    #: World sizes the widget offers (8 ranks would take about 1.2 GiB: more than a Binder
    #: container).
    WORLD_SIZES = (2, 4)

    def __init__(self, strategy: str = "zero3", world_size: int = 4, steps: int = 5) -> None:
        import ipywidgets as w

        self.strategy = w.Dropdown(options=list(RUNNABLE), value=strategy, description="strategy")
        self.world = w.Dropdown(
            options=self.world_sizes(strategy), value=world_size, description="ranks"
        )
        self.fault = w.Dropdown(description="fault")
        self.steps = w.IntSlider(value=steps, min=1, max=10, description="steps")
        self.button = w.Button(description="Run", button_style="primary")
        self.bar = w.FloatProgress(value=0, min=0, max=1, layout=w.Layout(visibility="hidden"))
        self.status = w.HTML("Press <b>Run</b>.")
        self.chart = sharp_image(max_width="760px", display="none")
        self.report = w.HTML()
        for name, widget in (
            ("progress", self.bar),
            ("status", self.status),
            ("chart", self.chart),
            ("report", self.report),
        ):
            widget.add_class(f"placement-edu-{name}")  # what the browser test looks for
        self.strategy.observe(lambda _change: self._world_sizes(), names="value")
        self.world.observe(lambda _change: self._faults(), names="value")
        self.button.on_click(lambda _b: self.run())
        self._faults()
        from placement_edu.runtime.processes.pool import shared_pool

        shared_pool(max(self.WORLD_SIZES)).start()  # warm by the time the learner clicks Run
        self.widget = w.VBox(
            [
                w.HBox([self.strategy, self.world, self.fault]),
                w.HBox([self.steps, self.button]),
                w.HBox([self.bar, self.status]),
                self.chart,
                self.report,
            ]
        )

    def _ipython_display_(self) -> None:
        show(self.widget)  # after a line telling a notebook opened without running what to do

    @classmethod
    def world_sizes(cls, strategy: str) -> list[int]:
        """The offered world sizes on which ``strategy`` runs (a composition needs 4: 2 x 2)."""
        from placement_edu.errors import PlacementError

        out = []
        for n in cls.WORLD_SIZES:
            try:
                RunConfig(strategy, n).validate()
                out.append(n)
            except PlacementError:
                pass
        return out

    def _world_sizes(self) -> None:
        sizes = self.world_sizes(self.strategy.value)
        keep = self.world.value if self.world.value in sizes else sizes[-1]
        self.world.options = sizes
        self.world.value = keep
        self._faults()

    def _faults(self) -> None:
        from placement_edu.runtime.verdict import applicable

        config = RunConfig(self.strategy.value, self.world.value)
        names = applicable(config.resolved_strategy(), config.resolved_mesh())
        self.fault.options = ["(none)", *names]
        self.fault.value = "(none)"

    def configs(self) -> list[RunConfig]:
        base = RunConfig(self.strategy.value, self.world.value, steps=self.steps.value)
        fault = None if self.fault.value == "(none)" else self.fault.value
        return [base] + ([base.with_(fault=fault)] if fault else [])

    def run(self) -> list[RunResult]:
        """One click: progress while the ranks start and step, then the chart and the reports."""
        import html
        import time

        from placement_edu.runtime.processes.pool import shared_pool

        start = time.monotonic()
        self.button.disabled = True  # one run at a time, until its result is drawn
        self.bar.value, self.bar.layout.visibility = 0, "visible"
        self.status.value = "starting…"
        try:
            # The kernel's warm ranks (started when the widget was made): no start-up per click.
            results = shared_pool(self.world.value).run_many(
                self.configs(), progress=self._progress
            )
            self._draw(
                chart_png(results),
                "".join(
                    f"<pre style='white-space: pre-wrap'>{html.escape(str(r))}</pre>"
                    for r in results
                ),
            )
            runs = "1 run" if len(results) == 1 else f"{len(results)} runs"
            self.status.value = f"done: {runs} in {time.monotonic() - start:.2f} s"
            return results
        except Exception as error:  # shown in the widget, not raised
            self.status.value = f"<b>error</b>: {html.escape(str(error))}"
            self._draw(b"", "")
            return []
        finally:
            self.bar.layout.visibility = "hidden"
            self.button.disabled = False

    def _draw(self, png: bytes, report: str) -> None:
        """The chart, shown only when there is one (no broken-image icon), and the reports."""
        self.chart.value = png
        self.chart.layout.display = None if png else "none"
        self.report.value = report

    def _progress(self, now: Progress) -> None:
        self.bar.value = now.fraction
        self.status.value = f"[{now.elapsed_s:4.1f} s] {now.text}"


def chart_png(results: Sequence[RunResult]) -> bytes:
    """The deviation chart of ``results`` as PNG bytes (for an ``ipywidgets.Image``)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.5), dpi=FIGURE_DPI)
    FigureCanvasAgg(figure)
    deviation_chart(results, figure.add_subplot())
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
