"""Widgets for time (SPEC §9): a time explorer and a plan table. They read controls, ask the core
(``timing``, ``planner``) for seconds, and draw; they never compute a cost themselves.

``TimeExplorer``: link bandwidth W, achieved FLOP/s and tokens per device move stacked bars of
compute and communication (exposed solid, hidden hatched) per strategy, and each strategy's
compute-bound threshold is marked on a tokens axis beside the current tokens.
``PlanTable``: Ψ, devices, memory budget, hardware and overlap drive the planner's ranked table.
"""

from __future__ import annotations

import html
import math
from dataclasses import replace


from placement_edu.mesh import Mesh
from placement_edu.models import ModelSpec, TransformerSpec
from placement_edu.configuration import Choice
from placement_edu.planner import Plan, default_transformer, plan
from placement_edu.presentation.controls import (
    choice_slider,
    devices_slider,
    dropdown,
    log_slider,
    psi_slider,
)
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import new_figure, png
from placement_edu.timing import (
    HARDWARE,
    OVERLAPS,
    Hardware,
    Link,
    StepTime,
    compute_bound_tokens,
    step_time,
    tp_compute_bound,
)

#: Tokens per device the explorer offers: powers of two, 512 to 131,072.
TOKEN_CHOICES = tuple(2**k for k in range(9, 18))
#: The transformer the tensor-parallel bar runs (Llama-2-7B's widths, short sequences so that any
#: token count above is whole sequences): its tokens per device are b·s/t.
TP_MODEL = TransformerSpec(layers=32, hidden=4096, heads=32, seq=512, vocab=32000)
DATA_STRATEGIES = ("dp", "zero1", "zero2", "zero3")


class TimeExplorer(Explorer):
    """Sliders for W (GB/s), achieved FLOP/s (TFLOP/s) and tokens per device, an overlap choice;
    bars of one step's seconds per strategy: dp, zero1/2/3 on data = ``devices`` (Ψ of the
    transformer below), and tp on tensor = ``tensor``. One W prices every axis here."""

    def __init__(
        self,
        bandwidth_gbs: float = 50.0,
        tflops: float = 400.0,
        tokens: int = 4096,
        overlap: str = "per_pass",
        devices: int = 64,
        tensor: int = 8,
        alpha_s: float = 5e-6,
    ) -> None:
        self.devices, self.tensor, self.alpha_s = devices, tensor, alpha_s
        self.tp_model = TP_MODEL
        self.psi = self.tp_model.psi
        self.names = (*DATA_STRATEGIES, "tp")
        self.bandwidth = log_slider(bandwidth_gbs, 0, 3, "W (GB/s)")
        self.flops = log_slider(tflops, 1, 3.5, "TFLOP/s")
        self.tokens = choice_slider(TOKEN_CHOICES, tokens, "tokens/device")
        self.overlap = dropdown(OVERLAPS, overlap, "overlap")
        self.figure = new_figure(11, 4.2)
        self.bars_ax, self.line_ax = self.figure.subplots(1, 2)
        self.figure.subplots_adjust(left=0.07, right=0.98, top=0.9, bottom=0.2, wspace=0.25)
        self.times: dict[str, StepTime] = {}
        self.thresholds: dict[str, float] = {}
        self.assemble(
            [self.bandwidth, self.flops],
            [self.tokens, self.overlap],
            picture="seconds per step: compute and communication",
        )

    def hardware(self) -> Hardware:
        """One device at the chosen FLOP/s; every device in one node, on one link of the chosen W
        and fixed α."""
        link = Link(self.alpha_s, self.bandwidth.value * 1e9, "the explorer's slider")
        return Hardware("explorer", self.flops.value * 1e12, 80 * 2**30, link)

    def derive(self) -> None:
        """Ask the core for each strategy's step and threshold at the controls' values."""
        hw, tokens, overlap = self.hardware(), self.tokens.value, self.overlap.value
        data, abstract = Mesh.of(data=self.devices), ModelSpec(self.psi)
        self.times = {
            s: step_time(s, abstract, data, "mixed_adam", hw, tokens, overlap)
            for s in DATA_STRATEGIES
        }
        self.thresholds = {
            s: compute_bound_tokens(s, abstract, data, "mixed_adam", hw, overlap)
            for s in DATA_STRATEGIES
        }
        # tp: t devices share each sequence, so b = tokens·t/s sequences per micro-batch.
        tp_model = replace(TP_MODEL, micro_batch=tokens * self.tensor // TP_MODEL.seq)
        self.times["tp"] = step_time(
            "tp", tp_model, Mesh.of(tensor=self.tensor), "mixed_adam", hw, tokens, overlap
        )
        self.tp_rule = tp_compute_bound(tp_model, self.tensor, hw)

    def update(self) -> dict[str, StepTime]:
        self.derive()
        self._draw()
        return self.times

    def _draw(self) -> None:
        ax, line = self.bars_ax, self.line_ax
        ax.clear()
        line.clear()
        names = list(self.names)
        compute = [self.times[n].compute_s for n in names]
        shown = [self.times[n].exposed_comm_s for n in names]
        hidden = [self.times[n].comm_s - self.times[n].exposed_comm_s for n in names]
        self.compute_bars = ax.bar(names, compute, color="#4C72B0", label="compute")
        self.exposed_bars = ax.bar(
            names, shown, bottom=compute, color="#C44E52", label="exposed communication"
        )
        self.hidden_bars = ax.bar(
            names,
            hidden,
            bottom=[c + e for c, e in zip(compute, shown)],
            color="none",
            edgecolor="grey",
            hatch="//",
            label="hidden communication (under compute)",
        )
        ax.set_ylabel("seconds per optimizer step")
        ax.set_title(
            f"Ψ = {self.psi / 1e9:.2f}e9, N = {self.devices} (tp: t = {self.tensor}), "
            f"{self.tokens.value:,} tokens/device",
            fontsize=10,
        )
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3)
        for i, name in enumerate(DATA_STRATEGIES):
            at = self.thresholds[name]
            line.plot(
                [at] if math.isfinite(at) else [],
                [i] if math.isfinite(at) else [],
                "o",
                color="#C44E52",
            )
            line.annotate(
                f"{at:,.0f}" if math.isfinite(at) else "never",
                (TOKEN_CHOICES[0], i),
                xytext=(4, 4),
                textcoords="offset points",
                fontsize=8,
            )
        self.current = line.axvline(
            self.tokens.value, color="#4C72B0", label="tokens per device (slider)"
        )
        line.set_xscale("log")
        line.set_xlim(TOKEN_CHOICES[0] / 2, TOKEN_CHOICES[-1] * 2)
        line.set_ylim(-0.5, len(DATA_STRATEGIES) - 0.5)
        line.set_yticks(range(len(DATA_STRATEGIES)), DATA_STRATEGIES)
        line.set_xlabel("tokens per device (log): compute-bound right of the dot")
        line.set_title(f"compute-bound threshold ({self.overlap.value})", fontsize=10)
        self.image.value = png(self.figure)
        rows = "".join(
            f"<tr><td>{n}</td><td>{t.compute_s:.4g}</td><td>{t.comm_s:.4g}</td>"
            f"<td>{t.exposed_comm_s:.4g}</td>"
            f"<td>{t.total_s:.4g}</td><td>{self.thresholds[n]:,.0f}</td></tr>"
            if n in self.thresholds
            else f"<tr><td>{n}</td><td>{t.compute_s:.4g}</td><td>{t.comm_s:.4g}</td>"
            f"<td>{t.exposed_comm_s:.4g}</td>"
            f"<td>{t.total_s:.4g}</td><td>width h ≥ {self.tp_rule['h_needed']:,.0f} "
            f"(h = {self.tp_rule['h']:,.0f})</td></tr>"
            for n, t in self.times.items()
        )
        self.readout.value = (
            "<table><thead><tr><th>strategy</th><th>compute s</th><th>comm s</th><th>exposed s</th>"
            "<th>step s</th><th>compute-bound above (tokens/device)</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )


DEVICE_CHOICES = (8, 16, 32, 64, 128, 256, 512, 1024)


class PlanTable(Explorer):
    """Ψ, devices, memory budget (GB), hardware and overlap; the planner's ranked placements."""

    def __init__(
        self,
        psi: float = 70e9,
        devices: int = 64,
        memory_gb: int = 80,
        hardware: str = "h100-nvlink-ib",
        overlap: str = "per_pass",
        top: int = 10,
    ) -> None:
        import ipywidgets as w

        self.top = top
        self.psi = psi_slider(psi, lowest_exponent=9)
        self.devices = devices_slider(DEVICE_CHOICES, devices)
        self.memory = w.IntSlider(
            value=memory_gb,
            min=8,
            max=192,
            step=8,
            description="GB / device",
            continuous_update=False,
        )
        self.hardware = dropdown(HARDWARE, hardware, "hardware")
        self.overlap = dropdown(OVERLAPS, overlap, "overlap")
        self.assemble([self.psi, self.devices, self.memory], [self.hardware, self.overlap])

    def plan(self) -> Plan:
        model, assumption = default_transformer(round(self.psi.value))
        return plan(
            model,
            self.devices.value,
            self.memory.value * 10**9,
            self.hardware.value,
            overlap=self.overlap.value,
            assumption=assumption,
        )

    def update(self) -> Plan:
        result = self.plan()
        rows = "".join(_ranked_row(i, c) for i, c in enumerate(result.ranked[: self.top]))
        why = "".join(
            f"<li>{html.escape(result.explain(i))}</li>" for i in range(min(3, len(result.ranked)))
        )
        self.readout.value = (
            f"<p>{html.escape(result.assumption)}</p><p>{len(result.ranked)} placements fit, "
            f"{len(result.infeasible)} do not.</p>"
            "<table><thead><tr><th>#</th><th>strategy</th><th>mesh</th>"
            "<th>recompute</th><th>step s</th><th>compute s</th><th>exposed comm s</th>"
            "<th>bubble s</th>"
            f"<th>peak GB</th></tr></thead><tbody>{rows}</tbody></table><ol>{why}</ol>"
        )
        return result


def _ranked_row(i: int, c: Choice) -> str:
    """Choice ``i`` of a plan's ranking as a table row (a ranked choice fits: it has a time)."""
    t = c.time
    assert t is not None
    return (
        f"<tr><td>{i + 1}</td><td>{html.escape(c.strategy.name)}</td><td>{c.mesh}</td>"
        f"<td>{c.recompute}</td>"
        f"<td>{t.total_s:.4g}</td><td>{t.compute_s:.4g}</td>"
        f"<td>{t.exposed_comm_s:.4g}</td>"
        f"<td>{t.bubble_s:.4g}</td><td>{c.peak_bytes / 1e9:.1f}</td></tr>"
    )
