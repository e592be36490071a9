"""Measured against predicted (SPEC §7): one run's numbers, per rank, beside the core's derivation.

Predicted comes from ``derive_schedule`` and ``derive_memory`` on the ``ConcreteModel`` that
describes what the engines do; measured comes from the ledgers. Every byte is an exact integer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from placement_edu.memory import ACTIVATIONS, TRANSIENT_BUFFERS, Memory, derive_memory
from placement_edu.placement import MODEL_STATES, STARTUP, State
from placement_edu.precision import Precision
from placement_edu.runtime.config import RunConfig
from placement_edu.runtime import verdict as rule
from placement_edu.runtime.verdict import ROUNDING_MULTIPLE, broken_conditions, edited_schedule
from placement_edu.runtime.calibration.walltime import (
    StepWall,
    predicted_step,
    time_line,
    time_view,
    walls,
)
from placement_edu.schedule import LINK_OPS, Op, OpKind, Schedule, derive_schedule
from placement_edu.units import plain, wrapped
from placement_edu.shown import Shown

STATES = tuple(s.value for s in MODEL_STATES)
POOLS_NOTE = (
    "CPU-only run: 'device' and 'host' pools are both CPU memory; offloaded state is "
    "kept apart by bookkeeping. With CUDA the device pool is GPU memory."
)


@dataclass(frozen=True)
class Side:
    """One rank's numbers, predicted or measured, in the core's own types: a ``Memory`` and the
    ``Schedule`` of what crossed a link (start-up, and each step: one predicted step stands for
    every step; the measured side has one per step). "Measured = predicted" is ``==`` on these."""

    memory: Memory
    startup: Schedule
    steps: tuple[Schedule, ...]

    def row(self) -> dict:
        """The public view (JSON, tables, notebooks): bytes per state, host, transient peaks,
        ring bytes per step, and each entry as (op, state, axis, payload bytes, ring bytes)."""
        m = self.memory
        row: dict = {s: plain(m.device[State(s)]) for s in STATES}
        row["host"] = {s: plain(m.host[State(s)]) for s in STATES}
        row["activations_peak"] = plain(m.transient_peak(ACTIVATIONS))
        row.update({t: plain(m.transient_peak(t)) for t in TRANSIENT_BUFFERS})
        ring = sum((Fraction(step.ring_bytes) for step in self.steps), Fraction(0)) / len(
            self.steps
        )
        row["comm_ring_bytes"] = plain(ring)  # per step
        row["padding_elements"] = m.padding
        row[STARTUP] = [_view(o) for o in self.startup.ops]
        row["steps"] = [[_view(o) for o in step.ops] for step in self.steps]
        row["per_step"] = row["steps"][0]
        return row


def _view(op: Op) -> tuple:
    return (
        op.op,
        str(op.state),
        op.axis,
        plain(Fraction(op.payload_bytes)),
        plain(Fraction(op.ring_bytes)),
    )


#: Steps the ``per step:`` line shows at each end of a longer run.
PER_STEP_SHOWN = 3


def per_step_line(deviation: list[float]) -> str:
    """The per-step deviations in one short line whatever the step count: every step of a short
    run; of a long one, the first and last ``PER_STEP_SHOWN``, the count and the largest."""
    if len(deviation) <= 3 * PER_STEP_SHOWN:
        return ", ".join(f"{d:.1e}" for d in deviation)
    n = PER_STEP_SHOWN
    peak = max(range(len(deviation)), key=deviation.__getitem__)
    return (
        ", ".join(f"{d:.1e}" for d in deviation[:n])
        + ", …, "
        + ", ".join(f"{d:.1e}" for d in deviation[-n:])
        + f" ({len(deviation):,} steps; max {deviation[peak]:.1e} at step {peak + 1:,})"
    )


def predict(config: RunConfig) -> list[Side]:
    """Per rank: the core's derivation of the run -- memory, and the ledger of one step."""
    strategy, mesh, model, precision = (
        config.resolved_strategy(),
        config.resolved_mesh(),
        config.concrete_model(),
        config.precision,
    )
    out = []
    for rank in range(mesh.world_size):
        # A faulted run is compared with the schedule the checker edits the fault into.
        schedule = edited_schedule(
            derive_schedule(strategy, model, mesh, precision, rank), config.fault, strategy, mesh
        )
        moved = [o for o in schedule.ops if o.op in LINK_OPS]
        out.append(
            Side(
                derive_memory(strategy, model, mesh, precision, rank),
                Schedule(tuple(o for o in moved if o.once)),
                (Schedule(tuple(o for o in moved if not o.once)),),
            )
        )
    return out


def measured(rank_result: dict, steps: int, precision: Precision) -> Side:
    """The same, read from one rank's ledgers and turned into the core's types."""
    mem = rank_result["memory"]
    memory = Memory(
        {State(s): mem["device"][s] for s in STATES},
        {State(s): mem["host"][s] for s in STATES},
        {phase: dict(terms) for phase, terms in mem["transient"].items()},
    )

    def op(e: dict) -> Op:
        state = State(e["state"])
        width = precision.activations if state is State.ACTIVATIONS else precision.bytes_per(state)
        return Op(
            e["op"],
            state,
            e["axis"],
            e["phase"],
            Fraction(e["payload_bytes"], width),
            width,
            e["group"],
            "measured",
            root=e["op"] == OpKind.BROADCAST and e["ring_bytes"] > 0,
        )

    by_step: dict[int, list[Op]] = {}
    for e in rank_result["ledger"]:
        by_step.setdefault(max(e["step"], -1), []).append(op(e))
    # A step that repeats the step before (its entries not sent: ``Comm.ledger``) is the same
    # Schedule object: a long run holds a few distinct steps, not one Schedule per step.
    runs = sorted(tuple(r) for r in rank_result.get("ledger_repeats", ()))
    per_step: list[Schedule] = []
    run = 0
    for k in range(steps):
        while run < len(runs) and runs[run][1] < k:
            run += 1
        if per_step and run < len(runs) and runs[run][0] <= k:
            per_step.append(per_step[-1])
        else:
            per_step.append(Schedule(tuple(by_step.get(k, ()))))
    return Side(memory, Schedule(tuple(by_step.get(-1, ()))), tuple(per_step))


@dataclass
class RunResult(Shown):
    """One run: configuration, verdicts, and predicted / measured per rank (``Side`` values)."""

    config: RunConfig
    deviation: list[float]  # per step: max over ranks of max |θ − θ_ref|
    predicted_sides: list[Side]
    measured_sides: list[Side]
    #: Per rank, the entries in issue order -- kept compact: a step that repeats the step before
    #: is in ``ledger_repeats``, not here (``full_ledger`` lists every entry).
    ledger: list[list[dict]]
    reasons: dict[str, str] = field(default_factory=dict)  # broken condition -> checker's reason
    device: str = "cpu"
    walls: list[list[StepWall]] = field(
        default_factory=list
    )  # per rank, per step: wall seconds (SPEC §9)
    #: Per step: the rounding floor, max |θ_ref − θ_ref'| between the single-process run and its
    #: twin that sums in another order (``reference.rounding_floor``); empty: no floor measured.
    floor: list[float] = field(default_factory=list)
    #: Per rank, the runs of steps [first, last] that issued the entries of the step before.
    ledger_repeats: list[list[list[int]]] = field(default_factory=list)

    @classmethod
    def build(cls, config: RunConfig, per_rank: list[dict]) -> "RunResult":
        per_rank = sorted(per_rank, key=lambda r: r["rank"])
        steps = len(per_rank[0]["deviation"])
        deviation = [max(r["deviation"][k] for r in per_rank) for k in range(steps)]
        # (every rank measures the same floor; the largest, should two machines round apart)
        floors = [r["floor"] for r in per_rank if r.get("floor")]
        floor = [max(f[k] for f in floors) for k in range(steps)] if floors else []
        strategy, mesh = config.resolved_strategy(), config.resolved_mesh()
        return cls(
            config,
            deviation,
            predict(config),
            [measured(r, config.steps, config.precision) for r in per_rank],
            [r["ledger"] for r in per_rank],
            broken_conditions(
                strategy, mesh, config.fault, config.concrete_model(), config.precision
            ),
            per_rank[0].get("device", "cpu"),
            [walls(r) for r in per_rank],
            floor,
            [r.get("ledger_repeats", []) for r in per_rank],
        )

    @property
    def predicted(self) -> list[dict]:
        return [side.row() for side in self.predicted_sides]

    @property
    def measured(self) -> list[dict]:
        return [side.row() for side in self.measured_sides]

    # --- verdicts ---------------------------------------------------------------------------
    @property
    def broken(self) -> list[str]:
        """The correctness conditions the checker says this run's fault breaks."""
        return list(self.reasons)

    @property
    def max_abs_deviation(self) -> float:
        return max(self.deviation)

    @property
    def tolerances(self) -> list[float]:
        """Per step, the largest deviation that counts as rounding: the dtype's base tolerance
        (``RunConfig.tolerance``) + ``ROUNDING_MULTIPLE`` x the rounding floor so far
        (``verdict.tolerances``)."""
        return rule.tolerances(self.config.tolerance, self.floor, len(self.deviation))

    @property
    def decisive_step(self) -> int:
        """The step (from 0) whose deviation is largest against its tolerance."""
        return rule.decisive_step(self.deviation, self.tolerances)

    @property
    def tolerance(self) -> float:
        """The tolerance at the decisive step: the one printed beside the deviation."""
        return (self.tolerances or [self.config.tolerance])[self.decisive_step]

    @property
    def stopped_discriminating(self) -> int | None:
        """The first step (from 0) from which the comparison cannot tell a fault from rounding
        (``verdict.stops_discriminating``); None while it can."""
        return rule.stops_discriminating(self.tolerances)

    @property
    def rounding_floor(self) -> float:
        """The largest rounding floor of the run (0.0 when none was measured)."""
        return max(self.floor, default=0.0)

    @property
    def equivalent(self) -> bool:
        """Parameters equal the single-process run's at every step, to rounding: each step's
        deviation within that step's tolerance (``verdict.equivalent``)."""
        return rule.equivalent(self.deviation, self.tolerances)

    def compared_transients(self) -> tuple[str, ...]:
        """The transient terms to compare: activations and all the named buffers, except the buffer
        of an op a fault removed (``Fault.removes``: skip-param-sync drops the all-gather after the
        step, and the padded buffer it fills)."""
        from placement_edu.faults import FAULTS

        removed = FAULTS[self.config.fault].removes if self.config.fault else ()
        return (ACTIVATIONS,) + tuple(t for t in TRANSIENT_BUFFERS if t not in removed)

    def memory_differences(self) -> list[str]:
        """Per rank, what differs between predicted and measured memory (``Memory.differences``)."""
        return [
            f"rank {rank} {d} (predicted vs measured)"
            for rank, (p, m) in enumerate(zip(self.predicted_sides, self.measured_sides))
            for d in p.memory.differences(m.memory, self.compared_transients())
        ]

    def ledger_differences(self) -> list[str]:
        """Per rank and step, where the measured ledger departs from the predicted schedule
        (``Schedule.differences``, entry by entry: op, state, axis, phase, bytes, group)."""
        out = []
        for rank, (p, m) in enumerate(zip(self.predicted_sides, self.measured_sides)):
            out += [
                f"rank {rank} start-up ledger: {d} (predicted vs measured)"
                for d in p.startup.differences(m.startup)
            ]
            compared: set[int] = set()  # (a long run repeats one Schedule object: compared once)
            for k, step in enumerate(m.steps):
                if id(step) in compared:
                    continue
                compared.add(id(step))
                diff = p.steps[0].differences(step)
                if diff:
                    out.append(f"rank {rank} step {k} ledger: {diff[0]} (predicted vs measured)")
                    break
        return out

    def full_ledger(self) -> list[list[dict]]:
        """Per rank, every entry of every step, in issue order (the repeated steps written out)."""
        return [
            expand_ledger(entries, repeats)
            for entries, repeats in zip(
                self.ledger, self.ledger_repeats or [[] for _ in self.ledger]
            )
        ]

    def memory_matches(self) -> bool:
        """Measured state bytes (device and host), activation peak and named transient terms
        equal the prediction to the byte."""
        return not self.memory_differences()

    def ledger_matches(self) -> bool:
        """Every rank's ledger equals its predicted schedule entry by entry, every step."""
        return not self.ledger_differences()

    def mismatches(self) -> list[str]:
        """Human-readable differences between prediction and measurement (empty when none)."""
        return self.memory_differences() + self.ledger_differences()

    # --- time (SPEC §9): a model, compared but never required equal ---------------------------
    def time(self) -> dict:
        """Measured seconds per step beside the core's prediction on ``this_machine``, and the
        ratio measured / predicted (``walltime.py`` says exactly what each number is)."""
        return time_view(
            self.walls,
            predicted_step(self.config, [side.steps[0] for side in self.predicted_sides]),
        )

    # --- presentation -----------------------------------------------------------------------
    def deviation_line(self) -> str:
        """The largest deviation, and the tolerance beside the deviation it decides on: at the
        decisive step (named when its deviation is not the largest)."""
        k, base = self.decisive_step, self.config.tolerance
        at = (
            ""
            if self.deviation[k] == self.max_abs_deviation
            else f"; at step {k + 1:,}: {self.deviation[k]:.3e}"
        )
        floor = max(self.floor[: k + 1], default=0.0)
        return (
            f"max |θ − θ_one_process| = {self.max_abs_deviation:.3e}{at}, tolerance "
            f"{self.tolerance:.1e} (= {base:g} + {ROUNDING_MULTIPLE} × rounding floor {floor:.1e})"
        )

    def to_dict(self) -> dict:
        mesh = self.config.resolved_mesh()

        def public(row: dict) -> dict:
            return {k: v for k, v in row.items() if k not in (STARTUP, "per_step", "steps")}

        return {
            "strategy": self.config.resolved_strategy().name,
            "world_size": self.config.world_size,
            "mesh": dict(mesh.degrees),
            "steps": self.config.steps,
            "fault": self.config.fault,
            "dtype": self.config.dtype,
            "model": self.config.concrete_model().description,
            "psi": self.config.concrete_model().psi,
            "max_abs_deviation": self.max_abs_deviation,
            "deviation_per_step": self.deviation,
            "tolerance": self.tolerance,
            "tolerance_step": self.decisive_step + 1,
            "base_tolerance": self.config.tolerance,
            "rounding_multiple": ROUNDING_MULTIPLE,
            "rounding_floor": self.rounding_floor,
            "rounding_floor_per_step": self.floor,
            "equivalent": self.equivalent,
            # the first step (from 1) whose comparison no longer discriminates; None: none
            "stopped_discriminating_at_step": None
            if self.stopped_discriminating is None
            else self.stopped_discriminating + 1,
            "broken_conditions": self.broken,
            "broken_reasons": self.reasons,
            "memory_matches": self.memory_matches(),
            "ledger_matches": self.ledger_matches(),
            "units": "bytes",
            "pools": POOLS_NOTE if self.device == "cpu" else f"device pool: {self.device}",
            "predicted": [public(r) for r in self.predicted],
            "measured": [public(r) for r in self.measured],
            "ledger": self.full_ledger(),
            "timing": [[w.to_dict() for w in rank] for rank in self.walls],  # per rank, per step
            "time": self.time(),
        }

    def table(self) -> str:
        """Measured against predicted, per rank, as a text table (bytes)."""
        cols = ("params", "grads", "optimizer", "activations_peak", "comm_ring_bytes")
        lines = [f"{'rank':>4}  {'(bytes)':9}" + "".join(f"{c:>17}" for c in cols)]
        for rank, (p, m) in enumerate(zip(self.predicted, self.measured)):
            for label, row in (("predicted", p), ("measured", m)):
                cells = []
                for c in cols:
                    value = row[c] + (row["host"].get(c, 0) if c in STATES else 0)
                    host = " (host)" if c in STATES and row["host"].get(c) else ""
                    cells.append(f"{str(value) + host:>17}")
                lines.append(
                    f"{rank if label == 'predicted' else '':>4}  {label:9}" + "".join(cells)
                )
        return "\n".join(lines)

    def __str__(self) -> str:
        c = self.config
        verdict = (
            "equivalent to one process"
            if self.equivalent
            else f"DIVERGES from one process (broken: {', '.join(self.broken) or 'none named'})"
        )
        stop = self.stopped_discriminating
        if self.equivalent and stop is not None:
            verdict += (
                f" -- up to step {stop:,} only: from step {stop + 1:,} the tolerance "
                f"({self.tolerances[stop]:.1e}) passes {rule.DISCRIMINATING_TOLERANCE:g}, the "
                "smallest deviation a fault makes (two one-process runs that differ only in their "
                f"order of sums are {self.floor[stop]:.1e} apart there: the training amplifies "
                "rounding), so the comparison has stopped discriminating; run fewer steps"
            )
        lines = [
            f"{c.label}: {c.steps:,} steps, {c.dtype}, {self.config.concrete_model().description}",
            f"{self.deviation_line()} -> {verdict}",
            "per step: " + per_step_line(self.deviation),
            f"memory measured = predicted: {self.memory_matches()}; "
            f"ledger measured = predicted: {self.ledger_matches()}",
            self.table(),
            time_line(self.time()),
        ]
        lines += [
            f"{name.replace('_', ' ')} broken: {reason}" for name, reason in self.reasons.items()
        ]
        lines += self.mismatches()[:6]
        if self.predicted[0]["padding_elements"]:
            lines.append(
                f"padding: ZeRO's flat buffer of Ψ = {c.concrete_model().psi} elements "
                f"is padded by {self.predicted[0]['padding_elements']} "
                "to a multiple of the data degree; the padding "
                "is stored in the shards and moved by every collective (counted above)"
            )
        if self.device == "cpu" and any(any(r["host"].values()) for r in self.predicted):
            lines.append(POOLS_NOTE)
        return wrapped("\n".join(lines))


def expand_ledger(entries: list[dict], repeats: list[list[int]]) -> list[dict]:
    """Every entry of a compact ledger (``Comm.ledger``), in issue order: each step of a run of
    ``repeats`` issued the entries of the step before it."""
    by_step: dict[int, list[dict]] = {}
    for e in entries:
        by_step.setdefault(e["step"], []).append(e)
    for first, last in repeats:
        for k in range(first, last + 1):
            by_step[k] = [{**e, "step": k} for e in by_step[k - 1]]
    return [e for k in sorted(by_step) for e in by_step[k]]
