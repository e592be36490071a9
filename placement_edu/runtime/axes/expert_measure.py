"""One launch of the toy MoE layer (``expert_layer``), read as the course reads a measurement:
the ledger against the core's ops, and the deviation from one process.

    >>> from placement_edu.runtime import ExpertRun, run_expert_layer
    >>> print(run_expert_layer(ExpertRun(ranks=2, top_k=2)))
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from placement_edu.runtime.config import DTYPES
from placement_edu.experts import Routed, expert_capacity, route_tokens
from placement_edu.faults import FaultName
from placement_edu.schedule import OpKind
from placement_edu.runtime.axes.expert_run import ExpertRun, Key, measured_is_predicted
from placement_edu.shown import Shown

#: The least deviation from one process that counts as rounding: float64's base tolerance.
TOLERANCE = DTYPES["float64"][2]


@dataclass(frozen=True)
class ExpertMeasurement(Shown):
    """``run`` launched on its d·e gloo ranks: each rank's ledger (``measured``), the core's
    prediction for a rank (``predicted``), the largest deviation from one process over outputs
    and gradients, and the routed tokens the capacity dropped (alike in the reference). The
    router's tokens, rank by rank: ``arrived[r][g]``, the tokens rank r's dispatch brought to
    expert g, counted where g runs; ``routed[r]``, the core's routing of rank r's gate logits
    (``experts.route_tokens``: top-k, then the first C per expert in token order)."""

    run: ExpertRun
    measured: tuple[tuple[Key, ...], ...]
    predicted: tuple[Key, ...]
    deviation: float
    dropped: int
    arrived: tuple[tuple[int, ...], ...] = ()
    routed: tuple[Routed, ...] = ()

    @property
    def matches(self) -> bool:
        """Measured = predicted on every rank, entry by entry (``measured_is_predicted``)."""
        return all(measured_is_predicted(list(m), list(self.predicted)) for m in self.measured)

    @property
    def tokens_match(self) -> bool:
        """Measured = predicted, expert by expert on every rank: the tokens that arrived at each
        expert are those the core's routing of the gate logits keeps, and the dropped ones the
        core's too."""
        kept = tuple(r.kept for r in self.routed)
        return (
            len(self.arrived) == self.run.world
            and self.arrived == kept
            and self.dropped == sum(r.dropped for r in self.routed)
        )

    @property
    def equivalent(self) -> bool:
        """The outputs and gradients are one process's, to float64 rounding (``TOLERANCE``)."""
        return self.deviation <= TOLERANCE

    @property
    def all_to_alls(self) -> tuple[Key, ...]:
        """The predicted all-to-alls of one rank, in order."""
        return tuple(k for k in self.predicted if k[1] == OpKind.ALL_TO_ALL)

    def report(self) -> str:
        """What ``placement-edu run`` prints: the layer, the core's collectives of one rank entry
        by entry (op, state, axis and group; payload and ring bytes), measured against them, and
        the deviation from one process."""
        run, pred = self.run, list(self.predicted)
        fault = next((f for f, on in self.faults.items() if on), "")
        lines = [
            f"top-{run.top_k} MoE layer on data={run.data},expert={run.ranks}"
            f"{' with ' + fault if fault else ''}: a router and "
            f"E={run.experts} SwiGLU experts (f={run.ffn}), b={run.batch} s={run.seq} "
            f"h={run.hidden}, float64, gloo",
            "rank 0's collectives, measured | predicted (payload B, ring B sent):",
        ]
        for m, p in zip_longest(self.measured[0], pred):
            said = p or m  # (an entry only one of them has)
            assert said is not None
            phase, op, state, axis, group = said[:5]
            got = "none" if m is None else f"{m[5]:,}, {m[6]:,}"
            want = "none" if p is None else f"{p[5]:,}, {p[6]:,}"
            note = ""
            if m is not None and p is not None and m[5:] != p[5:]:
                note = " (differs)"
            lines.append(f"  {phase} {op} {state} on {axis} over {group}: {got} | {want}{note}")
        differ = [
            r for r, m in enumerate(self.measured) if not measured_is_predicted(list(m), pred)
        ]
        lines.append(
            "tokens per expert from each rank, measured at the expert | predicted (the core's "
            "routing of the rank's gate logits):"
        )
        for r, (came, routed) in enumerate(zip(self.arrived, self.routed)):
            lines.append(f"  rank {r}: {list(came)} | {list(routed.kept)}")
        lines += [
            "measured = predicted on every rank, entry by entry: "
            + ("yes" if not differ else f"NO on ranks {differ}")
            + f"; tokens per expert: {'yes' if self.tokens_match else 'NO'}",
            f"max |deviation| from one process (output, input and weight gradients): "
            f"{self.deviation:.3g}: "
            + ("equivalent" if self.equivalent else "NOT equivalent")
            + f" (float64 tolerance {TOLERANCE:g}); {self.dropped} routed tokens over capacity, "
            "dropped alike",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "data": self.run.data,
            "expert": self.run.ranks,
            "top_k": self.run.top_k,
            "predicted": [list(k) for k in self.predicted],
            "measured": [[list(k) for k in ledger] for ledger in self.measured],
            "measured_equals_predicted": self.matches,
            "tokens_arrived": [list(a) for a in self.arrived],
            "tokens_predicted": [list(r.kept) for r in self.routed],
            "tokens_match": self.tokens_match,
            "max_deviation": self.deviation,
            "equivalent": self.equivalent,
            "dropped": self.dropped,
        }

    @property
    def faults(self) -> dict[str, bool]:
        """SPEC §5's expert faults, by name: whether this run injects each."""
        return {
            FaultName.DROP_ROUTED_TOKENS: self.run.drop,
            FaultName.SKIP_EXPERT_GRAD_REDUCE: self.run.skip_expert_reduce,
        }

    def __str__(self) -> str:
        run, a2a = self.run, self.all_to_alls
        fault = next((" with " + f for f, on in self.faults.items() if on), "")
        return (
            f"data={run.data},expert={run.ranks}, top-{run.top_k}{fault}: {len(a2a)} all-to-alls "
            f"per rank of {a2a[0][5]:,} B ({a2a[0][6]:,} B sent); measured = predicted on every "
            f"rank: {self.matches}; max |deviation| from one process {self.deviation:.3g}"
        )


def run_expert_layer(run: ExpertRun) -> ExpertMeasurement:
    """Launch ``run`` (fresh gloo processes, a few seconds) and read what it measured."""
    # torch comes with the launch, not with this module: a kernel that imports the runtime's
    # names holds no torch until a cell runs ranks (tests/architecture/test_layering.py)
    from placement_edu.runtime.axes.expert_layer import launch

    return measurement(run, launch(run))


def launch_expert_layer(run: ExpertRun, timeout_s: float = 60.0) -> ExpertMeasurement:
    """``run`` as a job of the runtime's launcher (its forkserver, timeouts and failure reports,
    ``launcher.launch``: what ``placement-edu run`` does), read as ``run_expert_layer`` reads
    it."""
    from placement_edu.runtime.processes.launcher import launch

    return measurement(run, launch([run], run.world, timeout_s, progress=False)[0])


def measurement(run: ExpertRun, ranks: list[dict[str, Any]]) -> ExpertMeasurement:
    """Each rank's result (by rank) set beside the core's prediction."""
    capacity = expert_capacity(run.spec())
    return ExpertMeasurement(
        run,
        tuple(tuple(tuple(k) for k in r["ledger"]) for r in ranks),  # type: ignore[misc]
        tuple(run.predicted()),
        max(r["deviation"] for r in ranks),
        sum(r["dropped"] for r in ranks),
        tuple(arrived(run, ranks, r) for r in range(run.world)),
        tuple(route_tokens(r["logits"], run.top_k, capacity) for r in ranks),
    )


def arrived(run: ExpertRun, ranks: list[dict[str, Any]], source: int) -> tuple[int, ...]:
    """The tokens rank ``source``'s dispatch brought to each expert g, as g's owner counted
    them: the owner is the rank of ``source``'s expert group holding g (E/e experts a rank, in
    order), and ``ranks[owner]["arrived"][g's index there][source's index in the group]``."""
    e, per_rank = run.ranks, run.experts // run.ranks
    group, index = divmod(source, e)
    return tuple(
        ranks[group * e + g // per_rank]["arrived"][g % per_rank][index] for g in range(run.experts)
    )
