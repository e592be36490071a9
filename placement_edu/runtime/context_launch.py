"""Launch the context-parallel attention layer (``context_attention.py``) with the runtime's
launcher, and print what it measured: ``python -m placement_edu.runtime.context_launch``."""

from __future__ import annotations

from typing import Any

from placement_edu.runtime.context_config import ContextRun
from placement_edu.runtime.launcher import launch as launch_jobs
from placement_edu.schedule import ring_bytes


def launch(run: ContextRun, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Run ``run`` on ``run.ranks`` fresh gloo processes with the runtime's launcher (its
    forkserver, timeouts and failure reports, ``launcher.launch``); each rank's result, by
    rank."""
    return launch_jobs([run], run.ranks, timeout_s, progress=False)[0]


def main() -> None:
    for attention in ("ring", "ulysses"):
        for ranks in (2, 4):
            run = ContextRun(attention, ranks)
            measured = launch(run)
            predicted = run.predicted()
            same = all(r["ledger"] == predicted for r in measured)
            sent = sum(ring_bytes(op, n, size) for op, _, size, n in predicted)
            print(
                f"{attention:8s} c = {ranks}: {len(predicted)} context ops per rank, {sent} B "
                f"sent per rank (ring bytes); measured = predicted on every rank: {same}; "
                f"max |deviation| from one process {max(r['deviation'] for r in measured):.3g}"
            )


if __name__ == "__main__":
    main()
