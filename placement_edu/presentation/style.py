"""One visual language for every figure of the course: one colour per state (Okabe & Ito's
colour-blind-safe palette), one colour per collective, units on every axis, and the device grid --
the "who holds what" picture -- drawn the same way everywhere. Presentation only: the grid reads the
core's derivation (``derive_memory``) and draws it.

Every figure is a plain ``matplotlib.figure.Figure`` on the Agg canvas (no pyplot state), so a
widget can show it as PNG bytes (``png``) and a lecturer can save it for slides (``save``).
"""

from __future__ import annotations

import io
from fractions import Fraction
from typing import Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from placement_edu.memory import Memory, derive_memory
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import Model, as_model
from placement_edu.placement import GATHERED, HOST_MODES, SPLIT_MODES, Mode, State
from placement_edu.presentation.live import PIXEL_DENSITY
from placement_edu.precision import Precision, get_precision
from placement_edu.schedule.costs import OpKind
from placement_edu.strategies import Strategy, get_strategy
from placement_edu.units import fmt_bytes

#: Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision
#: deficiency. One colour per training state, in every figure.
STATE_COLORS = {
    State.PARAMS: "#0072B2",
    State.GRADS: "#E69F00",
    State.OPTIMIZER: "#009E73",
    State.ACTIVATIONS: "#CC79A7",
}
#: One colour per operation, in every figure (host transfers grey: they use the host link).
OP_COLORS = {
    OpKind.ALL_REDUCE: "#56B4E9",
    OpKind.REDUCE_SCATTER: "#D55E00",
    OpKind.ALL_GATHER: "#F0E442",
    OpKind.BROADCAST: "#999999",
    OpKind.SEND: "#000000",
    OpKind.RECV: "#000000",
    OpKind.H2D: "#BBBBBB",
    OpKind.D2H: "#BBBBBB",
}
HOST_HATCH = "xx"
#: What each mode looks like in a device grid.
MODE_LEGEND = {
    Mode.R: "R replicated: every device holds all of it",
    Mode.S: "S sharded: each device keeps its own 1/N slice",
    Mode.SG: "SG sharded-with-gather: a 1/N slice, the whole rebuilt (dashed) just before use",
    Mode.M: "M materialized: made in forward, freed by the end of backward (dotted)",
    Mode.OFF: "OFF offloaded: the slice lives in host memory (hatched)",
}


#: Every figure is laid out at 80 dots per inch of the screen and drawn at PIXEL_DENSITY times
#: that: a 9-inch figure is 1,440 pixels, shown 720 CSS pixels wide (``live.png_html``,
#: ``live.sharp_image``).
FIGURE_DPI = 80 * PIXEL_DENSITY


def new_figure(width: float, height: float, dpi: int = FIGURE_DPI) -> Figure:
    """A bare Figure on the Agg canvas (no pyplot state): every figure of the package starts
    here."""
    figure = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(figure)
    return figure


def png(figure: Figure) -> bytes:
    """The figure as PNG bytes (for ``ipywidgets.Image`` or an inline still)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def save(figure: Figure, path: str, dpi: int = 200) -> str:
    """Save ``figure`` for slides (PNG, SVG or PDF, by the file's extension); returns the path."""
    figure.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def device_grid(
    strategy: str | Strategy,
    model: Model | float = 1e9,
    mesh: Mesh | str | int = 4,
    precision: str | Precision = "mixed_adam",
    max_ranks: int = 8,
    title: str = "",
) -> Figure:
    """Who holds what: one column per rank (the first ``max_ranks``), one row per state. The outline
    is the whole state; the filled part is what this rank keeps on the device between steps, drawn
    at its slice's place (disjoint slices visibly tile the state across ranks); SG's dashed whole is
    the transient gather; OFF is hatched, in host memory; activations (M) are dotted, transient.
    Bytes per rank are the core's (``derive_memory``), written under each bar."""
    strategy, model = get_strategy(strategy), as_model(model)
    mesh = Mesh.of(data=mesh) if isinstance(mesh, int) else as_mesh(mesh)
    precision = get_precision(precision)
    ranks = list(range(min(mesh.world_size, max_ranks)))
    axis = grid_axis(strategy)
    memories = [derive_memory(strategy, model, mesh, precision, r) for r in ranks]
    states = [State.PARAMS, State.GRADS, State.OPTIMIZER, State.ACTIVATIONS]
    width = 1.6 + 1.55 * len(ranks)
    figure = new_figure(width, 3.9)
    left = 1.15 / width  # room for "(OFF on pipeline)" labels, in inches
    ax = figure.add_axes((left, 0.2, 0.99 - left, 0.68))
    ax.set_xlim(0, len(ranks))
    ax.set_ylim(-0.2, len(states))
    ax.set_yticks(
        [len(states) - i - 0.5 for i in range(len(states))],
        [f"{s.value}\n({strategy.placement.mode(s, axis).value} on {axis})" for s in states],
        fontsize=8,
    )
    ax.set_xticks(
        [r + 0.5 for r in ranks], [f"rank {r}" + _coords(mesh, r) for r in ranks], fontsize=8
    )
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    for column, (rank, memory) in enumerate(zip(ranks, memories)):
        for row, state in enumerate(states):
            _cell(
                ax,
                column,
                len(states) - row - 1,
                strategy,
                mesh,
                model,
                precision,
                memory,
                state,
                rank,
                axis,
            )
    more = (
        f" (first {len(ranks)} of {mesh.world_size} ranks)" if mesh.world_size > len(ranks) else ""
    )
    ax.set_title(title or f"{strategy.name} on {mesh}: who holds what{more}", fontsize=10)
    figure.text(
        0.01,
        0.02,
        "filled: kept on the device between steps; dashed: gathered for use; hatched: "
        "in host memory; dotted: transient.\nBytes: persistent per device (activations: at peak).",
        fontsize=7,
    )
    return figure


def grid_axis(strategy: str | Strategy) -> str:
    """The mesh axis a device grid draws: a strategy's one axis (tp: tensor, pp: pipeline), else
    data."""
    strategy = get_strategy(strategy)
    return strategy.axes[0] if len(strategy.axes) == 1 else "data"


def _coords(mesh: Mesh, rank: int) -> str:
    axes = [(a, n) for a, n in mesh if n > 1]
    if len(axes) < 2:
        return ""
    coords = mesh.coords(rank)
    return "\n" + ",".join(f"{a[0]}{coords[a]}" for a, _ in axes)


def _cell(
    ax: Axes,
    column: int,
    row: int,
    strategy: Strategy,
    mesh: Mesh,
    model: Model,
    precision: Precision,
    memory: Memory,
    state: State,
    rank: int,
    axis: str = "data",
) -> None:
    x0, width, y0, height = column + 0.08, 0.84, row + 0.25, 0.5
    colour = STATE_COLORS[state]
    ax.add_patch(Rectangle((x0, y0), width, height, fill=False, edgecolor="#444444", linewidth=0.6))
    if state is State.ACTIVATIONS:
        held = memory.transient_peak("activations")
        ax.add_patch(
            Rectangle(
                (x0, y0),
                width,
                height,
                facecolor=colour,
                alpha=0.25,
                edgecolor=colour,
                linestyle=":",
                linewidth=1.5,
            )
        )
        ax.text(
            x0 + width / 2,
            y0 - 0.12,
            fmt_bytes(held) if held else "per micro-batch",
            ha="center",
            va="center",
            fontsize=7,
        )
        return
    mode = strategy.placement.mode(state, axis)
    on_device, on_host = memory.device[state], memory.host[state]
    whole = model.psi * precision.bytes_per(state)
    share = Fraction(on_device or on_host, whole) if whole else Fraction(0)
    share = min(share, Fraction(1))
    index = mesh.coords(rank).get(axis, 0)
    start = index * share if mode in SPLIT_MODES or mode in HOST_MODES else 0
    start = min(start, 1 - share)
    if mode in GATHERED and mode is not Mode.OFF:
        ax.add_patch(
            Rectangle(
                (x0, y0), width, height, fill=False, edgecolor=colour, linestyle="--", linewidth=1.2
            )
        )
    ax.add_patch(
        Rectangle(
            (x0 + float(start) * width, y0),
            float(share) * width,
            height,
            facecolor=colour,
            hatch=HOST_HATCH if on_host else None,
            alpha=0.45 if on_host else 0.9,
            edgecolor=colour,
        )
    )
    label = " + ".join(
        [fmt_bytes(on_device)] * bool(on_device) + [f"host {fmt_bytes(on_host)}"] * bool(on_host)
    )
    ax.text(x0 + width / 2, y0 - 0.12, label or "0 B", ha="center", va="center", fontsize=7)


def legend_lines(modes: Sequence[Mode] = tuple(MODE_LEGEND)) -> str:
    """The device grid's legend, one line per mode (for a caption)."""
    return "\n".join(MODE_LEGEND[m] for m in modes)
