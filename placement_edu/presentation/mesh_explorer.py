"""The mesh explorer: degrees r·d·t·p of a mesh and a placement per axis; the core prices the
composition (memory multiplies, communication adds, SPEC §6) or says which safety rule it breaks.

The widget builds a ``Strategy`` from the choices -- a specification, nothing more -- and asks the
core: ``checker.check`` for the conditions and the rules (which also refuses what cannot run at
all), ``report.analyze`` for memory and the schedule. A composition that breaks a rule is not priced
(the core refuses to price it); the widget shows the rule instead.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Mapping

from matplotlib.patches import Rectangle

from placement_edu.checker import CheckResult, check
from placement_edu.errors import PlacementError
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.names import composed_name
from placement_edu.placement import MODEL_STATES, Placement, State
from placement_edu.presentation.controls import count_slider, devices_slider, dropdown
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import STATE_COLORS, new_figure, png
from placement_edu.report import Report, analyze
from placement_edu.strategies import Strategy
from placement_edu.units import GB, fmt_bytes

#: The model the explorer prices: Llama-2-7B's widths as a GPT-style block (Touvron et al. 2023),
#: one sequence of 4,096 tokens per micro-batch, selective recomputation (Korthikanti et al. 2022).
MODEL = TransformerSpec(
    layers=32, hidden=4096, heads=32, seq=4096, vocab=32000, recompute="selective"
)
DEGREES = (1, 2, 4, 8)

#: The choices per axis: label -> (params, grads, optimizer) modes on that axis, and options.
DATA_CHOICES: Mapping[str, tuple[str, str, str, bool]] = {  # ..., reshard_after_forward
    "dp: P R, G R, O R": ("R", "R", "R", True),
    "zero1: P R, G R, O S": ("R", "R", "S", True),
    "zero2: P R, G S, O S": ("R", "S", "S", True),
    "zero3: P SG, G S, O S": ("SG", "S", "S", True),
    "fsdp_grad_op: P SG (kept), G S, O S": ("SG", "S", "S", False),
    "G M, no reduction (breaks rule 2)": ("R", "M", "R", True),
}
TENSOR_CHOICES: Mapping[str, tuple[str, str, str, bool]] = {  # ..., splits two dimensions at once
    "Megatron TP: P S, G S, O S": ("S", "S", "S", False),
    "O R, whole optimizer (breaks rule 3)": ("S", "S", "R", False),
    "P SG, gathered on tensor (breaks rule 4)": ("SG", "S", "S", False),
    "splits hidden and heads (breaks rule 1)": ("S", "S", "S", True),
    "P R, G R, O R: nothing split (refused)": ("R", "R", "R", False),
}
PIPELINE_CHOICES: Mapping[str, tuple[str, str, str]] = {
    "stages: P S, G S, O S": ("S", "S", "S"),
    "O R, whole optimizer (breaks rule 3)": ("S", "S", "R"),
}
#: On the replica axis (hybrid sharding) everything is whole: each replica group is a copy.
REPLICA_MODES = ("R", "R", "R")


def composed_strategy(
    replica: int,
    data: int,
    tensor: int,
    pipeline: int,
    data_choice: str,
    tensor_choice: str,
    pipeline_choice: str,
    micro_batches: int = 1,
) -> tuple[Strategy, Mesh]:
    """The strategy and mesh the choices describe (axes of degree 1 are left out)."""
    degrees = {"replica": replica, "data": data, "tensor": tensor, "pipeline": pipeline}
    axes = [a for a, n in degrees.items() if n > 1]
    mesh = Mesh.of(**{a: degrees[a] for a in axes}) if axes else Mesh.of(data=1)
    *data_modes, reshard = DATA_CHOICES[data_choice]
    *tensor_modes, two_dims = TENSOR_CHOICES[tensor_choice]
    per_axis = {
        "replica": REPLICA_MODES,
        "data": tuple(data_modes),
        "tensor": tuple(tensor_modes),
        "pipeline": PIPELINE_CHOICES[pipeline_choice],
    }
    modes = {
        state: {a: per_axis[a][i] for a in axes} or "R"
        for i, state in enumerate(("params", "grads", "optimizer"))
    }
    name = composed_name(data_choice.split(":")[0].split(",")[0], axes)
    shard_dims = (("tensor", ("hidden", "heads")),) if two_dims and tensor > 1 else ()
    strategy = Strategy(
        name,
        Placement(**modes),
        reshard_after_forward=reshard,
        micro_batches=micro_batches,
        mesh_axes=tuple(axes),
        shard_dims=shard_dims,
    )
    return strategy, mesh


@dataclass(frozen=True)
class MeshView:
    """What the explorer shows: the strategy, the mesh, the checker's verdict, and the core's report
    when the composition is priced (None when it breaks a rule or cannot run: ``refused`` says
    why)."""

    strategy: Strategy
    mesh: Mesh
    checked: CheckResult | None
    report: Report | None
    refused: str = ""

    @property
    def priced(self) -> bool:
        return self.report is not None


def mesh_view(strategy: Strategy, mesh: Mesh, model: TransformerSpec = MODEL) -> MeshView:
    """Ask the core: check the composition (conditions, rules), then price it if it is safe."""
    try:
        checked = check(strategy, mesh, model=model)
    except PlacementError as error:
        return MeshView(strategy, mesh, None, None, f"refused: {error}")
    if checked.rule_violations:
        return MeshView(
            strategy,
            mesh,
            checked,
            None,
            "not priced: " + "; ".join(map(str, checked.rule_violations)),
        )
    return MeshView(strategy, mesh, checked, analyze(strategy, model, mesh=mesh))


class MeshExplorer(Explorer):
    """Sliders for r, d, t, p and micro-batches m; a placement choice per axis. Shows per-device
    memory (model state and peak), ring bytes per axis, and the checker's verdict with any broken
    rule."""

    #: The bars of the last drawing (a test reads their heights): per state, then per axis.
    memory_bars: list[Rectangle]
    comm_bars: list[Rectangle]

    def __init__(
        self,
        replica: int = 1,
        data: int = 2,
        tensor: int = 2,
        pipeline: int = 2,
        micro_batches: int = 4,
        data_choice: str = "zero1: P R, G R, O S",
        tensor_choice: str = "Megatron TP: P S, G S, O S",
        pipeline_choice: str = "stages: P S, G S, O S",
    ) -> None:
        self.replica = devices_slider(DEGREES, replica, "r (replica)")
        self.data = devices_slider(DEGREES, data, "d (data)")
        self.tensor = devices_slider(DEGREES, tensor, "t (tensor)")
        self.pipeline = devices_slider(DEGREES, pipeline, "p (pipeline)")
        self.micro_batches = count_slider(micro_batches, 1, 16, "m (micro-batches)")
        wide = "420px"
        self.data_choice = dropdown(DATA_CHOICES, data_choice, "on data", wide)
        self.tensor_choice = dropdown(TENSOR_CHOICES, tensor_choice, "on tensor", wide)
        self.pipeline_choice = dropdown(PIPELINE_CHOICES, pipeline_choice, "on pipeline", wide)
        self.figure = new_figure(9.0, 3.4)
        self.memory_ax = self.figure.add_axes((0.08, 0.1, 0.2, 0.68))
        self.comm_ax = self.figure.add_axes((0.66, 0.1, 0.32, 0.68))
        self.view: MeshView | None = None
        self.assemble(
            [self.replica, self.data],
            [self.tensor, self.pipeline],
            self.micro_batches,
            self.data_choice,
            self.tensor_choice,
            self.pipeline_choice,
            picture="memory and communication per device",
        )

    def strategy_and_mesh(self) -> tuple[Strategy, Mesh]:
        return composed_strategy(
            self.replica.value,
            self.data.value,
            self.tensor.value,
            self.pipeline.value,
            self.data_choice.value,
            self.tensor_choice.value,
            self.pipeline_choice.value,
            self.micro_batches.value,
        )

    def update(self) -> MeshView:
        view = mesh_view(*self.strategy_and_mesh())
        self.view = view
        self._draw(view)
        self.image.value = png(self.figure)
        self.readout.value = self._describe(view)
        return view

    def _draw(self, view: MeshView) -> None:
        mem, comm = self.memory_ax, self.comm_ax
        mem.clear()
        comm.clear()
        title = f"{view.strategy.name} on {view.mesh} ({view.mesh.world_size} devices)"
        self.figure.suptitle(title, fontsize=10, y=0.985)
        if view.report is None:
            for ax in (mem, comm):
                ax.text(
                    0.5,
                    0.5,
                    "not priced:\nsee the rule below",
                    ha="center",
                    va="center",
                    fontsize=10,
                    color="#D55E00",
                    transform=ax.transAxes,
                )
                ax.set_xticks([])
                ax.set_yticks([])
            self.memory_bars, self.comm_bars = [], []
            return
        m = view.report.memory
        bottom, self.memory_bars = 0.0, []
        for state in MODEL_STATES:
            value = float(m.device[state]) / GB
            on_data = (
                view.strategy.placement.mode(state, "data").value
                if view.mesh.degree("data") > 1
                else "-"
            )
            self.memory_bars.append(
                mem.bar(
                    ["per device"],
                    [value],
                    bottom=bottom,
                    color=STATE_COLORS[state],
                    label=f"{state.value} ({on_data} on data)",
                )[0]
            )
            bottom += value
        transient = float(m.peak - m.model_state) / GB
        self.memory_bars.append(
            mem.bar(
                ["per device"],
                [transient],
                bottom=bottom,
                color=STATE_COLORS[State.ACTIVATIONS],
                alpha=0.35,
                hatch="..",
                label=f"transient at peak ({m.peak_phase})",
            )[0]
        )
        mem.set_ylabel("GB (1e9 bytes)")
        mem.set_title(
            f"memory multiplies: model state {float(m.model_state) / GB:.2f} GB,\n"
            f"peak {float(m.peak) / GB:.2f} GB per device",
            fontsize=9,
            loc="left",
        )
        mem.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        mem.set_xlim(-0.8, 0.8)
        by_axis = view.report.schedule.ring_bytes_by_axis()
        axes = [a for a, _ in view.mesh if a in by_axis] or ["(none)"]
        values = [float(by_axis.get(a, 0)) / GB for a in axes]
        self.comm_bars = list(comm.bar(axes, values, color="#56B4E9"))
        for x, value in enumerate(values):
            comm.text(x, value, f"{value:.3g}", ha="center", va="bottom", fontsize=8)
        comm.set_ylabel("GB (1e9 bytes) sent, per device per step", fontsize=8)
        comm.set_title("communication adds: ring bytes by axis", fontsize=9)

    @staticmethod
    def _describe(view: MeshView) -> str:
        lines = [
            f"<b>{html.escape(view.strategy.name)}</b> "
            f"[{html.escape(str(view.strategy.placement))}] on "
            f"{view.mesh}, micro-batches m = {view.strategy.micro_batches}"
        ]
        if view.report is not None:
            m, r = view.report.memory, view.report
            lines.append(
                " · ".join(f"{s.value} {html.escape(fmt_bytes(m.device[s]))}" for s in MODEL_STATES)
                + f" · model state {html.escape(fmt_bytes(m.model_state))}"
                f" · peak {html.escape(fmt_bytes(m.peak))}"
            )
            lines.append(
                f"communication per step: {html.escape(fmt_bytes(r.ring_bytes))} "
                "ring bytes sent per device; by axis: "
                + ", ".join(
                    f"{a} {html.escape(fmt_bytes(v))}"
                    for a, v in r.schedule.ring_bytes_by_axis().items()
                )
            )
        if view.checked is not None:
            for name in ("gradient_integrity", "state_consistency"):
                c = getattr(view.checked, name)
                lines.append(
                    f"{name.replace('_', ' ')}: <b>{c.verdict}</b>. {html.escape(c.reason)}"
                )
            lines += [f"warning: {html.escape(w)}" for w in view.checked.warnings]
        if view.refused:
            lines.append(f"<span style='color:#D55E00'>{html.escape(view.refused)}</span>")
        return (
            "<div style='max-width: 760px'>"
            + "".join(f"<p>{line}</p>" for line in lines)
            + "</div>"
        )
