"""Long context: ring attention against Ulysses, one widget that reads the core and draws.

``ContextExplorer``: sequence length s, context degree c, heads a and key-value heads K (the
Llama-3-8B shape otherwise: L = 32, h = 4096, ffn 14336) drive, for both ways attention reaches the
other chunks (``schedule.context``), what one device keeps and sends per layer and what a step
exposes: the activations of its s/c tokens, the K/V (ring) or head-split Q/K/V (Ulysses) buffers
in flight, the bytes it sends per layer (forward and backward), and the seconds of communication
the step cannot hide (``pricing.price_configuration`` on H100s, 8 to a node: a context
group of more than 8 ranks crosses InfiniBand). The chosen attention is outlined; a choice the
core refuses (Ulysses with c not dividing K) is named, not drawn.

Presentation only: every byte and second is the core's (``long_context.context_costs``).
"""

from __future__ import annotations

import html

from placement_edu.long_context import ContextCosts, context_costs, long_context_model
from placement_edu.models import TransformerSpec
from placement_edu.placement import State
from placement_edu.presentation.controls import choice_slider, toggles
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import STATE_COLORS, new_figure, png
from placement_edu.strategies import CONTEXT_ATTENTIONS
from placement_edu.units import GB, fmt_bytes

SEQ_CHOICES = (8192, 16384, 32768, 65536, 131072, 262144)
CONTEXT_CHOICES = (2, 4, 8, 16, 32)
HEAD_CHOICES = (8, 16, 32, 64)


class ContextExplorer(Explorer):
    """Controls: s, c, a, K and the attention shown outlined. ``update()`` prices both ways with
    the core, redraws and returns the two ``ContextCosts`` (ring, Ulysses)."""

    def __init__(
        self,
        seq: int = 131072,
        context: int = 8,
        heads: int = 32,
        kv_heads: int = 8,
        attention: str = "ring",
    ) -> None:
        self.seq = choice_slider(SEQ_CHOICES, seq, "s (sequence)")
        self.context = choice_slider(CONTEXT_CHOICES, context, "c (context)")
        self.heads = choice_slider(HEAD_CHOICES, heads, "a (heads)")
        self.kv_heads = choice_slider(HEAD_CHOICES, kv_heads, "K (kv heads)")
        self.attention = toggles(CONTEXT_ATTENTIONS, attention, "attention")
        self.costs: tuple[ContextCosts, ...] = ()
        self.assemble(
            [self.seq, self.context],
            [self.heads, self.kv_heads, self.attention],
            picture="ring attention and Ulysses, per device",
        )

    def model(self) -> TransformerSpec:
        kv_heads = min(self.kv_heads.value, self.heads.value)
        return long_context_model(self.seq.value, self.heads.value, kv_heads)

    def update(self) -> tuple[ContextCosts, ...]:
        model, c = self.model(), self.context.value
        self.costs = tuple(context_costs(model, c, a) for a in CONTEXT_ATTENTIONS)
        figure = new_figure(9.2, 3.0)
        panels = (
            ("activations + buffers per layer (GB)", lambda k: (k.activations + k.buffers) / GB),
            ("sent per layer, fwd + bwd (GB)", lambda k: (k.forward_sent + k.backward_sent) / GB),
            ("exposed communication per step (s)", lambda k: k.exposed_s),
        )
        colour = STATE_COLORS[State.ACTIVATIONS]
        for i, (title, value) in enumerate(panels):
            ax = figure.add_axes((0.1 + i * 0.31, 0.16, 0.24, 0.62))
            for row, k in enumerate(self.costs):
                y, chosen = len(self.costs) - 1 - row, k.attention == self.attention.value
                if k.refused:
                    ax.text(0, y, " refused", va="center", fontsize=7, color="#aa0000")
                    continue
                ax.barh(y, value(k), color=colour, alpha=0.9 if chosen else 0.45, height=0.6)
                ax.barh(
                    y,
                    value(k),
                    fill=False,
                    edgecolor="black" if chosen else "none",
                    linewidth=2,
                    height=0.66,
                )
                ax.text(value(k), y, f" {value(k):.3g}", va="center", fontsize=7)
            top = max([value(k) for k in self.costs if not k.refused] + [1e-9])
            ax.set_xlim(0, top * 1.5)
            ax.set_ylim(-0.6, len(self.costs) - 0.4)
            names = [k.attention for k in reversed(self.costs)]
            ax.set_yticks(range(len(self.costs)), names, fontsize=8)
            if i:
                ax.tick_params(labelleft=False)
            ax.set_title(title, fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
        figure.suptitle(
            f"Llama-3-8B shape, s = {model.seq:,}, a = {model.heads}, K = {model.kv_heads}, "
            f"c = {c} ({'one node, NVLink' if c <= 8 else 'across nodes, InfiniBand'}), "
            f"H100, 8 sequences a step",
            fontsize=9,
        )
        self.image.value = png(figure)
        self.readout.value = self.table()
        return self.costs

    def table(self) -> str:
        """The figures of both ways, one row each (a refusal in words)."""
        head = (
            "<tr><th>attention</th><th>activations / layer</th><th>buffers in flight</th>"
            "<th>sent / layer fwd</th><th>sent / layer bwd</th><th>exposed / step</th>"
            "<th>step</th></tr>"
        )
        rows = []
        for k in self.costs:
            if k.refused:
                refused = html.escape(k.refused)
                rows.append(f"<tr><td>{k.attention}</td><td colspan=6>{refused}</td></tr>")
                continue
            cells = [fmt_bytes(k.activations), fmt_bytes(k.buffers)]
            cells += [fmt_bytes(k.forward_sent), fmt_bytes(k.backward_sent)]
            cells += [f"{k.exposed_s:.3f} s", f"{k.step_s:.3f} s"]
            rows.append(
                f"<tr><td>{k.attention}</td>"
                + "".join(f"<td>{html.escape(x)}</td>" for x in cells)
                + "</tr>"
            )
        return f"<table>{head}{''.join(rows)}</table>"
