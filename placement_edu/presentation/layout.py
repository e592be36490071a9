"""Where ranks sit: a picture of a mesh's ranks in their nodes, and the link each group of one rank
runs on. Presentation only: the rank order is ``Mesh``'s (``mesh.LAYOUT``: tensor innermost, then
data, pipeline, replica), the nodes and links are the hardware's (``Hardware.node``,
``Hardware.group_link``)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from placement_edu.errors import expect
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.timing import Hardware, get_hardware
from placement_edu.presentation.style import new_figure

#: A colour per mesh axis, for the groups of the highlighted rank.
AXIS_COLORS = {
    "tensor": "#d62728",
    "data": "#1f77b4",
    "pipeline": "#2ca02c",
    "replica": "#9467bd",
    "context": "#ff7f0e",
}
#: The most ranks one picture draws (16 nodes of 8).
MAX_DRAWN = 128


def rank_layout(
    mesh: Mesh | str, hardware: str | Hardware = "h100-nvlink-ib", rank: int = 0
) -> Figure:
    """One row of boxes per node, one box per rank (its number, and its index on each axis);
    ``rank``'s group along each axis coloured, and named in the legend with the nodes it spans
    and the link it runs on. A hardware whose one node holds every device draws rows of 8."""
    mesh, hw = as_mesh(mesh), get_hardware(hardware)
    world = mesh.world_size
    expect(
        world <= MAX_DRAWN,
        f"rank_layout draws at most {MAX_DRAWN} ranks, got a mesh of {world} ({mesh}); "
        "draw a smaller mesh with the same shape",
    )
    per_row = hw.gpus_per_node or min(world, 8)
    rows = -(-world // per_row)
    groups = {axis: mesh.group(rank, axis) for axis, n in mesh if n > 1}
    legend, body = 0.1 + 0.2 * len(groups), 0.62 * rows  # inches
    height = legend + body + 0.4
    figure = new_figure(1.2 + 0.95 * per_row, height)
    ax = figure.add_axes((0.1, legend / height, 0.89, body / height))
    ax.set_xlim(-0.1, per_row + 0.1)
    ax.set_ylim(rows, 0)
    ax.axis("off")
    colour = {r: AXIS_COLORS[a] for a, members in groups.items() for r in members if r != rank}
    for row in range(rows):
        node = hw.node(row * per_row)
        label = f"node {node}" if hw.gpus_per_node else ("one node" if row == 0 else "")
        ax.text(-0.15, row + 0.45, label, ha="right", va="center", fontsize=8)
        ax.add_patch(
            Rectangle((-0.05, row + 0.02), per_row + 0.1, 0.86, fill=False, edgecolor="#999999")
        )
    for r in range(world):
        row, column = divmod(r, per_row)
        coords = mesh.coords(r)
        ax.add_patch(
            Rectangle(
                (column + 0.06, row + 0.1),
                0.88,
                0.7,
                facecolor=colour.get(r, "white"),
                alpha=0.35 if r in colour else 1.0,
                edgecolor="black" if r == rank else "#666666",
                linewidth=2.0 if r == rank else 0.6,
            )
        )
        where = " ".join(f"{a[0]}{coords[a]}" for a, n in mesh if n > 1)
        ax.text(column + 0.5, row + 0.35, str(r), ha="center", va="center", fontsize=8)
        ax.text(column + 0.5, row + 0.62, where, ha="center", va="center", fontsize=6)
    lines = []
    for axis, members in groups.items():
        link = hw.group_link(members)
        nodes = sorted({hw.node(r) for r in members})
        spread = (
            f"inside node {nodes[0]}"
            if len(nodes) == 1
            else f"across nodes {nodes[0]}-{nodes[-1]}"
            if nodes == list(range(nodes[0], nodes[-1] + 1))
            else f"across nodes {', '.join(map(str, nodes))}"
        )
        shown = members if len(members) <= 8 else [*members[:3], "…", members[-1]]
        lines.append(
            (
                axis,
                f"{axis} group of rank {rank}: {shown} {spread}, on {link.name or 'its link'} "
                f"({link.bandwidth / 1e9:g} GB/s)",
            )
        )
    for i, (axis, text) in enumerate(lines):
        figure.text(
            0.01, (legend - 0.2 * (i + 1)) / height, text, color=AXIS_COLORS[axis], fontsize=8
        )
    per_node = f"{hw.gpus_per_node} GPUs per node" if hw.gpus_per_node else "one node"
    ax.set_title(
        f"{mesh} on {hw.name} ({per_node}): rank = ((r·p + p_i)·d + d_i)·t + t_i", fontsize=10
    )
    return figure
