"""Their number and ours: pick Ψ, N, a precision preset and another tool's convention (DeepSpeed,
Accelerate) and see the figure the tool prints beside the one we derive, reconciled term by term.

Presentation only: the tool's figure comes from ``placement_edu.estimators`` (their formulas, as
their source computes them), ours from ``report.analyze``, the lines from ``estimators.reconcile``.
The widget picks which function to call and draws what comes back; it computes no cost itself.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Mapping

from matplotlib.figure import Figure

from placement_edu.estimators import (
    Estimate,
    GiB,
    Reconciliation,
    accelerate_training,
    deepspeed_zero2,
    ours,
    reconcile,
)
from placement_edu.models import ModelSpec
from placement_edu.placement import Placement, State
from placement_edu.precision import PRESETS
from placement_edu.presentation.controls import devices_slider, dropdown, psi_slider
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import STATE_COLORS, new_figure, png
from placement_edu.report import analyze
from placement_edu.strategies import Strategy
from placement_edu.units import GB, fmt_bytes


@dataclass(frozen=True)
class Convention:
    """One published way of counting: ``theirs(psi, n)`` is the tool's Estimate, ``placement`` and
    ``devices(n)`` say what we derive beside it, ``precision`` is the preset that counts what the
    tool counts (SPEC §1), ``note`` one sentence on where the two differ."""

    label: str
    theirs: Callable[[int, int], Estimate]
    placement: Placement
    devices: Callable[[int], int]
    precision: str
    note: str


_ZERO2 = Placement(params="R", grads="S", optimizer="S")
_ZERO2_OFFLOAD = Placement(params="R", grads="OFF", optimizer="OFF")
_DP = Placement(params="R", grads="R", optimizer="R")

#: The conventions the widget offers, in the order a learner meets them.
CONVENTIONS: Mapping[str, Convention] = {
    "deepspeed-zero2": Convention(
        "DeepSpeed ZeRO-2 per GPU, today (PR #5099: 2Ψ + 18Ψ/N)",
        lambda psi, n: deepspeed_zero2(psi, n, 1, offload_optimizer=False).gpu,
        _ZERO2,
        lambda n: n,
        "mixed_adam_fp32_accum",
        "18 B/param divided: fp16 + fp32 gradients (2 + 4) and fp32 params + m + v (12); "
        "printed in GiB labelled GB.",
    ),
    "deepspeed-zero2-docs": Convention(
        "DeepSpeed ZeRO-2 per GPU, the docs' table (PR #965: 4Ψ + 16Ψ/N)",
        lambda psi, n: deepspeed_zero2(psi, n, 1, offload_optimizer=False, formula="pr965").gpu,
        _ZERO2,
        lambda n: n,
        "mixed_adam_fp32_accum",
        "the first formula kept the fp16 gradients whole on every GPU; ZeRO-2 shards them "
        "(fixed in PR #5099).",
    ),
    "deepspeed-zero2-offload": Convention(
        "DeepSpeed ZeRO-2 + CPU optimizer offload, per GPU",
        lambda psi, n: deepspeed_zero2(psi, n, 1, offload_optimizer=True).gpu,
        _ZERO2_OFFLOAD,
        lambda n: n,
        "mixed_adam_fp32_accum",
        "only the fp16 parameters stay on the GPU: 2Ψ.",
    ),
    "accelerate-float32": Convention(
        "Accelerate estimate-memory, float32, 'Training using Adam' (one device)",
        lambda psi, n: accelerate_training(psi, "float32"),
        _DP,
        lambda n: 1,
        "fp32_adam",
        "the largest of four phases: the step's 4 × the fp32 model = 16Ψ, "
        "which equals fp32 Adam's sum.",
    ),
    "accelerate-float16": Convention(
        "Accelerate estimate-memory, float16, 'Training using Adam' (one device)",
        lambda psi, n: accelerate_training(psi, "float16"),
        _DP,
        lambda n: 1,
        "mixed_adam",
        "the largest of four phases (8Ψ), not the 16Ψ mixed-precision Adam keeps alive at once.",
    ),
}
#: The precision choice that means "the preset that counts what the tool counts".
MATCHING = "(the tool's own)"
DEVICE_CHOICES = (1, 2, 4, 8, 16, 64, 256, 1024)
#: Bar colours: our three states in the course's colours, everything else grey.
KIND_COLORS = {
    "params": STATE_COLORS[State.PARAMS],
    "grads": STATE_COLORS[State.GRADS],
    "optimizer": STATE_COLORS[State.OPTIMIZER],
}


def reconciliation(
    convention: str, psi: int, devices: int, precision: str = MATCHING
) -> Reconciliation:
    """Their estimate for ``convention`` at Ψ = ``psi`` on ``devices`` GPUs, reconciled with ours
    (``estimators.reconcile``; ours from ``report.analyze`` of the placement the convention
    means)."""
    c = CONVENTIONS[convention]
    chosen = c.precision if precision == MATCHING else precision
    report = analyze(Strategy(convention, c.placement), ModelSpec(psi), c.devices(devices), chosen)
    return reconcile(c.theirs(psi, devices), ours(report, "per GPU"))


class ConventionExplorer(Explorer):
    """Controls: a convention, Ψ, N, our precision preset. Shows the tool's printed figure and ours
    (GB = 10^9 and GiB = 2^30 bytes, labelled), a bar per term kind on each side, and the
    term-by-term lines: ``=`` where the two agree to the byte, ``≠`` with both sides named."""

    def __init__(
        self,
        convention: str = "deepspeed-zero2",
        psi: float = 2.851e9,
        devices: int = 8,
        precision: str = MATCHING,
    ) -> None:
        labelled = [(c.label, k) for k, c in CONVENTIONS.items()]
        self.convention = dropdown(labelled, convention, "convention", width="560px")
        self.psi = psi_slider(psi, digits=4)
        self.devices = devices_slider(DEVICE_CHOICES, devices, "N (GPUs)")
        self.precision = dropdown([MATCHING, *PRESETS], precision, "ours")
        self.assemble(
            self.convention,
            [self.psi, self.devices, self.precision],
            picture="their estimate beside ours, term by term",
        )

    def current(self) -> Reconciliation:
        return reconciliation(
            self.convention.value, round(self.psi.value), self.devices.value, self.precision.value
        )

    def update(self) -> Reconciliation:
        result = self.current()
        self.image.value = png(chart(result))
        self.readout.value = table_html(result, CONVENTIONS[self.convention.value].note)
        return result


def chart(result: Reconciliation) -> Figure:
    """Two horizontal bars per kind of term -- theirs, ours -- in GB (10^9 bytes), and the
    totals."""
    lines = [line for line in result.lines if line.kind != "total"]
    figure = new_figure(9, 1.2 + 0.42 * (len(lines) + 1))
    ax = figure.add_axes((0.2, 0.22, 0.62, 0.66))
    rows = [(line.kind, line.theirs, line.ours) for line in lines]
    rows.append(("TOTAL", result.theirs.total_bytes, result.ours.total_bytes))
    for i, (kind, theirs, mine) in enumerate(reversed(rows)):
        colour = KIND_COLORS.get(kind, "#999999")
        for offset, value, hatch in ((0.2, theirs, "//"), (-0.2, mine, None)):
            ax.barh(
                i + offset,
                float(Fraction(value) / GB),
                height=0.36,
                color=colour,
                hatch=hatch,
                edgecolor="#444444",
                linewidth=0.5,
                alpha=0.85 if hatch is None else 0.45,
            )
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=8)
    ax.set_xlabel("GB (10^9 bytes) per GPU — hatched: theirs, solid: ours", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.set_title(
        f"{result.theirs.convention}: prints {result.theirs.printed.strip()} "
        f"({'the largest term' if result.theirs.rule == 'max' else 'the sum'})",
        fontsize=8,
    )
    verdict = "agree to the byte" if result.agrees else "differ"
    figure.text(
        0.84,
        0.5,
        f"theirs\n{float(Fraction(result.theirs.total_bytes) / GB):.4g} GB\n"
        f"({float(Fraction(result.theirs.total_bytes) / GiB):.4g} GiB)\n\nours\n"
        f"{float(Fraction(result.ours.total_bytes) / GB):.4g} GB\n"
        f"({float(Fraction(result.ours.total_bytes) / GiB):.4g} GiB)\n\n{verdict}",
        fontsize=8,
        va="center",
    )
    return figure


def table_html(result: Reconciliation, note: str = "") -> str:
    """The reconciliation as an HTML table: one row per kind of term."""
    head = (
        f"<p><b>theirs</b>: {html.escape(result.theirs.printed.strip())} "
        f"= {html.escape(fmt_bytes(result.theirs.total_bytes))} "
        f"[{html.escape(result.theirs.unit)}]<br>"
        f"<b>ours</b>: {html.escape(fmt_bytes(result.ours.total_bytes))} "
        f"[{html.escape(result.ours.convention)}] — "
        f"{'agree to the byte' if result.agrees else 'differ'}"
        f"{'. ' + html.escape(note) if note else ''}</p>"
    )
    rows = "".join(
        f"<tr><td>{line.kind}</td><td>{html.escape(fmt_bytes(line.theirs))}</td>"
        f"<td>{'=' if line.agrees else '≠'}</td><td>{html.escape(fmt_bytes(line.ours))}</td>"
        f"<td style='text-align:left'>{html.escape(line.why)}</td></tr>"
        for line in result.lines
    )
    return (
        head
        + "<table><tr><th>term</th><th>theirs</th><th></th><th>ours</th><th>why</th></tr>"
        + rows
        + "</table>"
    )
