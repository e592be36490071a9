"""Will one rank's step fit? Three answers side by side, and a widget for b, s, recomputation and N.

Issue 22 in the course (notebooks 05 and 09). For a real model -- HF GPT-2 124M or the Llama-3.2-1B
shape (``placement_edu.architectures``) -- three figures of one rank's memory:

1. **Korthikanti's formula**, what the course taught first: the model read as a GPT-style
   ``TransformerSpec`` (same L, h, a, V, f, b, s), sbh(34 + 5as/h) 16-bit bytes per layer, nothing
   outside the blocks, and ``derive_memory``'s peak (fsdp on N devices, dp on one);
2. **the activation profile measured from the module** (``placement_edu.runtime.profiles``: shipped
   for the checked shapes, else measured once under ``FakeTensorMode`` and cached) and the step it
   derives (``placement_edu.peak.derive``, the derivation ``placement-edu fit`` prints);
3. **PyTorch's own tracker** (``FSDPMemTracker`` on a fake process group of N ranks, ``MemTracker``
   at N = 1; ``placement_edu.runtime.peak_tracker``), run in a child process whose wall time and peak
   resident memory are measured too.

``fit_comparison`` gathers them (``FitComparison``; ``str()`` prints the table, ``reasons()`` why
they differ); ``FitExplorer`` is the widget. Presentation only: every byte comes from the core's derivations or from a measurement. Bytes are
exact integers; GB = 10^9 bytes and GiB = 2^30 bytes, both labelled (``fmt_bytes``).
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.errors import PlacementError
from placement_edu.memory import Memory
from placement_edu.models import TransformerSpec
from placement_edu.peak import (
    ACTIVATIONS_AND_TEMPORARIES,
    ALL_GATHER_BUFFER,
    BLOCK_GATHERED,
    GRADIENTS_BEING_MADE,
    GRADS,
    OPTIMIZER,
    OPTIMIZER_TEMPORARIES,
    PARAMS,
    PRECISIONS,
    REDUCE_SCATTER_BUFFER,
    ROOT_GATHERED,
    ROOT_GRADIENTS,
    SHARDED_GRADS,
    SHARDED_PARAMS,
    ActivationProfile,
    StepPeak,
    derive,
    units,
)
from placement_edu.placement import State
from placement_edu.presentation.live import png_html, show
from placement_edu.presentation.style import OP_COLORS, STATE_COLORS, new_figure, png
from placement_edu.report import analyze
from placement_edu.units import GB, MiB, fmt_bytes

if TYPE_CHECKING:
    from placement_edu.runtime.container import MemoryLimit

#: The widget's models: their profiles ship with the package (b = 1 at the default s) or are
#: measured in a few seconds (Llama-3-8B is left out: its tracker run is not for a 2 GiB notebook).
MODELS = ("gpt2", "llama-1b")
#: The sequence lengths offered per model (the largest is the shipped, checked one).
SEQ_CHOICES: Mapping[str, tuple[int, ...]] = {
    "gpt2": (256, 512, 1024),
    "llama-1b": (512, 1024, 2048),
}
MICRO_BATCH_CHOICES = (1, 2, 4, 8)
DEVICE_CHOICES = (1, 2, 8, 64, 1024)
RECOMPUTE_CHOICES = ("none", "full")
#: What the formula path calls each FSDP2 precision: plain fp32 Adam, or ZeRO's 2/2/12 split.
FORMULA_PRECISION = {"fp32": "fp32_adam", "fsdp2_bf16": "mixed_adam"}

#: Profiles read in this process, and whether each came from a cache (shipped or on disk).
_PROFILES: dict[tuple[str, int, int, str, str], tuple[ActivationProfile, bool]] = {}


def default_seq(model: str) -> int:
    """The sequence length the model is checked at (and its profile shipped): the largest offered."""
    return max(SEQ_CHOICES[model])


def formula_spec(
    model: str | Architecture, micro_batch: int = 1, seq: int | None = None, recompute: str = "none"
) -> TransformerSpec:
    """The model as Korthikanti's formula sees it: a GPT-style ``TransformerSpec`` with the same
    layers, width, heads, FFN width, vocabulary, b and s. (It counts Ψ the GPT way: no SwiGLU third
    matrix, no GQA, a learned position table of s rows.)"""
    arch = get_architecture(model)
    return TransformerSpec(
        layers=arch.layers,
        hidden=arch.hidden,
        heads=arch.heads,
        seq=seq or default_seq(arch.name),
        vocab=arch.vocab,
        micro_batch=micro_batch,
        ffn=arch.ffn,
        recompute=recompute,
        name=arch.name,
    )


def formula_memory(
    model: str, micro_batch: int, seq: int, recompute: str, devices: int, precision: str = "fp32"
) -> Memory:
    """The formula path's rank 0: ``derive_memory`` of fsdp on ``devices`` (dp on one device)."""
    spec = formula_spec(model, micro_batch, seq, recompute)
    strategy = "fsdp" if devices > 1 else "dp"
    return analyze(strategy, spec, devices, FORMULA_PRECISION[precision]).memory


def profile_for(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> ActivationProfile:
    """The activation profile (eager attention), kept in this process once read: shipped with the
    package or cached on disk (no torch imported), else measured under ``FakeTensorMode`` (imports
    torch: 3-6 s on a laptop CPU, no tensor memory) and cached."""
    key = (model, micro_batch, seq, compute, recompute)
    if key not in _PROFILES:
        from placement_edu.runtime.profiles import get_profile

        _PROFILES[key] = get_profile(model, micro_batch, seq, compute, "eager", recompute)
    return _PROFILES[key][0]


def is_known(
    model: str, micro_batch: int, seq: int, compute: str = "fp32", recompute: str = "none"
) -> bool:
    """Whether ``profile_for`` answers at once: read in this process already, or shipped."""
    from placement_edu.runtime.profiles import SHIPPED_CASES

    key = (model, micro_batch, seq, compute, recompute)
    shipped = (model, seq, compute) in SHIPPED_CASES and (micro_batch, recompute) == (1, "none")
    return key in _PROFILES or shipped


def fit_peak(
    model: str,
    micro_batch: int = 1,
    seq: int | None = None,
    recompute: str = "none",
    devices: int = 8,
    rank: int = 0,
    precision: str = "fp32",
    optimizer: str = "adam-foreach",
) -> StepPeak:
    """Rank ``rank``'s step under FSDP2 on ``devices`` (one device: plain training), as
    ``placement-edu fit`` derives it (``placement_edu.peak.derive``)."""
    seq = seq or default_seq(model)
    compute = PRECISIONS[precision].compute_name
    profile = profile_for(model, micro_batch, seq, compute, recompute)
    return derive(model, profile, devices, rank, precision, optimizer)


def breakdown(peak: StepPeak) -> dict[str, Any]:
    """The per-rank breakdown under ``placement-edu fit --json``'s keys (bytes): ``memory``
    {``params``, ``grads``, ``optimizer``, ``activations``, ``transients``}, ``peak_bytes``,
    ``peak_at``, ``forward_backward_peak_bytes``, ``step_peak_bytes``."""
    return {
        "memory": {
            "params": peak.params,
            "grads": peak.grads,
            "optimizer": peak.optimizer,
            "activations": peak.activations,
            "transients": peak.transients(),
        },
        "peak_bytes": peak.peak.total,
        "peak_at": peak.peak.name,
        "forward_backward_peak_bytes": peak.forward_backward_peak.total,
        "step_peak_bytes": peak.step_peak.total,
    }


# --- PyTorch's tracker, in a child process -------------------------------------------------------
@dataclass(frozen=True)
class TrackerRun:
    """One tracked steady-state step (``placement_edu.runtime.peak_tracker``): ``states`` by the
    names ``peak.py`` uses (bytes: params, grads, optimizer, activations, forward_backward_peak,
    step_peak), the tracker's own ``seconds``, the child process's ``wall_seconds`` (start-up and
    torch's import included) and its ``peak_rss`` (bytes of resident memory; 0 where unknown)."""

    states: Mapping[str, int]
    seconds: float
    wall_seconds: float
    peak_rss: int

    @property
    def peak_bytes(self) -> int:
        return max(self.states["forward_backward_peak"], self.states["step_peak"])

    def __str__(self) -> str:
        return (
            f"tracker run: {self.seconds:.1f} s tracked, {self.wall_seconds:.1f} s with the child "
            f"process's start-up; its peak: {self.peak_rss / MiB:,.0f} MiB resident"
        )

    @property
    def peak_at(self) -> str:
        """The tracker names a phase, not an event."""
        fb, step = self.states["forward_backward_peak"], self.states["step_peak"]
        return "forward/backward" if fb >= step else "optimizer step"


#: Peak resident memory of a tracker run's child process, in MiB: torch imported, the model under
#: FakeTensorMode (no tensor memory). Measured by ``track`` (wait4's ru_maxrss, torch 2.13 CPU):
#: 315-317 MiB for GPT-2 at N = 8 and N = 1 (full recomputation) and Llama-3.2-1B at N = 8. Rounded up.
TRACKER_MIB = 330


def check_tracker_fits(limit: MemoryLimit | None = None) -> None:
    """Refuse a tracker run this container has no room for, in one line that says why (a
    ``PlacementError``, before the child starts); nothing happens where no limit is set."""
    from placement_edu.runtime.container import memory_limit

    limit = memory_limit() if limit is None else limit
    if limit is not None and limit.free < TRACKER_MIB * MiB:
        raise PlacementError(
            f"not enough memory for PyTorch's tracker run: its process needs about {TRACKER_MIB} MiB "
            f"(torch imported; the model under FakeTensorMode holds no tensor memory), and {limit}; "
            "shut down other notebooks' kernels"
        )


_TRACK = (
    "import json, sys\n"
    "from placement_edu.runtime.peak_tracker import measure, states\n"
    "case = json.loads(sys.argv[1])\n"
    "raw = measure(**case)\n"
    "fsdp = case['devices'] > 1 or case['precision'] != 'fp32'\n"
    "print(json.dumps({'states': states(raw, fsdp), 'seconds': raw['seconds']}))\n"
)


def track(
    model: str,
    devices: int,
    rank: int = 0,
    precision: str = "fp32",
    micro_batch: int = 1,
    seq: int | None = None,
    recompute: str = "none",
    timeout_s: float = 300,
) -> TrackerRun:
    """PyTorch's tracker for one rank, in a fresh interpreter (a fake process group is one per
    process; torch stays out of this one). Its wall time and peak resident memory are measured."""
    case = dict(
        model=model,
        devices=devices,
        rank=rank,
        precision=precision,
        micro_batch=micro_batch,
        seq=seq or default_seq(model),
        recompute=recompute,
    )
    check_tracker_fits()
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [sys.executable, "-c", _TRACK, json.dumps(case)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        timer = threading.Timer(timeout_s, child.kill)
        timer.start()
        try:
            out, rss = _reap(child)
        finally:
            timer.cancel()
        wall = time.perf_counter() - started
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"the tracker run {case} failed ({child.returncode}): {tail}")
    result = json.loads(lines[-1])
    return TrackerRun(result["states"], result["seconds"], round(wall, 3), rss)


def _reap(child: subprocess.Popen) -> tuple[str, int]:
    """(its stdout, its peak resident bytes): read to the end, then reaped with ``wait4``, which
    reports the child's own peak RSS (0 where the platform has no ``wait4``)."""
    assert child.stdout is not None
    out = child.stdout.read()
    if not hasattr(os, "wait4"):
        child.wait()
        return out, 0
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return out, usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # macOS: bytes; KiB


# --- the three, side by side --------------------------------------------------------------------
@dataclass(frozen=True)
class FitComparison:
    """One rank's memory three ways: ``formula`` (``derive_memory`` on ``spec``, Korthikanti's
    activations), ``profile`` and ``peak`` (measured profile, derived step), ``tracker`` (PyTorch's
    accounting, or None when not run)."""

    model: str
    micro_batch: int
    seq: int
    recompute: str
    devices: int
    rank: int
    precision: str
    spec: TransformerSpec
    formula: Memory
    profile: ActivationProfile
    peak: StepPeak
    tracker: TrackerRun | None = None

    @property
    def formula_per_layer(self) -> int:
        """Korthikanti's bytes per layer (16-bit, as published and as the course's path counts them)."""
        return int(self.spec.activation_bytes_per_layer(1))

    @property
    def formula_activations(self) -> int:
        return int(self.formula.transient_peak("activations"))

    @property
    def logits_gradient(self) -> int:
        """What the start of backward adds to the live set at the loss (measured: the profile's
        moments): the logits' fp32 gradient."""
        at = {m.name: m.live for m in self.profile.moments}
        return at["backward, loss (logits' gradient)"] - at["forward, loss"]

    @property
    def compute_bytes(self) -> int:
        """Bytes per activation element in the compute dtype (fp32 4, bf16 2)."""
        return PRECISIONS[self.precision].compute

    @property
    def formula_peak_terms(self) -> str:
        """What the formula path adds at its peak phase: P + G + O and that phase's named terms."""
        f = self.formula
        terms = [k for k, v in f.transient.get(f.peak_phase, {}).items() if v]
        return f"{f.peak_phase}: " + " + ".join(["P + G + O", *terms])

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(what, formula, profile + derivation, tracker) as printed strings."""
        f, p, t = self.formula, self.peak, self.tracker
        ts = dict(t.states) if t else {}
        untracked = "-" if t is None else "(not tracked)"
        figures: list[tuple[str, Any, Any, Any]] = [
            ("params", f.device[State.PARAMS], p.params, ts.get("params")),
            ("grads (after the step)", f.device[State.GRADS], p.grads, ts.get("grads")),
            (
                "optimizer (Adam m, v, step)",
                f.device[State.OPTIMIZER],
                p.optimizer,
                ts.get("optimizer"),
            ),
            ("activations, one block", self.formula_per_layer, self.profile.block, untracked),
        ]
        if self.compute_bytes != 2:
            twice = self.formula_per_layer * self.compute_bytes // 2
            figures.append((f"  the formula at {self.compute_bytes} B", twice, "", ""))
        figures += [
            ("kept outside the blocks", "(not in the formula)", self.profile.outside, untracked),
            (
                "activations after forward",
                self.formula_activations,
                p.activations,
                ts.get("activations"),
            ),
            (
                "forward/backward peak",
                f.model_state + f.phase_total("backward"),
                p.forward_backward_peak.total,
                ts.get("forward_backward_peak"),
            ),
            (
                "optimizer-step peak",
                f.model_state + f.phase_total("step"),
                p.step_peak.total,
                ts.get("step_peak"),
            ),
            ("peak", f.peak, p.peak.total, t.peak_bytes if t else None),
        ]

        def cell(value: Any) -> str:
            if value is None:
                return "-"
            return value if isinstance(value, str) else fmt_bytes(value)

        return [(name, *(cell(v) for v in values)) for name, *values in figures]  # type: ignore[misc]

    def agrees(self) -> bool:
        """Whether every figure the tracker gives -- params, grads, optimizer, activations after
        forward, both peaks -- equals the derived one to the byte (False without a tracker run)."""
        if self.tracker is None:
            return False
        p = self.peak
        derived = {
            "params": p.params,
            "grads": p.grads,
            "optimizer": p.optimizer,
            "activations": p.activations,
            "forward_backward_peak": p.forward_backward_peak.total,
            "step_peak": p.step_peak.total,
        }
        return all(self.tracker.states[k] == v for k, v in derived.items())

    def block_modules(self) -> list[tuple[str, int, float]]:
        """What one block keeps, by the module that saved it (measured): (module, bytes, bytes in
        units of one [b, s, h] tensor of the compute dtype), largest first."""
        unit = self.micro_batch * self.seq * self.spec.hidden * self.compute_bytes
        kept = [(k, v) for k, v in self.profile.by_module.items() if k.startswith("block")]
        return [(k, v, v / unit) for k, v in sorted(kept, key=lambda kv: -kv[1])]

    def outside_modules(self) -> list[tuple[str, int]]:
        """What is kept outside the blocks, by module (measured), largest first."""
        kept = [(k, v) for k, v in self.profile.by_module.items() if not k.startswith("block")]
        return sorted(kept, key=lambda kv: -kv[1])

    def reasons(self) -> list[str]:
        """Why the columns differ, one line each, every figure from the comparison's own values."""
        arch = get_architecture(self.model)
        p = self.peak
        c = self.compute_bytes
        formula_c = self.formula_per_layer * c // 2
        stored = sum(u.stored for u in units(arch, self.devices, self.rank))
        last = self.devices - 1
        last_held = sum(u.held for u in units(arch, self.devices, last))
        storage = PRECISIONS[self.precision].storage
        temporaries = p.step_peak.terms.get(OPTIMIZER_TEMPORARIES, 0)
        return [
            f"dtype: the formula counts 16-bit bytes ({fmt_bytes(self.formula_per_layer)} a layer); "
            f"at {c} B an element it is {fmt_bytes(formula_c)}, and the module's block keeps "
            f"{fmt_bytes(self.profile.block)} ({self.profile.block / formula_c:.2f}x that)",
            f"outside the blocks (the formula: 0): {fmt_bytes(self.profile.outside)} kept after "
            f"forward, the loss's fp32 log-softmax {fmt_bytes(self.profile.by_module.get('loss', 0))} "
            "the largest",
            f"the start of backward adds the logits' fp32 gradient: {fmt_bytes(self.logits_gradient)}",
            f"phase: the derived peak is at '{p.peak.name}'; the formula's at "
            f"'{self.formula_peak_terms}', a moment that never happens",
            f"optimizer step: foreach Adam's temporary, {fmt_bytes(temporaries)} "
            f"(the step's peak: {fmt_bytes(p.step_peak.total)})",
            f"FSDP2's padding: every rank stores ceil(rows/N)-row chunks, {stored:,} elements of "
            f"parameters here (Ψ/N = {arch.psi / self.devices:,.0f}); rank {last} holds "
            f"{last_held:,} real ones in the same storage: {fmt_bytes((stored - last_held) * storage)} "
            "of padding there, in params and again in grads",
            f"parameter count: the formula's GPT-style Ψ = {self.spec.psi:,}, "
            f"the module's {arch.psi:,}",
        ]

    def __str__(self) -> str:
        where = (
            f"FSDP2 on {self.devices} devices, rank {self.rank}"
            if self.devices > 1 or self.precision != "fp32"
            else "one device"
        )
        tracker = "FSDPMemTracker" if self.devices > 1 or self.precision != "fp32" else "MemTracker"
        head = (
            f"{self.model}, s = {self.seq}, b = {self.micro_batch}, {self.precision}, recompute "
            f"{self.recompute}; {where}"
        )
        rows = [("", "Korthikanti's formula", "measured profile, derived", f"PyTorch's {tracker}")]
        rows += self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.append(f"the peak is at: formula  {self.formula_peak_terms}")
        lines.append(f"                derived  {self.peak.peak.name}")
        if self.tracker:
            lines.append(
                f"                tracker  {self.tracker.peak_at} (the tracker names a phase)"
            )
        return "\n".join(lines)


def fit_comparison(
    model: str,
    seq: int | None = None,
    micro_batch: int = 1,
    recompute: str = "none",
    devices: int = 8,
    rank: int = 0,
    precision: str = "fp32",
    tracker: bool = False,
) -> FitComparison:
    """The formula, the measured profile with its derived step, and (``tracker=True``) PyTorch's
    tracker, for rank ``rank`` of ``devices`` (foreach Adam, eager attention)."""
    seq = seq or default_seq(model)
    compute = PRECISIONS[precision].compute_name
    return FitComparison(
        model,
        micro_batch,
        seq,
        recompute,
        devices,
        rank,
        precision,
        formula_spec(model, micro_batch, seq, recompute),
        formula_memory(model, micro_batch, seq, recompute, devices, precision),
        profile_for(model, micro_batch, seq, compute, recompute),
        fit_peak(model, micro_batch, seq, recompute, devices, rank, precision),
        track(model, devices, rank, precision, micro_batch, seq, recompute) if tracker else None,
    )


# --- the widget ---------------------------------------------------------------------------------
_GATHERED = dict(color=STATE_COLORS[State.PARAMS], alpha=0.45)
#: How each term of an event is drawn: the state's colour, a collective's, or grey.
TERM_STYLE: Mapping[str, dict[str, Any]] = {
    PARAMS: dict(color=STATE_COLORS[State.PARAMS]),
    SHARDED_PARAMS: dict(color=STATE_COLORS[State.PARAMS]),
    ROOT_GATHERED: _GATHERED,
    BLOCK_GATHERED: _GATHERED,
    GRADS: dict(color=STATE_COLORS[State.GRADS]),
    SHARDED_GRADS: dict(color=STATE_COLORS[State.GRADS]),
    ROOT_GRADIENTS: dict(color=STATE_COLORS[State.GRADS], alpha=0.6),
    GRADIENTS_BEING_MADE: dict(color=STATE_COLORS[State.GRADS], alpha=0.6),
    OPTIMIZER: dict(color=STATE_COLORS[State.OPTIMIZER]),
    OPTIMIZER_TEMPORARIES: dict(color=STATE_COLORS[State.OPTIMIZER], alpha=0.45, hatch="//"),
    ACTIVATIONS_AND_TEMPORARIES: dict(color=STATE_COLORS[State.ACTIVATIONS]),
    ALL_GATHER_BUFFER: dict(color=OP_COLORS["all_gather"]),
    REDUCE_SCATTER_BUFFER: dict(color=OP_COLORS["reduce_scatter"]),
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


class FitExplorer:
    """Controls: model (gpt2, llama-1b), micro-batch b, sequence s, recomputation (none, full),
    devices N, precision. Shows rank 0's breakdown -- params, grads, optimizer, activations, each
    transient at the peak -- the peak and the event where it happens, and the live set at every
    event of the step. Every byte is ``fit_peak``'s (``placement_edu.peak.derive``, what
    ``placement-edu fit --json`` prints). A profile not yet read is measured once under
    ``FakeTensorMode`` (a few seconds; the status line says so) and kept."""

    def __init__(
        self,
        model: str = "gpt2",
        micro_batch: int = 1,
        seq: int | None = None,
        recompute: str = "none",
        devices: int = 8,
        precision: str = "fp32",
    ) -> None:
        import ipywidgets as w

        wide = {"description_width": "initial"}
        self.model = w.ToggleButtons(options=list(MODELS), value=model, description="model")
        self.micro_batch = w.SelectionSlider(
            options=MICRO_BATCH_CHOICES,
            value=micro_batch,
            description="b (micro-batch)",
            continuous_update=False,
            style=wide,
        )
        self.seq = w.SelectionSlider(
            options=SEQ_CHOICES[model],
            value=seq or default_seq(model),
            description="s (sequence)",
            continuous_update=False,
            style=wide,
        )
        self.recompute = w.ToggleButtons(
            options=list(RECOMPUTE_CHOICES), value=recompute, description="recompute"
        )
        self.devices = w.SelectionSlider(
            options=DEVICE_CHOICES,
            value=devices,
            description="N (devices)",
            continuous_update=False,
            style=wide,
        )
        self.precision = w.ToggleButtons(
            options=list(PRECISIONS), value=precision, description="precision"
        )
        self.status = w.HTML()
        self.image = w.Image(format="png")
        self.readout = w.HTML()
        self.controls = (
            self.model,
            self.micro_batch,
            self.seq,
            self.recompute,
            self.devices,
            self.precision,
        )
        self.model.observe(lambda _change: self._model_changed(), names="value")
        self._quiet = False
        for control in self.controls[1:]:
            control.observe(lambda _change: self._changed(), names="value")
        self.widget = w.VBox(
            [
                w.HBox([self.model, self.recompute]),
                w.HBox([self.devices, self.micro_batch, self.seq]),  # N first: cheap to move
                self.precision,
                self.status,
                self.image,
                self.readout,
            ]
        )
        self.peak: StepPeak | None = None
        self.update()

    def _ipython_display_(self) -> None:
        show(
            self.widget,
            png_html(self.image.value, "live bytes at every event of the step")
            + self.readout.value,
        )

    def _model_changed(self) -> None:
        """A new model starts at its checked sequence length (a shipped profile at b = 1)."""
        self._quiet = True  # one update, after both changes: not one per intermediate value
        try:
            self.seq.options = SEQ_CHOICES[self.model.value]
            self.seq.value = default_seq(self.model.value)
        finally:
            self._quiet = False
        self.update()

    def _changed(self) -> None:
        if not self._quiet:
            self.update()

    def case(self) -> dict[str, Any]:
        """What the controls mean, as ``fit_peak``'s arguments."""
        return dict(
            model=self.model.value,
            micro_batch=self.micro_batch.value,
            seq=self.seq.value,
            recompute=self.recompute.value,
            devices=self.devices.value,
            precision=self.precision.value,
        )

    def update(self) -> dict[str, Any]:
        """Read (or measure) the profile, derive the step, redraw; returns ``breakdown``'s dict."""
        case = self.case()
        compute = PRECISIONS[case["precision"]].compute_name
        known = is_known(
            case["model"], case["micro_batch"], case["seq"], compute, case["recompute"]
        )
        if not known:
            self.status.value = (
                f"⏳ <b>measuring</b> the activation profile of {case['model']} at b = "
                f"{case['micro_batch']}, s = {case['seq']}, recompute {case['recompute']} "
                "under FakeTensorMode (no tensor memory; a few seconds, once)…"
            )
        self._busy(True)
        started = time.perf_counter()
        try:
            peak = fit_peak(**case)
        except Exception as error:  # shown in the widget, not raised
            self.status.value = f"<b>error</b>: {html.escape(str(error))}"
            return {}
        finally:
            self._busy(False)
        self.peak = peak
        key = (case["model"], case["micro_batch"], case["seq"], compute, case["recompute"])
        self.status.value = (
            "profile: shipped with the package, or read before"
            if known
            else "profile read from the disk cache"
            if _PROFILES[key][1]
            else f"profile measured in {time.perf_counter() - started:.1f} s (kept on disk and here)"
        )
        out = breakdown(peak)
        where = (
            f"FSDP2 on N = {case['devices']}, rank 0"
            if case["devices"] > 1 or case["precision"] != "fp32"
            else "one device"
        )
        title = (
            f"{case['model']}, b = {case['micro_batch']}, s = {case['seq']}, recompute "
            f"{case['recompute']}, {case['precision']}, {where}: the live set at each event"
        )
        self.image.value = event_chart(peak, title)
        self.readout.value = readout_html(out)
        return out

    def _busy(self, busy: bool) -> None:
        for control in self.controls:
            control.disabled = busy


def readout_html(report: Mapping[str, Any]) -> str:
    """``breakdown``'s dict as an HTML table: bytes, GB (1e9) and GiB (2^30), labelled."""
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
