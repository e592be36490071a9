"""The roofline of a Llama block's ops, one widget that reads the core and draws (issue 42, item 4).

``roofline_chart`` draws the roof -- attainable FLOP/s = min(peak, W · intensity) -- and each op of
the block at its forward arithmetic intensity (``roofline.block_ops``): the GEMMs and attention
right of the ridge point, the elementwise ops, norms, casts and the loss at its left. The
roofline counts no FLOPs for the memory ops (intensity 0), so they stand at the chart's left
edge, at their bandwidth. ``RooflineExplorer``: tokens a call (b·s), the GPU and torch.compile's
fusion drive the chart and a readout of each op's intensity, its side of the ridge and its share
of the forward seconds.

Presentation only: every FLOP, byte and second is the core's (``placement_edu.roofline``).
"""

from __future__ import annotations

import html
from dataclasses import replace

from matplotlib.axes import Axes

from placement_edu.models import TransformerSpec
from placement_edu.presentation.controls import checkbox, choice_slider, toggles
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import new_figure, png
from placement_edu.roofline import Kernels, Op, block_ops, memory_bound, ridge_point
from placement_edu.timing import HBM_BANDWIDTH, PEAK_FLOPS

#: Llama-3-8B's shape (meta-llama/Meta-Llama-3-8B's config.json) at s = 2,048, one sequence a call;
#: the explorer sets b for the tokens of a call.
LLAMA_3_8B = TransformerSpec(
    layers=32, hidden=4096, heads=32, seq=2048, vocab=128256, micro_batch=1, ffn=14336,
    kv_heads=8, attention="flash", block="llama",
)  # fmt: skip
TOKEN_CHOICES = (2048, 4096, 8192, 16384, 32768, 65536)
#: Where the chart draws an op the roofline counts no FLOPs for (intensity 0): its left edge.
LEFT_EDGE = 1.0


def llama_at(tokens: int) -> TransformerSpec:
    """Llama-3-8B with ``tokens`` = b · s a call (s = 2,048; ``tokens`` a multiple of it)."""
    return replace(LLAMA_3_8B, micro_batch=tokens // LLAMA_3_8B.seq)


def forward_shares(ops: tuple[Op, ...], tokens: int, peak: float, bandwidth: float) -> list[float]:
    """Each op's share of the forward seconds of one call at the roofline: max(FLOPs / peak,
    bytes / bandwidth), op by op, over their sum."""
    seconds = [op.seconds("forward", tokens, peak, bandwidth) for op in ops]
    total = sum(seconds)
    return [s / total for s in seconds]


def roofline_chart(
    ax: Axes, ops: tuple[Op, ...], peak: float, bandwidth: float, title: str
) -> None:
    """The roof and ``ops`` at their forward intensity on ``ax`` (log-log, TFLOP/s)."""
    ridge = ridge_point(peak, bandwidth)
    xs = [LEFT_EDGE, ridge, 1e4]
    ax.plot(xs, [min(peak, bandwidth * x) / 1e12 for x in xs], color="black", linewidth=1.5)
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    ax.text(ridge, peak / 1e12 * 0.02, f" ridge {ridge:.0f} FLOPs/B", fontsize=7, color="grey")
    memory = [op for op in ops if op.intensity() == 0]
    ax.scatter([LEFT_EDGE] * len(memory), [bandwidth * LEFT_EDGE / 1e12] * len(memory),
               color="#D55E00", marker="s", zorder=3)  # fmt: skip
    ax.text(LEFT_EDGE * 1.2, bandwidth * LEFT_EDGE / 1e12, f"{len(memory)} memory ops (0 FLOPs)",
            fontsize=7, va="center", color="#D55E00")  # fmt: skip
    at: dict[int, list[Op]] = {}  # ops of one intensity share a point and a label
    for op in ops:
        if op.intensity() > 0:
            at.setdefault(round(op.intensity()), []).append(op)
    for i, (_, group) in enumerate(sorted(at.items())):
        x, bound = group[0].intensity(), memory_bound(group[0], peak, bandwidth)
        y = min(peak, bandwidth * x) / 1e12
        ax.scatter([x], [y], zorder=3, color="#D55E00" if bound else "#0072B2")
        # labels alternate above and below the roof, so that neighbours do not overlap
        ax.annotate(", ".join(op.name for op in group), (x, y), fontsize=6, rotation=60,
                    xytext=(2, 5) if i % 2 else (-4, -8), textcoords="offset points",
                    ha="left" if i % 2 else "right", va="bottom" if i % 2 else "top")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(LEFT_EDGE * 0.7, 1e4)
    ax.set_ylim(bandwidth * LEFT_EDGE / 1e12 * 0.5, peak / 1e12 * 3)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of HBM traffic)", fontsize=8)
    ax.set_ylabel("attainable TFLOP/s", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9)


class RooflineExplorer(Explorer):
    """Controls: tokens a call, the GPU, fused or eager. ``update()`` returns the block's ops."""

    def __init__(self, tokens: int = 2048, gpu: str = "H100", fused: bool = False) -> None:
        self.tokens = choice_slider(TOKEN_CHOICES, tokens, "tokens a call (b·s)")
        self.gpu = toggles(sorted(HBM_BANDWIDTH), gpu, "GPU")
        self.fused = checkbox(fused, "fused (torch.compile)")
        self.ops: tuple[Op, ...] = ()
        self.assemble(
            [self.tokens, self.fused],
            [self.gpu],
            picture="the roofline of a Llama-3-8B block's ops",
        )

    def update(self) -> tuple[Op, ...]:
        tokens, gpu = self.tokens.value, self.gpu.value
        peak, bandwidth = PEAK_FLOPS[gpu], HBM_BANDWIDTH[gpu]
        self.ops = block_ops(llama_at(tokens), Kernels(fused=self.fused.value))
        figure = new_figure(8, 4)
        ax = figure.add_axes((0.1, 0.13, 0.86, 0.78))
        roofline_chart(
            ax, self.ops, peak, bandwidth, f"Llama-3-8B block, {gpu} bf16, b·s = {tokens:,}"
        )
        self.image.value = png(figure)
        self.readout.value = self.table(tokens, peak, bandwidth)
        return self.ops

    def table(self, tokens: int, peak: float, bandwidth: float) -> str:
        """Each op: forward intensity, its side of the ridge, its share of the forward seconds."""
        shares = forward_shares(self.ops, tokens, peak, bandwidth)
        rows = "".join(
            f"<tr><td>{html.escape(op.name)}</td><td>{op.intensity():.0f}</td>"
            f"<td>{'memory' if memory_bound(op, peak, bandwidth) else 'compute'}</td>"
            f"<td>{100 * share:.1f}%</td></tr>"
            for op, share in zip(self.ops, shares)
        )
        head = "<tr><th>op</th><th>FLOPs/B</th><th>bound</th><th>forward seconds</th></tr>"
        return f"<table>{head}{rows}</table>"
