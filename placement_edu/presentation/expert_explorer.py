"""Mixture of experts on an expert axis: a widget that reads the core and draws.

``ExpertExplorer``: the number of experts E, the expert degree e (8 devices: data = 8/e, expert =
e, Megatron's EP carved from the data axis), top-k, the capacity factor and the routing skew (the
busiest rank's load, as a multiple of the balanced share) drive, for a Mixtral-shaped model
(``MIXTRAL_8X7B`` with E and k changed):

- the bytes of model state each rank holds: the dense part whole, E/e experts (``derive_memory``);
- each MoE all-to-all: E·C·h elements, C = ⌈k·cf·T/E⌉ (``all_to_all_elements``), (e-1)/e of it
  sent, 4 per MoE layer and micro-batch (``derive_schedule``);
- the tokens each expert rank runs, the busiest one beside the balanced share, and the routed
  tokens its capacity drops (``rank_load``).

Presentation only: every number is the core's.
"""

from __future__ import annotations

import html
from dataclasses import replace
from fractions import Fraction

from matplotlib.patches import Rectangle

from placement_edu.experts import (
    MIXTRAL_8X7B,
    MoESpec,
    RankLoad,
    expert_capacity,
    rank_load,
)
from placement_edu.memory import derive_memory
from placement_edu.mesh import Mesh
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.presentation.controls import choice_slider
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import STATE_COLORS, new_figure, png
from placement_edu.schedule import OpKind, derive_schedule
from placement_edu.strategies import get_strategy
from placement_edu.units import fmt_bytes

DEVICES = 8
EXPERT_CHOICES = (8, 16, 64)
DEGREE_CHOICES = (1, 2, 4, 8)
TOP_K_CHOICES = (1, 2, 4)
CAPACITY_CHOICES = (Fraction(1), Fraction(5, 4), Fraction(3, 2), Fraction(2))
#: The busiest rank's load, as a multiple of the balanced share 1/e (at most e: all the tokens).
SKEW_CHOICES = (Fraction(1), Fraction(5, 4), Fraction(3, 2), Fraction(2), Fraction(4))
PRECISION = "mixed_adam"  # 16 B of model state per parameter; 2-byte activations


class ExpertExplorer(Explorer):
    """Controls: E, e, top-k, capacity factor, routing skew. ``model()`` and ``mesh()`` are what
    they choose; ``update()`` derives, redraws and returns the figures the readout shows."""

    def __init__(
        self,
        experts: int = 8,
        expert_degree: int = 4,
        top_k: int = 2,
        capacity_factor: Fraction | int = 1,
        skew: Fraction | int = 1,
    ) -> None:
        self.experts = choice_slider(EXPERT_CHOICES, experts, "E (experts)")
        self.degree = choice_slider(DEGREE_CHOICES, expert_degree, "e (expert ranks)")
        self.top_k = choice_slider(TOP_K_CHOICES, top_k, "k (top-k)")
        self.capacity = choice_slider(CAPACITY_CHOICES, Fraction(capacity_factor), "cf")
        self.skew = choice_slider(SKEW_CHOICES, Fraction(skew), "busiest rank ÷ balanced")
        self.figures: dict[str, object] = {}
        self.assemble(
            [self.experts, self.degree, self.top_k],
            [self.capacity, self.skew],
            picture="expert ranks: tokens run and model state held",
        )

    def model(self) -> MoESpec:
        """Mixtral 8x7B's shape with the chosen E, k and capacity factor."""
        return replace(
            MIXTRAL_8X7B,
            experts=self.experts.value,
            top_k=self.top_k.value,
            capacity_factor=self.capacity.value,
            name=f"Mixtral-shaped, E = {self.experts.value}, top-{self.top_k.value}",
        )

    def mesh(self) -> Mesh:
        e = self.degree.value
        return Mesh.of(data=DEVICES // e, expert=e)

    def share(self) -> Fraction:
        """The busiest rank's share of the routed tokens: skew/e, at most 1 (all of them)."""
        e = self.degree.value
        return min(Fraction(self.skew.value), Fraction(e)) / e

    def loads(self) -> tuple[RankLoad, RankLoad, RankLoad]:
        """The busiest rank under its capacity, dropless, and a rank at the balanced share."""
        model, e, share = self.model(), self.degree.value, self.share()
        return (
            rank_load(model, e, share),
            rank_load(model, e, share, dropless=True),
            rank_load(model, e, 0, dropless=True),
        )

    def update(self) -> dict[str, object]:
        model, mesh, e = self.model(), self.mesh(), self.degree.value
        precision = get_precision(PRECISION)
        memory = derive_memory(get_strategy("dp"), model, mesh, precision, 0)
        schedule = derive_schedule(get_strategy("dp"), model, mesh, precision)
        a2a = [o for o in schedule.ops if o.op == OpKind.ALL_TO_ALL]
        capped, dropless, even = self.loads()
        # the schedule's own op: its payload and the (e-1)/e of it that leaves the rank
        size, sent = (int(a2a[0].payload_bytes), int(a2a[0].ring_bytes)) if a2a else (0, 0)
        self.figures = {
            "experts per rank": model.experts // e,
            "expert parameters per rank": model.expert_elements // e,
            "model state per rank": memory.model_state,
            "capacity C": expert_capacity(model),
            "all-to-all bytes": size,
            "sent per all-to-all": sent,
            "all-to-alls per step": len(a2a),
            "busiest tokens": dropless.tokens,
            "balanced tokens": even.tokens,
            "kept tokens": capped.tokens,
            "dropped tokens": capped.dropped,
        }
        self._draw(model, e, dropless, even, memory.model_state, precision.model_state)
        self._read(model, e, size, len(a2a), capped, dropless, even, memory.model_state)
        return self.figures

    def _draw(
        self,
        model: MoESpec,
        e: int,
        dropless: RankLoad,
        even: RankLoad,
        state: int | Fraction,
        per_parameter: int,
    ) -> None:
        figure = new_figure(9.6, 3.4)
        ax = figure.add_axes((0.09, 0.2, 0.48, 0.66))
        colour = STATE_COLORS[State.ACTIVATIONS]
        others = (e * even.tokens - dropless.tokens) / (e - 1) if e > 1 else Fraction(0)
        wanted = [dropless.tokens] + [others] * (e - 1)
        limit = float(model.experts * expert_capacity(model))
        for r, tokens in enumerate(wanted):
            kept = min(float(tokens), limit)
            ax.add_patch(Rectangle((r + 0.15, 0), 0.7, kept, color=colour, alpha=0.6))
            if tokens > limit:
                ax.add_patch(
                    Rectangle(
                        (r + 0.15, limit),
                        0.7,
                        float(tokens) - limit,
                        fill=False,
                        hatch="//",
                        edgecolor="#D55E00",
                    )
                )
        ax.axhline(float(even.tokens), color="black", linewidth=0.8, linestyle=":")
        ax.axhline(limit, color="#D55E00", linewidth=1.0)
        top = max(float(max(wanted)), limit) * 1.25
        ax.text(e - 0.02, limit, "capacity E·C", ha="right", va="bottom", fontsize=7)
        ax.text(0.02, float(even.tokens), "balanced", ha="left", va="top", fontsize=7)
        ax.set_xlim(0, e)
        ax.set_ylim(0, top)
        ax.set_xticks([r + 0.5 for r in range(e)], [f"rank {r}" for r in range(e)], fontsize=7)
        ax.set_ylabel("routed tokens run, per MoE layer", fontsize=8)
        ax.set_title(
            f"{model.description.split(',', 1)[0]}: T = {model.tokens} tokens a rank, "
            "hatched: dropped",
            fontsize=8,
        )
        bx = figure.add_axes((0.68, 0.2, 0.28, 0.66))
        experts = per_parameter * model.expert_elements / e / 1e9
        dense = float(state) / 1e9 - experts
        bx.bar(0, dense, color=STATE_COLORS[State.PARAMS], alpha=0.5, label="dense, whole")
        bx.bar(
            0,
            experts,
            bottom=dense,
            color=STATE_COLORS[State.PARAMS],
            label=f"{model.experts // e} of {model.experts} experts",
        )
        bx.set_xticks([0], [f"data={DEVICES // e}, expert={e}"], fontsize=7)
        bx.set_ylabel("model state per rank, GB (1e9 B)", fontsize=8)
        bx.set_title(fmt_bytes(state), fontsize=8)
        bx.legend(fontsize=7, frameon=False, loc="lower center", bbox_to_anchor=(0.5, -0.32))
        self.image.value = png(figure)

    def _read(
        self,
        model: MoESpec,
        e: int,
        size: int,
        count: int,
        capped: RankLoad,
        dropless: RankLoad,
        even: RankLoad,
        state: int | Fraction,
    ) -> None:
        rows = [
            (
                "experts held by each rank (E/e)",
                f"{model.experts // e} = {model.expert_elements // e:,} expert parameters",
            ),
            ("model state per rank (16 B a parameter)", fmt_bytes(state)),
            ("capacity C = ⌈k·cf·T/E⌉ per expert", f"{expert_capacity(model):,} tokens"),
            (
                "each all-to-all: E·C·h × 2 B, (e-1)/e of it sent",
                f"{size:,} B, {self.figures['sent per all-to-all']:,} B sent",
            ),
            ("all-to-alls per step (4 per MoE layer per micro-batch)", f"{count}"),
            (
                "busiest rank vs balanced, dropless",
                f"{dropless.tokens} vs {even.tokens} tokens "
                f"({float(dropless.tokens / even.tokens):.3g}x)",
            ),
            (f"under cf = {model.capacity_factor}", f"{capped.dropped} routed tokens dropped"),
        ]
        body = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows
        )
        self.readout.value = (
            f"<table><caption>{html.escape(model.description)} on data={DEVICES // e}, "
            f"expert={e}: per rank</caption>{body}</table>"
        )
