"""Reports: one strategy's derived memory and schedule, and tables comparing strategies with dp.

Presentation only: every number comes from ``derive_memory`` and ``derive_schedule``. A report
prints as a text table, renders as HTML in a notebook and serialises to JSON (bytes, exact).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Sequence

from placement_edu.errors import PlacementError, context, expect
from placement_edu.memory import Memory, derive_memory
from placement_edu.mesh import Mesh
from placement_edu.models import Model, tensor_divides_heads
from placement_edu.placement import State
from placement_edu.precision import Precision
from placement_edu.schedule import (
    Schedule,
    derive_schedule,
    model_axis_degree,
    bubble_divisor,
    pipeline_bubble,
)
from placement_edu.setting import Setting, resolve
from placement_edu.strategies import STRATEGIES, Strategy
from placement_edu.units import fmt_bytes, fmt_gb, plain


@dataclass(frozen=True)
class Report:
    """What ``strategy`` costs one device (``rank``) of ``mesh`` for ``model`` under
    ``precision``."""

    strategy: Strategy
    model: Model
    mesh: Mesh
    precision: Precision
    memory: Memory
    schedule: Schedule
    rank: int = 0

    @property
    def volume_psi(self) -> Fraction:
        return Fraction(self.schedule.volume_psi(self.model.psi))

    @property
    def bubble_args(self) -> tuple[int, str, int]:
        """``pipeline_bubble``'s arguments after p: m, the schedule, its virtual stages."""
        s = self.strategy
        return s.micro_batches, s.pipeline_schedule, s.virtual_stages

    @property
    def ring_bytes(self) -> Fraction:
        return Fraction(self.schedule.ring_bytes)

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) rows: persistent bytes per state, transient terms, then the schedule."""
        rows = self.memory.lines() + self.schedule.op_lines()
        rows.append(
            (
                "communication per step",
                f"{float(self.volume_psi):g} Ψ (ZeRO convention), "
                f"{fmt_bytes(self.ring_bytes)} ring bytes",
            )
        )
        if self.schedule.host_link_bytes:
            rows.append(
                (
                    "host link per step",
                    f"{fmt_bytes(self.schedule.host_link_bytes)} between this device "
                    "and its host (offloaded state; not network traffic)",
                )
            )
        if self.mesh.degree("pipeline") > 1:
            bubble = pipeline_bubble(self.mesh.degree("pipeline"), *self.bubble_args)
            d = bubble_divisor(self.strategy.pipeline_schedule, self.strategy.virtual_stages)
            dm = "m" if d == 1 else f"{d}·m"  # interleaved: v·m; zero bubble: 3·m
            rows.append(
                (
                    "pipeline bubble",
                    f"{bubble['of_ideal']} of ideal time = (p-1)/{dm if d == 1 else f'({dm})'}; "
                    f"{bubble['of_total']} of total time = (p-1)/({dm}+p-1)",
                )
            )
        rows += [("warning", w) for w in self.schedule.warnings]
        return rows

    def __str__(self) -> str:
        head = (
            f"{self.strategy.name} [{self.strategy.placement}] on {self.mesh} (rank {self.rank}), "
            f"{self.model.description}, precision {self.precision.name}"
        )
        width = max(len(label) for label, _ in self.lines())
        return "\n".join(
            [head] + [f"  {label.ljust(width)}  {value}" for label, value in self.lines()]
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in self.lines()
        )
        return (
            f"<table><caption>{html.escape(str(self).splitlines()[0])}</caption>"
            f"<tbody>{rows}</tbody></table>"
        )

    def to_dict(self) -> dict[str, Any]:
        schedule = self.schedule.to_dict()
        warnings = schedule.pop("warnings")  # the report's own, after the bubble
        return {
            "strategy": self.strategy.name,
            "placement": str(self.strategy.placement),
            "devices": self.mesh.world_size,
            "mesh": dict(self.mesh.degrees),
            "rank": self.rank,
            "precision": self.precision.name,
            "psi": self.model.psi,
            "units": "bytes (GB = 1e9 bytes, GiB = 2^30 bytes)",
            "memory": self.memory.to_dict(),
            "comm": {"volume_psi": plain(self.volume_psi), **schedule},
            "pipeline_bubble": None
            if self.mesh.degree("pipeline") == 1
            else {
                k: float(v)
                for k, v in pipeline_bubble(self.mesh.degree("pipeline"), *self.bubble_args).items()
            },
            "warnings": warnings,
        }


def analyze(
    strategy: str | Strategy | Setting,
    model: Model | int | float | None = None,
    devices: int | None = None,
    precision: str | Precision = "mixed_adam",
    mesh: Mesh | str | None = None,
    rank: int = 0,
) -> Report:
    """Derive memory and schedule. ``model`` may be Ψ (a number) for an abstract model; give
    ``devices`` (all on the strategy's axis) or a ``mesh``. ``strategy`` may be a ``Setting``
    (``setting.resolve``); the other forms are resolved into one here, once."""
    if not isinstance(strategy, Setting):
        expect(model is not None, "give a model: Ψ (a number) or a model spec")
        expect(
            mesh is not None or devices is not None,
            "give devices (a number) or a mesh (e.g. data=2,tensor=2)",
        )
    setting = resolve(strategy, model, mesh, precision, devices=devices)
    built, spec, where = setting.strategy, setting.model, setting.mesh
    expect(
        built is not None and spec is not None and where is not None,
        "analyze needs a strategy, a model and a mesh (or devices)",
    )
    assert built is not None and spec is not None and where is not None
    tensor_divides_heads(spec, model_axis_degree(built, where, "tensor"))
    with context(f"deriving {built.name} ({built.placement}) on {where}"):
        return Report(
            built,
            spec,
            where,
            setting.precision,
            derive_memory(built, spec, where, setting.precision, rank),
            derive_schedule(built, spec, where, setting.precision, rank),
            rank,
        )


@dataclass(frozen=True)
class Comparison:
    """Several strategies on the same model and device count, each against dp."""

    reports: tuple[Report, ...]
    baseline: Report

    def __repr__(self) -> str:
        """One line for a REPL (the dataclass's own repr runs to thousands of characters);
        ``print()`` or a notebook shows the table."""
        first = self.reports[0]
        name = first.model.name  # a bare Ψ's (per_layer_model) already starts with its Ψ
        model = f"{name} " if name and not name.startswith("Ψ = ") else ""
        layers = first.model.layers
        within = f" in {layers} layers" if layers > 1 else ""
        names = ", ".join(r.strategy.name for r in self.reports)
        return (
            f"Comparison({names}: {model}Ψ = {first.model.psi:,}{within} on "
            f"{first.mesh.world_size} devices, {first.precision.name})"
        )

    def vs_dp(self, report: Report) -> dict[str, float | None]:
        """Ratios to dp: ``memory`` (device model state), ``memory_with_host`` (device + host
        model state: an offloaded strategy moves its state, it does not make it vanish), ``comm``
        (ZeRO-convention volume)."""
        base = self.baseline
        memory = Fraction(report.memory.model_state) / Fraction(base.memory.model_state)
        with_host = Fraction(report.memory.model_state + report.memory.host_total) / Fraction(
            base.memory.model_state
        )
        comm = report.volume_psi / base.volume_psi if base.volume_psi else None
        return {
            "memory": float(memory),
            "memory_with_host": float(with_host),
            "comm": None if comm is None else float(comm),
        }

    def to_list(self) -> list[dict[str, Any]]:
        return [{**r.to_dict(), "vs_dp": self.vs_dp(r)} for r in self.reports]

    def to_dict(self) -> dict[str, Any]:
        """Each report's ``to_dict`` with its ratios to the baseline (``table --json`` prints
        the list)."""
        return {"baseline": self.baseline.strategy.name, "reports": self.to_list()}

    def rows(self) -> list[list[str]]:
        out = []
        for r in self.reports:
            m, ratio = r.memory, self.vs_dp(r)
            out.append(
                [
                    r.strategy.name,
                    str(r.strategy.placement),
                    fmt_gb(m.device[State.PARAMS]),
                    fmt_gb(m.device[State.GRADS]),
                    fmt_gb(m.device[State.OPTIMIZER]),
                    fmt_bytes(m.model_state),
                    fmt_gb(m.peak),
                    fmt_gb(m.host_total),
                    f"{float(r.volume_psi):g} Ψ",
                    fmt_bytes(r.ring_bytes),
                    fmt_gb(r.schedule.host_link_bytes),
                    f"{ratio['memory']:.6g}×"
                    + (f" (+host: {ratio['memory_with_host']:.6g}×)" if m.host_total else ""),
                    "n/a" if ratio["comm"] is None else f"{ratio['comm']:.6g}×",
                ]
            )
        return out

    HEADER = [
        "strategy",
        "placement P G O A",
        "params",
        "grads",
        "optimizer",
        "model state",
        "peak",
        "host",
        "comm (ZeRO conv.)",
        "ring bytes / step",
        "host link / step",
        "mem vs dp",
        "comm vs dp",
    ]

    def caption(self) -> str:
        b = self.baseline
        return (
            f"{b.model.description}, {b.mesh.world_size} devices, precision {b.precision.name} "
            f"(P/G/O = {b.precision.params}/{b.precision.grads}/{b.precision.optimizer} B per "
            f"parameter{_wire(b.precision)}). Per device; GB = 10^9 bytes, GiB = 2^30 bytes; "
            "communication per optimizer step, ZeRO convention in Ψ elements (all-reduce = 2Ψ) and "
            "exact ring bytes."
        )

    def __str__(self) -> str:
        rows = [self.HEADER] + self.rows()
        widths = [max(len(row[i]) for row in rows) for i in range(len(self.HEADER))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        notes = [
            f"pipeline bubble ({r.strategy.name}): {value}"
            for r in self.reports
            for label, value in r.lines()
            if label == "pipeline bubble"
        ]
        warnings = [
            f"warning ({r.strategy.name}): {w}" for r in self.reports for w in r.schedule.warnings
        ]
        return "\n".join([self.caption(), ""] + lines + notes + warnings)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.HEADER)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows()
        )
        return (
            f"<table><caption>{html.escape(self.caption())}</caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )


def _wire(precision: Precision) -> str:
    """What the caption adds when a collective moves another dtype than the state stores (float8:
    the converted weights in float8, the rest in the compute dtype, ``Precision.gather_bytes``)."""
    rest = precision.activations  # (float8: what gathers outside the converted weights)
    mixed = precision.float8 is not None and precision.wire_bytes(State.PARAMS) != rest
    moved = [
        f"{what} {precision.wire_bytes(state)} B"
        + (
            f" ({rest} B outside float8's converted weights)"
            if state is State.PARAMS and mixed
            else ""
        )
        for what, state in (("gathers", State.PARAMS), ("reductions", State.GRADS))
        if precision.wire_bytes(state) != precision.bytes_per(state)
    ]
    return f"; on the wire, {' and '.join(moved)} per element" if moved else ""


def compare(
    strategies: Sequence[str | Strategy] = ("dp", "zero1", "zero2", "zero3"),
    model: Model | int | float = 7.5e9,
    devices: int = 64,
    precision: str | Precision = "mixed_adam",
    mesh: Mesh | str | None = None,
) -> Comparison:
    """Derive each strategy on the same model and device count, with dp (all devices on the data
    axis) as the baseline. A ``mesh``, when given, is used for every strategy."""
    if (
        isinstance(strategies, (str, Strategy))
        or not isinstance(strategies, Sequence)
        or not strategies
    ):
        raise PlacementError(
            f"strategies must be a non-empty list of strategy names or Strategy values, "
            f"got {strategies!r}"
        )
    door = resolve(None, model, mesh, precision)  # model, mesh and precision: once for all
    if door.mesh is not None and door.mesh.world_size != devices:
        raise PlacementError(
            f"mesh {door.mesh} has {door.mesh.world_size} devices, "
            f"but devices = {devices}; the degrees must multiply to the device count"
        )

    def on_its_mesh(strategy: str | Strategy) -> Setting:
        built = resolve(strategy).strategy
        assert built is not None
        return replace(door, strategy=built, mesh=door.mesh or built.default_mesh(devices))

    reports = tuple(analyze(on_its_mesh(s)) for s in strategies)
    dp = STRATEGIES["dp"]
    baseline = analyze(replace(door, strategy=dp, mesh=dp.default_mesh(devices)))
    return Comparison(reports, baseline)
