"""Showing runs: the per-step deviation chart and a strategy-and-fault picker for notebooks.
Presentation only -- every number comes from a ``RunResult``."""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt

from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.engines import RUNNABLE
from placement_edu.runtime.result import RunResult

FLOOR = 1e-18     # a deviation of exactly 0 is drawn here on the log scale


def deviation_chart(results: Sequence[RunResult], ax=None):
    """Max |θ − θ_one_process| per step, log scale: correct runs lie flat at rounding level,
    faulted runs many orders of magnitude above."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        steps = range(1, len(r.deviation) + 1)
        style = "-" if r.config.fault is None else "--"
        ax.plot(steps, [max(d, FLOOR) for d in r.deviation], style, marker="o", label=r.config.label)
    ax.axhline(results[0].config.tolerance if results else 1e-10, color="grey", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("max |θ − θ one process|")
    ax.set_title("distributed against one process (grey: float64 rounding bound)")
    ax.legend(fontsize=7, loc="center right")
    return ax


class RuntimeExplorer:
    """Pick a strategy, a world size and a fault; Run launches real processes and shows the
    deviation curve beside the correct run, and measured against predicted bytes."""

    #: World sizes the widget offers (8 ranks would take about 1.2 GiB: more than a Binder container).
    WORLD_SIZES = (2, 4)

    def __init__(self, strategy: str = "zero3", world_size: int = 4, steps: int = 5) -> None:
        import ipywidgets as w

        self.strategy = w.Dropdown(options=list(RUNNABLE), value=strategy, description="strategy")
        self.world = w.Dropdown(options=self.world_sizes(strategy), value=world_size, description="ranks")
        self.fault = w.Dropdown(description="fault")
        self.steps = w.IntSlider(value=steps, min=1, max=10, description="steps")
        self.button = w.Button(description="Run", button_style="primary")
        self.out = w.Output()
        self.strategy.observe(lambda _change: self._world_sizes(), names="value")
        self.world.observe(lambda _change: self._faults(), names="value")
        self.button.on_click(lambda _b: self.run())
        self._faults()
        from placement_edu.runtime.pool import shared_pool
        shared_pool(max(self.WORLD_SIZES)).start()     # warm by the time the learner clicks Run
        self.widget = w.VBox([w.HBox([self.strategy, self.world, self.fault]),
                              w.HBox([self.steps, self.button]), self.out])

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
        from placement_edu.runtime.pool import shared_pool
        self.out.clear_output()
        self.button.disabled = True                    # one run at a time: a second click waits
        try:
            return self._run(shared_pool)
        finally:
            self.button.disabled = False

    def _run(self, shared_pool) -> list[RunResult]:
        with self.out:
            try:
                # The kernel's warm ranks (started when the widget was made): no start-up per click.
                results = shared_pool(self.world.value).run_many(self.configs(), progress=False)
            except Exception as error:                 # shown, not raised, inside a widget
                print(f"error: {error}")
                return []
            _, ax = plt.subplots(figsize=(7, 3.5))
            deviation_chart(results, ax)
            plt.show()
            for r in results:
                print(r, end="\n\n")
        return results
