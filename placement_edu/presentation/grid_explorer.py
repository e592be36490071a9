"""The mode explorer: pick a strategy, Ψ, N and a precision table; see who holds what.

``GridExplorer`` draws ``style.device_grid`` (one column per rank, one row per state) for the chosen
strategy and lists, beside it, the core's bytes per state on one device (``analyze``: persistent
device bytes, host bytes, the transient terms at the peak, and the step's communication). It
computes nothing itself: every number is the core's, every picture the style module's. Any
notebook may reuse it (``GridExplorer(strategy="zero3", psi=70e9, devices=8)``).
"""

from __future__ import annotations

import html

from placement_edu.models import ModelSpec
from placement_edu.placement import MODEL_STATES, State
from placement_edu.precision import PRESETS
from placement_edu.presentation.controls import devices_slider, dropdown, psi_slider
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import device_grid, grid_axis, png
from placement_edu.report import Report, analyze
from placement_edu.strategies import STRATEGIES
from placement_edu.units import fmt_bytes

#: Devices the explorer offers (the grid draws the first 8 ranks).
DEVICE_CHOICES = (2, 4, 8, 16, 32, 64)
#: The abstract model's layers: a pipeline needs a whole layer per stage at least, and an SG state
#: is gathered one layer at a time (FSDP wraps each layer), so its gather window is two layers
#: (the one computing and the next, prefetched): 2Ψ/LAYERS.
LAYERS = 64
#: Elements of one activation crossing a tensor- or pipeline-parallel boundary, b·s·h, for one
#: micro-batch: b = 1 sequence of s = 4096 tokens at width h = 4096 (Llama-2-7B's width). Only tp
#: and pp move it (their traffic scales with activations, not Ψ: SPEC §4); the table says so.
BOUNDARY = dict(b=1, s=4096, h=4096)


class GridExplorer(Explorer):
    """A strategy dropdown (every named strategy), a Ψ slider, a device choice and a precision
    dropdown driving the device grid and a table of the core's bytes per state on rank 0.

    ``update()`` derives (``report()``), redraws the grid image and the table, and returns the
    report; ``bytes_per_state()`` gives the numbers the table shows, straight from the core."""

    def __init__(
        self,
        strategy: str = "zero3",
        psi: float = 1e9,
        devices: int = 4,
        precision: str = "mixed_adam",
        strategies: tuple[str, ...] | None = None,
        layers: int = LAYERS,
    ) -> None:
        self.layers = layers  # of the abstract model; a notebook passes the model its text uses

        self.strategy = dropdown(strategies or STRATEGIES, strategy, "strategy")
        self.psi = psi_slider(psi)
        self.devices = devices_slider(DEVICE_CHOICES, devices)
        self.precision = dropdown(PRESETS, precision, "precision")
        self.assemble(
            [self.strategy, self.precision],
            [self.psi, self.devices],
            picture="who holds what, per rank",
        )

    # --- asking the core ---------------------------------------------------------------------
    def model(self) -> ModelSpec:
        """The abstract model of the chosen Ψ, in ``layers`` layers (one gather unit per layer),
        with a b·s·h boundary activation (BOUNDARY) for tp and pp."""
        return ModelSpec(
            round(self.psi.value),
            layers=self.layers,
            gather_units=self.layers,
            boundary_elements=BOUNDARY["b"] * BOUNDARY["s"] * BOUNDARY["h"],
        )

    def mesh(self) -> str:
        """Every device on the strategy's one axis (data; tensor for tp, pipeline for pp)."""
        return f"{grid_axis(self.strategy.value)}={self.devices.value}"

    def report(self) -> Report:
        return analyze(
            self.strategy.value, self.model(), precision=self.precision.value, mesh=self.mesh()
        )

    def bytes_per_state(self) -> dict[str, tuple]:
        """{state: (device bytes, host bytes)} on rank 0, and "model_state", "peak" -- the core's
        numbers."""
        memory = self.report().memory
        out: dict[str, tuple] = {s.value: (memory.device[s], memory.host[s]) for s in MODEL_STATES}
        out["model_state"] = (memory.model_state, memory.host_total)
        out["peak"] = (memory.peak, 0)
        return out

    # --- drawing -------------------------------------------------------------------------------
    def update(self) -> Report:
        report = self.report()
        figure = device_grid(report.strategy, report.model, report.mesh, report.precision)
        self.image.value = png(figure)
        self.readout.value = self._table(report)
        return report

    def _table(self, report: Report) -> str:
        memory, axis = report.memory, grid_axis(report.strategy)
        rows = "".join(
            f"<tr><td>{s.value}</td><td>{report.strategy.placement.mode(s, axis).value}</td>"
            f"<td>{report.precision.bytes_per(s)} B</td><td>{fmt_bytes(memory.device[s])}</td>"
            f"<td>{fmt_bytes(memory.host[s])}</td></tr>"
            for s in MODEL_STATES
        )
        transient = ", ".join(
            f"{name} {fmt_bytes(v)}" for name, v in memory.transient[memory.peak_phase].items() if v
        )
        activations = report.strategy.placement.mode(State.ACTIVATIONS, axis).value
        caption = (
            f"{html.escape(report.strategy.name)} on {report.mesh}, "
            f"Ψ = {report.model.psi:,} parameters "
            f"({self.layers} layers), {report.precision.name}: one device (rank 0). "
            "GB = 10^9 bytes, GiB = 2^30 bytes."
        )
        if axis != "data":
            caption += (
                f" Its traffic moves activations: priced for one micro-batch of b·s·h = "
                f"{BOUNDARY['b']}·{BOUNDARY['s']}·{BOUNDARY['h']} elements."
            )
        return (
            f"<table><caption>{caption}</caption><thead><tr><th>state</th><th>mode on {axis}</th>"
            "<th>bytes/param</th><th>on the device</th><th>in host memory</th></tr></thead>"
            f"<tbody>{rows}<tr><td>activations</td><td>{activations}</td><td>-</td>"
            "<td colspan=2>per micro-batch: depends on b·s·h and layers, not Ψ (notebook 09)"
            "</td></tr>"
            f"<tr><th>model state</th><td></td><td></td><th>{fmt_bytes(memory.model_state)}</th>"
            f"<td>{fmt_bytes(memory.host_total)}</td></tr>"
            f"<tr><th>peak</th><td colspan=2>in {memory.peak_phase}</td>"
            f"<th>{fmt_bytes(memory.peak)}</th>"
            f"<td>{html.escape(transient) or 'no transient term'}</td></tr>"
            f"<tr><th>communication</th><td colspan=2>per step, ZeRO convention</td>"
            f"<td>{float(report.volume_psi):g} Ψ</td>"
            f"<td>ring: {fmt_bytes(report.ring_bytes)} sent</td></tr>"
            "</tbody></table>"
        )
