"""One launch of the toy MoE layer (``expert_layer``), read as the course reads a measurement:
the ledger against the core's ops, and the deviation from one process.

    >>> from placement_edu.runtime import ExpertRun, run_expert_layer
    >>> print(run_expert_layer(ExpertRun(ranks=2, top_k=2)))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from placement_edu.runtime.expert_run import ExpertRun, Key, measured_is_predicted


@dataclass(frozen=True)
class ExpertMeasurement:
    """``run`` launched on its d·e gloo ranks: each rank's ledger (``measured``), the core's
    prediction for a rank (``predicted``), the largest deviation from one process over outputs
    and gradients, and the routed tokens the capacity dropped (alike in the reference)."""

    run: ExpertRun
    measured: tuple[tuple[Key, ...], ...]
    predicted: tuple[Key, ...]
    deviation: float
    dropped: int

    @property
    def matches(self) -> bool:
        """Measured = predicted on every rank, entry by entry (``measured_is_predicted``)."""
        return all(measured_is_predicted(list(m), list(self.predicted)) for m in self.measured)

    @property
    def all_to_alls(self) -> tuple[Key, ...]:
        """The predicted all-to-alls of one rank, in order."""
        return tuple(k for k in self.predicted if k[1] == "all_to_all")

    def __str__(self) -> str:
        run, a2a = self.run, self.all_to_alls
        fault = (
            " with drop-routed-tokens"
            if run.drop
            else " with skip-expert-grad-reduce"
            if run.skip_expert_reduce
            else ""
        )
        return (
            f"data={run.data},expert={run.ranks}, top-{run.top_k}{fault}: {len(a2a)} all-to-alls "
            f"per rank of {a2a[0][5]:,} B ({a2a[0][6]:,} B sent); measured = predicted on every "
            f"rank: {self.matches}; max |deviation| from one process {self.deviation:.3g}"
        )


def run_expert_layer(run: ExpertRun) -> ExpertMeasurement:
    """Launch ``run`` (fresh gloo processes, a few seconds) and read what it measured."""
    # torch comes with the launch, not with this module: a kernel that imports the runtime's
    # names holds no torch until a cell runs ranks (tests/test_layering.py)
    from placement_edu.runtime.expert_layer import launch

    ranks: list[dict[str, Any]] = launch(run)
    return ExpertMeasurement(
        run,
        tuple(tuple(r["ledger"]) for r in ranks),
        tuple(run.predicted()),
        max(r["deviation"] for r in ranks),
        sum(r["dropped"] for r in ranks),
    )
