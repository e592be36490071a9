"""One placement mode at a time: sliders for Ψ and N, and the mode's own knob, driving the device
grid (who holds what, ``style.device_grid``) and the core's memory and communication for one device.

The three data-axis modes of the course's walkthroughs (SPEC §2), each with the knob that changes
its cost:

- ``"R"`` (replicated, ``dp``): the precision table -- a replica costs the whole |s| per device, so
  the bytes per parameter (16, 18 or 20: SPEC §8) are the only thing that moves it.
- ``"S"`` (sharded): which states are sharded and by which schedule -- ``zero1`` (ZeRO §7, 2Ψ),
  ``zero1_allreduce`` (PyTorch's ``ZeroRedundancyOptimizer``, 3Ψ) or ``zero2``.
- ``"SG"`` (sharded-with-gather, ``zero3``/FSDP): the gather units, whether parameters are
  resharded after forward (``fsdp_grad_op`` when not), and the micro-batches per step (rule 5).

Presentation only: every byte and every Ψ shown comes from ``analyze`` (``derive_memory``,
``derive_schedule``); this module only groups the schedule's operations for display.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from fractions import Fraction

from placement_edu.models import ModelSpec
from placement_edu.placement import MODEL_STATES, PHASES, STARTUP
from placement_edu.presentation.controls import choice_slider, devices_slider, psi_slider
from placement_edu.presentation.explorer import Explorer
from placement_edu.presentation.style import device_grid, png
from placement_edu.report import Report, analyze
from placement_edu.strategies import Strategy, get_strategy
from placement_edu.units import Number, fmt_bytes, wrapped

#: Device counts the N slider offers (a mode on one device is no mode at all).
DEVICE_CHOICES = (2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: The replicated mode's knob: bytes per parameter of P/G/O (SPEC §1, §8: 16 vs 18 vs 20 B).
PRECISION_CHOICES = (
    ("16 B: mixed_adam (ZeRO)", "mixed_adam"),
    ("18 B: fp32 main grads (Megatron)", "mixed_adam_fp32_grads"),
    ("20 B: fp32 accumulation (Playbook)", "mixed_adam_fp32_accum"),
    ("16 B: fp32_adam", "fp32_adam"),
)
#: The sharded mode's knob: which states are S, and ZeRO-1's two schedules (SPEC §4 rule 1).
SHARDED_CHOICES = (
    ("zero1 (O sharded; ZeRO §7)", "zero1"),
    ("zero1_allreduce (O; ZeroRedundancyOptimizer)", "zero1_allreduce"),
    ("zero2 (G and O sharded)", "zero2"),
)
#: The sharded-with-gather mode's knobs.
UNIT_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
MICRO_BATCH_CHOICES = (1, 2, 4, 8, 16)

MODES = ("R", "S", "SG")


@dataclass(frozen=True)
class OpLine:
    """Operations of one kind in one phase, grouped for display: how many, payload and ring bytes
    summed (each number the core's), and the reason the core gives for them."""

    phase: str
    op: str
    state: str
    count: int
    payload_bytes: Fraction
    ring_bytes: Fraction
    why: str


def grouped_ops(report: Report) -> list[OpLine]:
    """The report's collectives grouped by (phase, op, state), in schedule order."""
    lines: dict[tuple[str, str, str], OpLine] = {}
    for o in report.schedule.ops:
        if not o.is_collective:
            continue
        key = (o.phase, o.op, o.state.value)
        old = lines.get(key)
        lines[key] = OpLine(
            o.phase,
            o.op,
            o.state.value,
            (old.count if old else 0) + 1,
            (old.payload_bytes if old else 0) + Fraction(o.payload_bytes),
            (old.ring_bytes if old else 0) + Fraction(o.ring_bytes),
            o.why,
        )
    return list(lines.values())


def schedule_text(report: Report, grouped: bool = False) -> str:
    """One device's per-step collectives as the core derived them, one line each and its reason
    on the next (or grouped by phase and op, with counts), then the step's total in both
    conventions (SPEC §4)."""
    lines = []
    if grouped:
        for g in grouped_ops(report):
            if g.phase != STARTUP:
                lines.append(
                    f"  {g.phase:8} {g.count} × {g.op} {g.state}: "
                    f"payload {fmt_bytes(g.payload_bytes)}, "
                    f"ring {fmt_bytes(g.ring_bytes)}"
                )
                lines.append(wrapped(f"      -- {g.why}", indent="   "))
    else:
        for o in report.schedule.per_step:
            if o.is_collective:
                lines.append(
                    f"  {o.phase:8} {o.op:14} {o.state.value:7} "
                    f"payload {fmt_bytes(o.payload_bytes)}, "
                    f"ring {fmt_bytes(o.ring_bytes)}"
                )
                lines.append(wrapped(f"      -- {o.why}", indent="   "))
    lines.append(
        f"  per step: {float(report.volume_psi):g}Ψ (ZeRO convention), "
        f"{fmt_bytes(report.ring_bytes)} "
        "ring bytes sent by this device"
    )
    return "\n".join(lines)


class ModeExplorer(Explorer):
    """Sliders for Ψ and N, and the knob of ``mode`` ("R", "S" or "SG"), driving the device grid
    and a table of one device's memory and per-step communication, all from the core.

    ``update()`` derives, redraws the grid and returns the ``Report``; ``values`` holds the key
    numbers of the last update (bytes, Ψ) for a test or a notebook to read.
    """

    def __init__(
        self,
        mode: str = "SG",
        psi: float = 7.5e9,
        devices: int = 8,
        *,
        precision: str = "mixed_adam",
        strategy: str = "zero1",
        units: int = 1,
        reshard_after_forward: bool = True,
        micro_batches: int = 1,
        max_ranks: int = 4,
    ) -> None:
        import ipywidgets as w

        if mode not in MODES:
            from placement_edu.errors import PlacementError

            raise PlacementError(
                f"mode must be one of {', '.join(MODES)} (replicated, sharded, "
                f"sharded-with-gather), got {mode!r}"
            )
        self.mode, self.max_ranks = mode, max_ranks
        self.psi = psi_slider(psi)
        self.devices = devices_slider(DEVICE_CHOICES, devices)
        wide = {"description_width": "initial"}
        self.precision = w.Dropdown(
            options=PRECISION_CHOICES, value=precision, description="bytes per param", style=wide
        )
        self.strategy = w.Dropdown(
            options=SHARDED_CHOICES,
            value=strategy,
            description="sharded",
            style=wide,
            layout=w.Layout(width="420px"),
        )
        self.units = choice_slider(UNIT_CHOICES, units, "gather units")
        self.reshard = w.ToggleButtons(
            options=(("reshard after forward", True), ("keep through backward", False)),
            value=reshard_after_forward,
            style={"button_width": "170px"},
        )
        self.micro_batches = choice_slider(MICRO_BATCH_CHOICES, micro_batches, "micro-batches m")
        knobs = {
            "R": [self.precision],
            "S": [self.strategy],
            "SG": [self.units, self.reshard, self.micro_batches],
        }[mode]
        self.values: dict[str, object] = {}
        self.assemble(
            [self.psi, self.devices],
            knobs[:2],
            *knobs[2:],
            picture=f"device grid of mode {mode}",
            max_width="760px",
        )

    def chosen_strategy(self) -> Strategy:
        """The strategy the controls describe (named where one exists, so the grid's title says
        it)."""
        if self.mode == "R":
            return get_strategy("dp")
        if self.mode == "S":
            return get_strategy(self.strategy.value)
        base = get_strategy("zero3" if self.reshard.value else "fsdp_grad_op")
        return (
            base.with_(micro_batches=self.micro_batches.value)
            if self.micro_batches.value > 1
            else base
        )

    def model(self) -> ModelSpec:
        units = self.units.value if self.mode == "SG" else 1
        return ModelSpec(psi=round(self.psi.value), gather_units=units)

    def chosen_precision(self) -> str:
        return self.precision.value if self.mode == "R" else "mixed_adam"

    def report(self) -> Report:
        return analyze(
            self.chosen_strategy(), self.model(), self.devices.value, self.chosen_precision()
        )

    # --- drawing -----------------------------------------------------------------------------
    def update(self) -> Report:
        report = self.report()
        figure = device_grid(
            report.strategy,
            report.model,
            report.mesh,
            report.precision.name,
            max_ranks=self.max_ranks,
        )
        self.image.value = png(figure)
        m = report.memory
        self.values = {
            "strategy": report.strategy.name,
            "devices": report.mesh.world_size,
            **{s.value: m.device[s] for s in MODEL_STATES},
            "model_state": m.model_state,
            "peak": m.peak,
            "peak_phase": m.peak_phase,
            "volume_psi": report.volume_psi,
            "ring_bytes": report.ring_bytes,
        }
        self.readout.value = self._table(report)
        return report

    def _table(self, report: Report) -> str:
        m, psi = report.memory, report.model.psi
        rows = [
            (
                f"{s.value} ({report.strategy.placement.mode(s, 'data').value})",
                fmt_bytes(m.device[s]),
                f"{_coefficient(m.device[s], psi)}",
            )
            for s in MODEL_STATES
        ]
        rows.append(
            (
                "<b>model state</b> P+G+O",
                f"<b>{fmt_bytes(m.model_state)}</b>",
                _coefficient(m.model_state, psi),
            )
        )
        for phase in PHASES:
            for term, value in m.transient.get(phase, {}).items():
                rows.append(
                    (f"{phase}: {term} (transient)", fmt_bytes(value), _coefficient(value, psi))
                )
        rows.append(
            (
                f"<b>peak</b> (in {m.peak_phase})",
                f"<b>{fmt_bytes(m.peak)}</b>",
                _coefficient(m.peak, psi),
            )
        )
        memory = "".join(f"<tr><td>{a}</td><td>{b}</td><td>{c}</td></tr>" for a, b, c in rows)
        ops = "".join(
            f"<tr><td>{o.phase}</td><td>{o.count} × {o.op} {o.state}</td>"
            f"<td>{fmt_bytes(o.payload_bytes)}</td>"
            f"<td>{'once, at start-up' if o.phase == STARTUP else fmt_bytes(o.ring_bytes)}</td>"
            f"<td>{html.escape(o.why)}</td></tr>"
            for o in grouped_ops(report)
        )
        total = (
            f"per step: <b>{float(report.volume_psi):g} Ψ</b> (ZeRO convention) = "
            f"<b>{fmt_bytes(report.ring_bytes)}</b> ring bytes sent per device"
        )
        return (
            f"<p><b>{html.escape(report.strategy.name)}</b> "
            f"[{html.escape(str(report.strategy.placement))}] on "
            f"{report.mesh}, Ψ = {psi:,}, {report.precision.name} "
            f"(P/G/O = {report.precision.params}/"
            f"{report.precision.grads}/{report.precision.optimizer} B); "
            "per device, GB = 10^9 B, GiB = 2^30 B</p>"
            "<table><thead><tr><th>memory</th><th>bytes</th><th>× Ψ bytes</th></tr></thead>"
            f"{memory}</table>"
            "<table><thead><tr><th>phase</th><th>collectives</th><th>payload</th>"
            "<th>ring bytes</th>"
            f"<th>why</th></tr></thead>{ops}</table><p>{total}</p>"
        )


def _coefficient(n_bytes: Number, psi: int) -> str:
    """Bytes as a multiple of Ψ (e.g. "2.21875Ψ"), to read the formula off the number."""
    value = Fraction(n_bytes) / psi
    return f"{float(value):.6g}Ψ"


__all__ = ["ModeExplorer", "grouped_ops", "schedule_text", "OpLine", "MODES"]
