"""Will one rank's step fit? Three answers side by side (issue 22, notebooks 05 and 09).

For a real model -- HF GPT-2 124M or the Llama-3.2-1B shape (``placement_edu.architectures``) --
``fit_comparison`` gathers Korthikanti's formula and the measured profile with its derived step
(``fit_answers``) and, when asked, PyTorch's tracker (``fit_tracker``) into a ``FitComparison``:
``str()`` prints the table, ``reasons()`` says why the columns differ. Presentation only: every byte
comes from the core's derivations or from a measurement. Bytes are exact integers; GB = 10^9 bytes
and GiB = 2^30 bytes, both labelled (``fmt_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from placement_edu.architectures import get_architecture
from placement_edu.memory import Memory
from placement_edu.models import TransformerSpec
from placement_edu.peak import (
    OPTIMIZER_TEMPORARIES,
    PRECISIONS,
    ActivationProfile,
    StepPeak,
    fsdp2_applies,
    units,
)
from placement_edu.placement import State
from placement_edu.presentation.fit_answers import (
    default_seq,
    fit_peak,
    formula_memory,
    formula_spec,
    profile_for,
)
from placement_edu.presentation.fit_tracker import TrackerRun, track
from placement_edu.units import WIDTH, fmt_bytes, wrapped
from placement_edu.shown import Shown


@dataclass(frozen=True)
class FitComparison(Shown):
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
        """Korthikanti's bytes per layer (16-bit, as published and as the course's path counts
        them)."""
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
            # the formula holds the logits and the loss as transients (``peak.logits_and_loss``)
            ("kept outside the blocks", "(in logits_and_loss)", self.profile.outside, untracked),
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
        padding = (stored - last_held) * PRECISIONS[self.precision].storage
        temporaries = p.step_peak.terms.get(OPTIMIZER_TEMPORARIES, 0)
        loss = self.profile.by_module.get("loss", 0)
        return [
            "dtype: the formula counts 16-bit bytes "
            f"({fmt_bytes(self.formula_per_layer)} a layer); at {c} B an element it is "
            f"{fmt_bytes(formula_c)}, and the module's block keeps "
            f"{fmt_bytes(self.profile.block)} ({self.profile.block / formula_c:.2f}x that)",
            f"outside the blocks (the formula: 0): {fmt_bytes(self.profile.outside)} kept after "
            f"forward, the loss's fp32 log-softmax {fmt_bytes(loss)} the largest",
            "the start of backward adds the logits' fp32 gradient: "
            f"{fmt_bytes(self.logits_gradient)}",
            f"phase: the derived peak is at '{p.peak.name}'; the formula's at "
            f"'{self.formula_peak_terms}', a moment that never happens",
            f"optimizer step: foreach Adam's temporary, {fmt_bytes(temporaries)} "
            f"(the step's peak: {fmt_bytes(p.step_peak.total)})",
            f"FSDP2's padding: every rank stores ceil(rows/N)-row chunks, {stored:,} elements of "
            f"parameters here (Ψ/N = {arch.psi / self.devices:,.0f}); rank {last} holds "
            f"{last_held:,} real ones in the same storage: {fmt_bytes(padding)} of padding there, "
            "in params and again in grads",
            f"parameter count: the formula's GPT-style Ψ = {self.spec.psi:,}, "
            f"the module's {arch.psi:,}",
        ]

    def __str__(self) -> str:
        fsdp = fsdp2_applies(self.devices, self.precision)
        where = f"FSDP2 on {self.devices} devices, rank {self.rank}" if fsdp else "one device"
        tracker = "FSDPMemTracker" if fsdp else "MemTracker"
        head = (
            f"{self.model}, s = {self.seq}, b = {self.micro_batch}, {self.precision}, recompute "
            f"{self.recompute}; {where}"
        )
        rows = [("", "Korthikanti's formula", "measured profile, derived", f"PyTorch's {tracker}")]
        rows += self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        table = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        if max(map(len, table)) > WIDTH:  # too wide: each figure's name on a line of its own
            table = [
                line
                for name, *cells in rows
                for line in ([name] if name else [])
                + ["  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths[1:])).rstrip()]
            ]
        peak_at = [
            f"the peak is at: formula  {self.formula_peak_terms}",
            f"                derived  {self.peak.peak.name}",
        ]
        if self.tracker:
            peak_at.append(
                f"                tracker  {self.tracker.peak_at} (the tracker names a phase)"
            )
        at = len("the peak is at: formula  ")  # a continuation starts under the terms
        return "\n".join(
            [head, *table]
            + [wrapped(line, indent=" " * (at - 16 * (i > 0))) for i, line in enumerate(peak_at)]
        )


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
        fit_peak(
            model,
            micro_batch=micro_batch,
            seq=seq,
            recompute=recompute,
            devices=devices,
            rank=rank,
            precision=precision,
        ),
        track(model, devices, rank, precision, micro_batch, seq, recompute) if tracker else None,
    )
