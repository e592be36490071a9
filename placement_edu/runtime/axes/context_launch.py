"""Launch the context-parallel attention layer (``context_attention.py``) with the runtime's
launcher, and print what it measured: ``python -m placement_edu.runtime.axes.context_launch``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from placement_edu.runtime.axes.context_config import ContextRun, Key
from placement_edu.runtime.processes.launcher import launch as launch_jobs
from placement_edu.schedule import ring_bytes


def launch(run: ContextRun, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Run ``run`` on ``run.ranks`` fresh gloo processes with the runtime's launcher (its
    forkserver, timeouts and failure reports, ``launcher.launch``); each rank's result, by
    rank."""
    return launch_jobs([run], run.ranks, timeout_s, progress=False)[0]


@dataclass(frozen=True)
class ContextResult:
    """What a context-parallel run measured, beside what the core predicted: each rank's ledger
    of context ops (op, pass, payload bytes, group) and its largest deviation from one process."""

    run: ContextRun
    predicted: tuple[Key, ...]
    measured: tuple[tuple[Key, ...], ...]
    deviations: tuple[float, ...]

    @property
    def matches(self) -> bool:
        """Measured = predicted, entry by entry, on every rank."""
        return all(list(ledger) == list(self.predicted) for ledger in self.measured)

    @property
    def ring_bytes(self) -> int:
        """Bytes one rank sends per step on the context axis (SPEC §4's ring bytes)."""
        return int(sum(ring_bytes(op, n, size) for op, _, size, n in self.predicted))

    def to_dict(self) -> dict[str, Any]:
        return {
            "attention": self.run.attention,
            "ranks": self.run.ranks,
            "predicted": [list(k) for k in self.predicted],
            "measured_equals_predicted": self.matches,
            "ring_bytes_per_rank": self.ring_bytes,
            "max_deviation": max(self.deviations),
        }

    def __str__(self) -> str:
        r = self.run
        first = next(
            (
                f"rank {rank}: {list(ledger)[:3]}... vs {list(self.predicted)[:3]}..."
                for rank, ledger in enumerate(self.measured)
                if list(ledger) != list(self.predicted)
            ),
            "",
        )
        counts: dict[tuple[str, str], int] = {}
        for op, phase, _, _ in self.predicted:
            counts[(phase, op)] = counts.get((phase, op), 0) + 1
        return "\n".join(
            [
                f"{r.attention} attention on context={r.ranks}: one causal attention layer, "
                f"b={r.batch} s={r.seq} h={r.hidden} a={r.heads}, float64, gloo",
                "per rank: "
                + ", ".join(f"{phase} {op} ×{n}" for (phase, op), n in counts.items())
                + f"; {self.ring_bytes} B sent (ring bytes)",
                "measured = predicted on every rank: "
                + ("yes" if self.matches else f"NO, first difference {first}"),
                f"max |deviation| from one process (output, input and weight gradients): "
                f"{max(self.deviations):.3g}",
            ]
        )


def run_context(run: ContextRun, timeout_s: float = 60.0) -> ContextResult:
    """``launch`` ``run`` and set what it measured beside the core's prediction."""
    ranks = launch(run, timeout_s)
    return ContextResult(
        run,
        tuple(run.predicted()),
        tuple(tuple(tuple(k) for k in r["ledger"]) for r in ranks),  # type: ignore[misc]
        tuple(r["deviation"] for r in ranks),
    )


def main() -> None:
    for attention in ("ring", "ulysses"):
        for ranks in (2, 4):
            print(run_context(ContextRun(attention, ranks)), end="\n\n")


if __name__ == "__main__":
    main()
