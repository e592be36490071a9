"""What the fit explorer draws: the live set at every event of one rank's step, stacked by term,
and the breakdown as a table (issue 22). Drawing only: every byte is ``placement_edu.peak``'s.
GB = 10^9 bytes and GiB = 2^30 bytes, both labelled."""

from __future__ import annotations

import html
from typing import Any, Mapping

from placement_edu.peak import (
    ACTIVATIONS_AND_TEMPORARIES,
    ALL_GATHER_BUFFER,
    BLOCK_GATHERED,
    GRADIENTS_BEING_MADE,
    GRADS,
    OPTIMIZER,
    OPTIMIZER_TEMPORARIES,
    PARAMS,
    REDUCE_SCATTER_BUFFER,
    ROOT_GATHERED,
    ROOT_GRADIENTS,
    SHARDED_GRADS,
    SHARDED_PARAMS,
    StepPeak,
)
from placement_edu.placement import State
from placement_edu.presentation.style import OP_COLORS, STATE_COLORS, new_figure, png
from placement_edu.schedule.costs import OpKind
from placement_edu.units import GB, fmt_bytes

_GATHERED = dict(color=STATE_COLORS[State.PARAMS], alpha=0.45)
_MADE = dict(color=STATE_COLORS[State.GRADS], alpha=0.6)
#: How each term of an event is drawn: the state's colour, a collective's, or grey.
TERM_STYLE: Mapping[str, dict[str, Any]] = {
    PARAMS: dict(color=STATE_COLORS[State.PARAMS]),
    SHARDED_PARAMS: dict(color=STATE_COLORS[State.PARAMS]),
    ROOT_GATHERED: _GATHERED,
    BLOCK_GATHERED: _GATHERED,
    GRADS: dict(color=STATE_COLORS[State.GRADS]),
    SHARDED_GRADS: dict(color=STATE_COLORS[State.GRADS]),
    ROOT_GRADIENTS: _MADE,
    GRADIENTS_BEING_MADE: _MADE,
    OPTIMIZER: dict(color=STATE_COLORS[State.OPTIMIZER]),
    OPTIMIZER_TEMPORARIES: dict(color=STATE_COLORS[State.OPTIMIZER], alpha=0.45, hatch="//"),
    ACTIVATIONS_AND_TEMPORARIES: dict(color=STATE_COLORS[State.ACTIVATIONS]),
    ALL_GATHER_BUFFER: dict(color=OP_COLORS[OpKind.ALL_GATHER]),
    REDUCE_SCATTER_BUFFER: dict(color=OP_COLORS[OpKind.REDUCE_SCATTER]),
}
_OTHER = dict(color="#999999")


def event_chart(peak: StepPeak, title: str = "") -> bytes:
    """The live set at every event of the step, stacked by term (GB = 1e9 bytes); the peak's bar is
    outlined. PNG bytes."""
    events = peak.events
    figure = new_figure(9.6, 3.9)
    ax = figure.add_axes((0.07, 0.36, 0.66, 0.54))
    top = peak.peak
    seen: dict[str, Any] = {}
    for x, event in enumerate(events):
        bottom = 0.0
        for term, value in event.terms.items():
            if not value:
                continue
            style = TERM_STYLE.get(term, _OTHER)
            bar = ax.bar(
                x, value / GB, bottom=bottom, width=0.8, edgecolor="white", linewidth=0.3, **style
            )
            seen.setdefault(term, bar[0])
            bottom += value / GB
        if event is top:
            ax.bar(x, bottom, width=0.9, fill=False, edgecolor="black", linewidth=1.6)
            ax.text(
                x, bottom, f"peak\n{top.total / GB:.3f} GB", ha="center", va="bottom", fontsize=7
            )
    ax.set_xticks(range(len(events)), [e.name for e in events], rotation=60, ha="right", fontsize=6)
    ax.set_xlim(-0.7, len(events) - 0.3)
    ax.set_ylim(0, top.total / GB * 1.22)
    ax.set_ylabel("live bytes on this rank (GB = 1e9 B)", fontsize=8)
    ax.set_title(title, fontsize=8.5)
    figure.legend(
        list(seen.values()),
        list(seen),
        loc="upper left",
        bbox_to_anchor=(0.74, 0.9),
        fontsize=7,
        frameon=False,
    )
    return png(figure)


def readout_html(report: Mapping[str, Any]) -> str:
    """``placement_edu.peak.breakdown``'s dict as an HTML table: bytes, GB (1e9) and GiB (2^30),
    labelled."""
    memory = report["memory"]

    def row(name: str, value: int, bold: bool = False) -> str:
        cells = (html.escape(name), f"{value:,} B", html.escape(fmt_bytes(value)))
        tag = ("<b>", "</b>") if bold else ("", "")
        return "<tr>" + "".join(f"<td>{tag[0]}{c}{tag[1]}</td>" for c in cells) + "</tr>"

    rows = [
        row("params (stored on this rank)", memory["params"]),
        row("grads (stored on this rank)", memory["grads"]),
        row("optimizer (Adam m, v, step)", memory["optimizer"]),
        row("activations after forward", memory["activations"]),
    ]
    rows += [row(f"at the peak: {name}", value) for name, value in memory["transients"].items()]
    rows += [
        row("forward/backward peak", report["forward_backward_peak_bytes"]),
        row("optimizer-step peak", report["step_peak_bytes"]),
        row("peak", report["peak_bytes"], bold=True),
    ]
    return (
        "<table><tr><th></th><th>bytes</th><th>GB = 1e9 B (GiB = 2^30 B)</th></tr>"
        + "".join(rows)
        + f"</table><p>The peak is at: <b>{html.escape(report['peak_at'])}</b></p>"
    )
