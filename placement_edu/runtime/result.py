"""Measured against predicted (SPEC §7): one run's numbers, per rank, beside the core's derivation.

Predicted comes from ``derive_schedule`` and ``derive_memory`` on the ``ConcreteModel`` that
describes what the engines do; measured comes from the ledgers. Every byte is an exact integer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from placement_edu.memory import derive_memory
from placement_edu.placement import State
from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.verdict import broken_conditions, edited_schedule
from placement_edu.schedule import derive_schedule
from placement_edu.units import plain

LEDGER_OPS = frozenset({"all_reduce", "reduce_scatter", "all_gather", "send", "recv", "broadcast",
                        "h2d", "d2h"})
STATES = ("params", "grads", "optimizer")
TRANSIENTS = ("gather_window", "reduce_bucket", "gather_buffer", "offload_staging")
POOLS_NOTE = ("CPU-only run: 'device' and 'host' pools are both CPU memory; offloaded state is "
              "kept apart by bookkeeping. With CUDA the device pool is GPU memory.")


def predict(config: RunConfig) -> list[dict]:
    """Per rank: the predicted bytes per state, transient peaks, ring bytes and ledger of a step."""
    strategy, mesh, model, precision = (config.resolved_strategy(), config.resolved_mesh(),
                                        config.concrete_model(), config.precision)
    out = []
    for rank in range(mesh.world_size):
        # A faulted run is compared with the schedule the checker edits the fault into.
        schedule = edited_schedule(derive_schedule(strategy, model, mesh, precision, rank),
                                   config.fault, strategy, mesh)
        memory = derive_memory(strategy, model, mesh, precision, rank)
        row = {s: plain(memory.device[State(s)]) for s in STATES}
        row["host"] = {s: plain(memory.host[State(s)]) for s in STATES}
        row["activations_peak"] = plain(memory.transient_peak("activations"))
        row.update({t: plain(memory.transient_peak(t)) for t in TRANSIENTS})
        row["comm_ring_bytes"] = plain(Fraction(schedule.ring_bytes))           # per step
        row["padding_elements"] = memory.padding
        row["startup"] = [_key(o) for o in schedule.ops if o.phase == "startup" and o.op in LEDGER_OPS]
        row["per_step"] = [_key(o) for o in schedule.per_step if o.op in LEDGER_OPS]
        out.append(row)
    return out


def _key(op) -> tuple:
    return (op.op, str(op.state), op.axis, plain(Fraction(op.payload_bytes)), plain(Fraction(op.ring_bytes)))


def measured(rank_result: dict, steps: int) -> dict:
    """The same fields as ``predict``, read from one rank's ledgers."""
    mem = rank_result["memory"]
    row = {s: mem["device"][s] for s in STATES}
    row["host"] = dict(mem["host"])
    row["activations_peak"] = mem["activations_peak"]
    row.update({t: max(p.get(t, 0) for p in mem["transient"].values()) for t in TRANSIENTS})
    per_step = [e for e in rank_result["ledger"] if e["step"] >= 0]
    row["comm_ring_bytes"] = plain(Fraction(sum(e["ring_bytes"] for e in per_step), steps))  # per step
    row["startup"] = [_entry_key(e) for e in rank_result["ledger"] if e["step"] < 0]
    row["steps"] = [[_entry_key(e) for e in per_step if e["step"] == k] for k in range(steps)]
    return row


def _entry_key(e: dict) -> tuple:
    return (e["op"], e["state"], e["axis"], e["payload_bytes"], e["ring_bytes"])


@dataclass
class RunResult:
    """One run: configuration, verdicts, and predicted / measured per rank."""

    config: RunConfig
    deviation: list[float]                   # per step: max over ranks of max |θ − θ_ref|
    predicted: list[dict]
    measured: list[dict]
    ledger: list[list[dict]]                 # per rank, every entry in issue order
    reasons: dict[str, str] = field(default_factory=dict)   # broken condition -> checker's reason
    device: str = "cpu"

    @classmethod
    def build(cls, config: RunConfig, per_rank: list[dict]) -> "RunResult":
        per_rank = sorted(per_rank, key=lambda r: r["rank"])
        steps = len(per_rank[0]["deviation"])
        deviation = [max(r["deviation"][k] for r in per_rank) for k in range(steps)]
        strategy, mesh = config.resolved_strategy(), config.resolved_mesh()
        return cls(config, deviation, predict(config), [measured(r, config.steps) for r in per_rank],
                   [r["ledger"] for r in per_rank],
                   broken_conditions(strategy, mesh, config.fault, config.concrete_model(), config.precision),
                   per_rank[0].get("device", "cpu"))

    # --- verdicts ---------------------------------------------------------------------------
    @property
    def broken(self) -> list[str]:
        """The correctness conditions the checker says this run's fault breaks."""
        return list(self.reasons)

    @property
    def max_abs_deviation(self) -> float:
        return max(self.deviation)

    @property
    def equivalent(self) -> bool:
        """Parameters equal the single-process run's at every step, to rounding."""
        return self.max_abs_deviation <= self.config.tolerance

    def memory_matches(self) -> bool:
        """Measured state bytes (device and host) and activation peak equal the prediction, and
        so do the named transient terms (gather window, reduce bucket, gather buffer, staging)."""
        for p, m in zip(self.predicted, self.measured):
            if any(p[s] != m[s] for s in STATES) or p["host"] != m["host"]:
                return False
            if p["activations_peak"] != m["activations_peak"]:
                return False
            if any(p[t] != m[t] for t in self.compared_transients()):
                return False
        return True

    def compared_transients(self) -> tuple[str, ...]:
        """The transient terms to compare: all of them, except the buffer of an op a fault removed
        (skip-param-sync drops the all-gather after the step, and the padded buffer it fills)."""
        removed = {"skip-param-sync": ("gather_buffer",)}.get(self.config.fault or "", ())
        return tuple(t for t in TRANSIENTS if t not in removed)

    def ledger_matches(self) -> bool:
        """Every rank's ledger equals its predicted schedule entry by entry, every step."""
        return all(p["startup"] == m["startup"] and all(s == p["per_step"] for s in m["steps"])
                   for p, m in zip(self.predicted, self.measured))

    def mismatches(self) -> list[str]:
        """Human-readable differences between prediction and measurement (empty when none)."""
        out = []
        for rank, (p, m) in enumerate(zip(self.predicted, self.measured)):
            for key in (*STATES, "activations_peak", *self.compared_transients()):
                if p[key] != m[key]:
                    out.append(f"rank {rank} {key}: predicted {p[key]} B, measured {m[key]} B")
            if p["host"] != m["host"]:
                out.append(f"rank {rank} host: predicted {p['host']}, measured {m['host']}")
            if p["startup"] != m["startup"]:
                out.append(f"rank {rank} start-up ledger: predicted {p['startup']}, measured {m['startup']}")
            for k, step in enumerate(m["steps"]):
                if step != p["per_step"]:
                    out.append(f"rank {rank} step {k} ledger: predicted {p['per_step']}, measured {step}")
                    break
        return out

    # --- presentation -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        mesh = self.config.resolved_mesh()

        def public(row: dict) -> dict:
            return {k: v for k, v in row.items() if k not in ("startup", "per_step", "steps")}

        return {
            "strategy": self.config.resolved_strategy().name, "world_size": self.config.world_size,
            "mesh": dict(mesh.degrees), "steps": self.config.steps, "fault": self.config.fault,
            "dtype": self.config.dtype, "model": self.config.concrete_model().description,
            "psi": self.config.concrete_model().psi,
            "max_abs_deviation": self.max_abs_deviation, "deviation_per_step": self.deviation,
            "equivalent": self.equivalent, "broken_conditions": self.broken, "broken_reasons": self.reasons,
            "memory_matches": self.memory_matches(), "ledger_matches": self.ledger_matches(),
            "units": "bytes", "pools": POOLS_NOTE if self.device == "cpu" else f"device pool: {self.device}",
            "predicted": [public(r) for r in self.predicted],
            "measured": [public(r) for r in self.measured],
            "ledger": self.ledger,
        }

    def table(self) -> str:
        """Measured against predicted, per rank, as a text table (bytes)."""
        cols = ("params", "grads", "optimizer", "activations_peak", "comm_ring_bytes")
        lines = [f"{'rank':>4}  {'(bytes)':9}" + "".join(f"{c:>18}" for c in cols)]
        for rank, (p, m) in enumerate(zip(self.predicted, self.measured)):
            for label, row in (("predicted", p), ("measured", m)):
                cells = []
                for c in cols:
                    value = row[c] + (row["host"].get(c, 0) if c in STATES else 0)
                    host = " (host)" if c in STATES and row["host"].get(c) else ""
                    cells.append(f"{str(value) + host:>18}")
                lines.append(f"{rank if label == 'predicted' else '':>4}  {label:9}" + "".join(cells))
        return "\n".join(lines)

    def __str__(self) -> str:
        c = self.config
        verdict = ("equivalent to one process" if self.equivalent else
                   f"DIVERGES from one process (broken: {', '.join(self.broken) or 'none named'})")
        lines = [f"{c.label}: {c.steps} steps, {c.dtype}, {self.config.concrete_model().description}",
                 f"max |θ − θ_one_process| = {self.max_abs_deviation:.3e} -> {verdict}",
                 "per step: " + ", ".join(f"{d:.1e}" for d in self.deviation),
                 f"memory measured = predicted: {self.memory_matches()}; "
                 f"ledger measured = predicted: {self.ledger_matches()}",
                 self.table()]
        lines += [f"{name.replace('_', ' ')} broken: {reason}" for name, reason in self.reasons.items()]
        lines += self.mismatches()[:6]
        if self.predicted[0]["padding_elements"]:
            lines.append(f"padding: ZeRO's flat buffer of Ψ = {c.concrete_model().psi} elements is padded by "
                         f"{self.predicted[0]['padding_elements']} to a multiple of the data degree; the padding "
                         "is stored in the shards and moved by every collective (counted above)")
        if self.device == "cpu" and any(any(r["host"].values()) for r in self.predicted):
            lines.append(POOLS_NOTE)
        return "\n".join(lines)
