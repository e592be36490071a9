"""ipywidgets front-ends. They read sliders, ask the core for a Comparison, and redraw; they never
compute a cost themselves."""

from __future__ import annotations

from placement_edu.models import ModelSpec
from placement_edu.precision import PRESETS
from placement_edu.presentation.controls import choice_slider, devices_slider, dropdown, psi_slider
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.plots import CostCharts
from placement_edu.report import Comparison, compare

DEVICE_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: Gather units of an SG state: (label, units). One unit is the whole model at once, the worst case.
UNIT_CHOICES = (
    ("1 = whole model (worst case)", 1),
    *((str(n), n) for n in (2, 4, 8, 16)),
    ("32 = one per layer", 32),
    ("64", 64),
    ("128", 128),
)


class ZeroExplorer(Explorer):
    """Sliders for Ψ, N and the gather unit count, and a precision choice, driving the memory and
    communication charts.

    A notebook displays ``ZeroExplorer()`` (the controls, after a still of the chart for a notebook
    opened without running: ``live.show``); ``update()`` derives, moves the bars and re-renders the
    chart image (the benchmark times it).
    """

    def __init__(
        self,
        psi: float = 7.5e9,
        devices: int = 64,
        precision: str = "mixed_adam",
        strategies: tuple[str, ...] = ("dp", "zero1", "zero2", "zero3"),
        units: int = 32,
    ) -> None:
        self.strategies = strategies
        self.psi = psi_slider(psi)
        self.devices = devices_slider(DEVICE_CHOICES, devices)
        self.precision = dropdown(PRESETS, precision, "precision")
        # How many units an SG state is gathered in (FSDP wraps each layer: units = layers; default
        # 32, one per layer of a 32-layer model). Only the transient peak moves: a smaller unit, a
        # smaller gather window and reduce bucket. One unit -- the whole model gathered at once --
        # is the worst case, and labelled so.
        self.units = choice_slider(UNIT_CHOICES, units, "gather units")
        self.charts = CostCharts(strategies)
        self.assemble(
            [self.psi, self.devices],
            [self.precision, self.units],
            picture="memory and communication per device",
        )

    def comparison(self) -> Comparison:
        model = ModelSpec(psi=round(self.psi.value), gather_units=self.units.value)
        return compare(self.strategies, model, self.devices.value, self.precision.value)

    def update(self) -> Comparison:
        comparison = self.comparison()
        self.charts.update(comparison)
        self.image.value = self.charts.png()
        self.readout.value = comparison._repr_html_()
        return comparison


class CheckExplorer(Explorer):
    """Pick a strategy (named or composed) and a fault; read what the static checker finds."""

    def __init__(self, strategy: str = "zero3", fault: str = "none") -> None:
        from placement_edu.faults import FAULTS
        from placement_edu.strategies import COMPOSITIONS, STRATEGIES

        self.strategy = dropdown([*STRATEGIES, *COMPOSITIONS], strategy, "strategy")
        self.fault = dropdown(["none", *FAULTS], fault, "fault")
        self.assemble([self.strategy, self.fault])

    def still(self) -> str:
        return (
            f"<p>strategy {self.strategy.value}, fault {self.fault.value}:</p>{self.readout.value}"
        )

    def update(self) -> str:
        import html

        from placement_edu.checker import check
        from placement_edu.errors import PlacementError

        try:
            text = str(
                check(
                    self.strategy.value,
                    fault=None if self.fault.value == "none" else self.fault.value,
                )
            )
        except PlacementError as error:
            text = f"refused: {error}"
        self.readout.value = f"<pre style='white-space: pre-wrap'>{html.escape(text)}</pre>"
        return text
