"""Activations, the materialized state (M): two widgets that read the core and draw.

``ActivationExplorer``: micro-batch size, sequence length, recomputation (none / selective / full),
tensor-parallel degree and sequence parallelism drive the activation bytes one transformer layer
keeps for backward, term by term (Korthikanti et al. 2022, arXiv 2205.05198, Table 2:
``TransformerSpec.activation_terms_per_layer``). Six bars -- every recomputation choice, without
and with sequence parallelism -- at the chosen b, s and t; the chosen one is outlined.

``LiveSetExplorer``: the *live set* of a schedule -- how many micro-batches' activations a device
holds at once: one without a pipeline, m under GPipe, at most p - stage under 1F1B (SPEC §4;
``derive_memory``'s transient "activations"). One column per pipeline stage, one dotted block per
micro-batch in flight: the activations row of the device grid, for a pipeline.

Presentation only: every byte is the core's (``TransformerSpec``, ``derive_memory``).
"""

from __future__ import annotations

import html
from fractions import Fraction
from typing import Any, TypedDict

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from placement_edu.memory import derive_memory, in_flight
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.models.shapes import SEVEN_B_CLASS
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.presentation.controls import (
    checkbox,
    choice_slider,
    count_slider,
    devices_slider,
    dropdown,
    toggles,
)
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import STATE_COLORS, new_figure, png
from placement_edu.strategies import PipelineSchedule, Strategy, get_strategy
from placement_edu.units import GB, fmt_bytes

#: The four models of Korthikanti et al. 2022, Table 3 (s = 2048, V = 51200), with the tensor and
#: pipeline degrees the paper trains them with.
KORTHIKANTI_TABLE_3 = {
    "22B": dict(layers=48, hidden=6144, heads=64, tensor=8, pipeline=1),
    "GPT-3 175B": dict(layers=96, hidden=12288, heads=96, tensor=8, pipeline=8),
    "530B": dict(layers=105, hidden=20480, heads=128, tensor=8, pipeline=35),
    "1T": dict(layers=128, hidden=25600, heads=160, tensor=8, pipeline=64),
}
SEQ_CHOICES = (512, 1024, 2048, 4096, 8192)
TENSOR_CHOICES = (1, 2, 4, 8, 16)


class TermStyle(TypedDict):
    """How a term is drawn: a shade of the activations colour, a hatch, its legend label."""

    alpha: float
    hatch: str | None
    label: str


#: How each term of a layer's activations is drawn (one colour: activations; shades for the terms).
TERM_STYLE: dict[str, TermStyle] = {
    "outside_tp": dict(
        alpha=0.95,
        hatch=None,
        label="10sbh (÷t with SP): outside tensor parallelism (norm/block inputs, dropout masks)",
    ),
    "inside_tp": dict(alpha=0.55, hatch=None, label="24sbh/t: inside the tensor-parallel blocks"),
    "attention_scores": dict(
        alpha=0.3,
        hatch="//",
        # 2as²b + as²b + 2as²b (Korthikanti et al. 2022, §4.1)
        label="5as²b/t: attention's softmax output + dropout mask + dropout output",
    ),
    "layer_input": dict(
        alpha=0.95,
        hatch="..",
        label="2sbh (÷t with SP): the layer input, all full recomputation keeps",
    ),
}
CONFIGS = tuple((r, sp) for r in TransformerSpec.RECOMPUTE for sp in (False, True))
#: The colour of every term: they are all activations (M).
ACTIVATIONS = STATE_COLORS[State.ACTIVATIONS]


def korthikanti_model(name: str, **changes: Any) -> TransformerSpec:
    """A model of ``KORTHIKANTI_TABLE_3`` as a ``TransformerSpec`` (s = 2048, V = 51200, b = 1).
    ``changes``: any other ``TransformerSpec`` fields (micro_batch, seq, recompute, ...)."""
    shape = {k: v for k, v in KORTHIKANTI_TABLE_3[name].items() if k not in ("tensor", "pipeline")}
    return TransformerSpec(
        **{**shape, "seq": 2048, "vocab": 51200, "micro_batch": 1, "name": name, **changes}
    )


def config_label(recompute: str, sequence_parallel: bool) -> str:
    return f"{recompute}{' + SP' if sequence_parallel else ''}"


class ActivationExplorer(Explorer):
    """Controls: model (Korthikanti Table 3), micro-batch b, sequence s, recomputation, tensor
    degree t, sequence parallelism. ``spec()`` is the chosen ``TransformerSpec``; ``update()`` asks
    it for each configuration's terms, redraws and returns the chosen one's terms (bytes per
    layer)."""

    def __init__(
        self,
        model: str = "GPT-3 175B",
        micro_batch: int = 1,
        seq: int = 2048,
        recompute: str = "none",
        tensor: int = 8,
        sequence_parallel: bool = False,
    ) -> None:
        self.model = dropdown(KORTHIKANTI_TABLE_3, model, "model")
        self.micro_batch = count_slider(micro_batch, 1, 16, "b (micro-batch)")
        self.seq = choice_slider(SEQ_CHOICES, seq, "s (sequence)")
        self.recompute = toggles(TransformerSpec.RECOMPUTE, recompute, "recompute")
        self.tensor = choice_slider(TENSOR_CHOICES, tensor, "t (tensor)")
        self.sequence_parallel = checkbox(sequence_parallel, "sequence parallel")
        self.terms: dict[tuple[str, bool], dict[str, Fraction]] = {}
        self.bars: dict[tuple[str, bool], dict[str, Rectangle]] = {}
        self.assemble(
            [self.model, self.micro_batch, self.seq],
            [self.recompute, self.tensor, self.sequence_parallel],
            picture="activation bytes per layer, by term",
        )

    def spec(
        self, recompute: str | None = None, sequence_parallel: bool | None = None
    ) -> TransformerSpec:
        """The chosen model, with the chosen (or the given) recomputation and sequence
        parallelism."""
        return korthikanti_model(
            self.model.value,
            micro_batch=self.micro_batch.value,
            seq=self.seq.value,
            recompute=self.recompute.value if recompute is None else recompute,
            sequence_parallel=self.sequence_parallel.value
            if sequence_parallel is None
            else sequence_parallel,
        )

    @property
    def chosen(self) -> tuple[str, bool]:
        return self.recompute.value, self.sequence_parallel.value

    def update(self) -> dict[str, Fraction]:
        t = self.tensor.value
        self.terms = {c: self.spec(*c).activation_terms_per_layer(t) for c in CONFIGS}
        self.image.value = png(self._chart(t))
        chosen = self.terms[self.chosen]
        self.readout.value = self._table(chosen, t)
        return chosen

    def _chart(self, t: int) -> Figure:
        """One bar per configuration, a segment per term; the chosen one outlined."""
        figure = new_figure(9.2, 3.6)
        ax = figure.add_axes((0.14, 0.36, 0.84, 0.52))
        self.bars = {}
        for row, config in enumerate(CONFIGS):
            self._bar(ax, len(CONFIGS) - row - 1, config)
        ax.set_yticks(
            range(len(CONFIGS)), [config_label(*c) for c in reversed(CONFIGS)], fontsize=8
        )
        ax.set_xlabel(
            "activation bytes per layer, one micro-batch, one tensor rank (GB = 1e9 bytes)",
            fontsize=8,
        )
        ax.set_xlim(0, max(float(sum(v.values())) for v in self.terms.values()) / GB * 1.45)
        spec = self.spec()
        ax.set_title(
            f"{self.model.value}: h={spec.hidden} a={spec.heads} s={spec.seq} "
            f"b={spec.micro_batch}, "
            f"t={t} (Korthikanti et al. 2022, Table 2)",
            fontsize=9,
        )
        handles = [
            Rectangle(
                (0, 0),
                1,
                1,
                facecolor=ACTIVATIONS,
                alpha=s["alpha"],
                hatch=s["hatch"],
                edgecolor=ACTIVATIONS,
            )
            for s in TERM_STYLE.values()
        ]
        figure.legend(
            handles,
            [s["label"] for s in TERM_STYLE.values()],
            loc="lower left",
            fontsize=7,
            ncol=2,
            frameon=False,
        )
        return figure

    def _bar(self, ax: Axes, y: int, config: tuple[str, bool]) -> None:
        """``config``'s terms side by side at height ``y``, its total beside them."""
        left, self.bars[config] = 0.0, {}
        for term, value in self.terms[config].items():
            width = float(value) / GB
            style = TERM_STYLE[term]
            self.bars[config][term] = ax.barh(
                y,
                width,
                left=left,
                color=ACTIVATIONS,
                alpha=style["alpha"],
                hatch=style["hatch"],
                edgecolor=ACTIVATIONS,
                height=0.7,
            )[0]
            left += width
        outlined = config == self.chosen
        ax.barh(
            y,
            left,
            fill=False,
            edgecolor="black" if outlined else "none",
            linewidth=2,
            height=0.78,
        )
        ax.text(
            left,
            y,
            f" {fmt_bytes(sum(self.terms[config].values()))}",
            va="center",
            fontsize=7,
            fontweight="bold" if outlined else "normal",
        )

    def _table(self, chosen: dict[str, Fraction], t: int) -> str:
        """The chosen configuration's terms, their sum per layer and over the layers."""
        total, layers = sum(chosen.values()), self.spec().layers
        rows = "".join(
            f"<tr><td>{html.escape(TERM_STYLE[k]['label'])}</td><td>{html.escape(fmt_bytes(v))}</td></tr>"
            for k, v in chosen.items()
            if v
        )
        return (
            f"<table><caption>{html.escape(config_label(*self.chosen))}, t = {t}: per layer"
            f"</caption>{rows}"
            f"<tr><td><b>per layer</b></td><td><b>{html.escape(fmt_bytes(total))}</b></td></tr>"
            f"<tr><td>× {layers} layers (all on one device: no pipeline)</td>"
            f"<td>{html.escape(fmt_bytes(total * layers))}</td></tr></table>"
        )


class LiveSetExplorer(Explorer):
    """Controls: schedule (no pipeline, GPipe, 1F1B), pipeline stages p, micro-batches m. One column
    per stage: the micro-batches whose activations that stage holds at its peak (``blocks``:
    ``memory.in_flight``), and the bytes ``derive_memory`` derives (``live_bytes``). The model:
    ``model`` (a ``TransformerSpec``)."""

    SCHEDULES = ("no pipeline", PipelineSchedule.GPIPE, PipelineSchedule.ONE_F_ONE_B)

    def __init__(
        self,
        model: TransformerSpec | None = None,
        schedule: str = PipelineSchedule.ONE_F_ONE_B,
        stages: int = 4,
        micro_batches: int = 8,
        precision: str = "mixed_adam",
    ) -> None:
        self.model = model or SEVEN_B_CLASS
        self.precision = get_precision(precision)
        self.schedule = toggles(self.SCHEDULES, schedule, "schedule")
        self.stages = devices_slider((2, 4, 8), stages, "p (stages)")
        self.micro_batches = count_slider(micro_batches, 1, 16, "m (micro-batches)")
        self.live_bytes: list[Fraction] = []
        self.blocks: list[int] = []
        self.assemble(
            self.schedule,
            [self.stages, self.micro_batches],
            picture="activations held per pipeline stage",
        )

    def strategy_and_mesh(self) -> tuple[Strategy, Mesh]:
        """What the controls mean: dp with m accumulation micro-batches (no pipeline), or pp."""
        m = self.micro_batches.value
        if self.schedule.value == "no pipeline":
            return get_strategy("dp").with_(micro_batches=m), Mesh.of(data=self.stages.value)
        return (
            get_strategy("pp").with_(micro_batches=m, pipeline_schedule=self.schedule.value),
            Mesh.of(pipeline=self.stages.value),
        )

    def update(self) -> list[Fraction]:
        strategy, mesh = self.strategy_and_mesh()
        ranks = range(mesh.world_size)
        self.live_bytes = [
            Fraction(
                derive_memory(strategy, self.model, mesh, self.precision, r).transient_peak(
                    "activations"
                )
            )
            for r in ranks
        ]
        # The micro-batches in flight, whose activations those bytes are (the core's count).
        pipelined = self.schedule.value != "no pipeline"
        stages = mesh.degree("pipeline")
        self.blocks = [int(in_flight(strategy, stages, r)) for r in ranks]
        m, columns = self.micro_batches.value, mesh.world_size
        figure = new_figure(1.4 + 1.3 * columns, 3.6)
        ax = figure.add_axes((0.1, 0.22, 0.88, 0.64))
        colour = STATE_COLORS[State.ACTIVATIONS]
        for c, (n, live) in enumerate(zip(self.blocks, self.live_bytes)):
            ax.add_patch(
                Rectangle((c + 0.1, 0), 0.8, m, fill=False, edgecolor="#444444", linewidth=0.6)
            )
            for k in range(n):
                ax.add_patch(
                    Rectangle(
                        (c + 0.14, k + 0.06),
                        0.72,
                        0.88,
                        facecolor=colour,
                        alpha=0.35,
                        edgecolor=colour,
                        linestyle=":",
                        linewidth=1.5,
                    )
                )
            ax.text(c + 0.5, m + 0.25, fmt_bytes(live), ha="center", fontsize=7)
        ax.set_xlim(0, columns)
        ax.set_ylim(0, m + 0.9)
        ax.set_xticks(
            [c + 0.5 for c in range(columns)],
            [f"stage {c}" if pipelined else f"rank {c}" for c in range(columns)],
            fontsize=8,
        )
        ax.set_ylabel("micro-batches held at peak", fontsize=8)
        what = {
            "no pipeline": f"dp on data={columns}, m = {m} accumulated micro-batches",
            PipelineSchedule.GPIPE: f"GPipe on pipeline={columns}, m = {m}",
            PipelineSchedule.ONE_F_ONE_B: f"1F1B on pipeline={columns}, m = {m}",
        }
        ax.set_title(f"activations (M) live at the peak: {what[self.schedule.value]}", fontsize=9)
        figure.text(
            0.01,
            0.02,
            f"{self.model.description}; each dotted block: one micro-batch's activations "
            "on that device (its layers only). Bytes: the core's derive_memory.",
            fontsize=6.5,
        )
        self.image.value = png(figure)
        self.readout.value = (
            "<p>"
            + html.escape(
                ", ".join(
                    f"{'stage' if pipelined else 'rank'} {r}: "
                    f"{n} micro-batch{'es' * (n != 1)} = {fmt_bytes(b)}"
                    for r, (n, b) in enumerate(zip(self.blocks, self.live_bytes))
                )
            )
            + "</p>"
        )
        return self.live_bytes
