"""A failure a run is told to suffer: how a run ends when a rank fails is shown by making one rank
fail on purpose, and tested that way (``tests/test_runtime_failures.py``, ``test_pool.py``,
``test_runtime_endings.py``). Pass one to ``launch`` or ``WorkerPool.run_many`` as ``failure``:

    >>> launch([RunConfig("zero3", 4)], 4, failure=RankFailure("kill", rank=2))   # doctest: +SKIP

The run then ends as any failed run does: the failed rank named first, every other rank ended,
``RunFailed`` raised, nothing left in TMPDIR.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from placement_edu.errors import PlacementError

#: What a rank can be told to do, and what the others then see.
KINDS = {
    "raise": "raises an exception (its traceback is the run's root cause)",
    "hang": "sleeps past the collective timeout (the others time out waiting for it)",
    "kill": "is killed by SIGKILL (no traceback, no error file)",
    "freeze": "is stopped by SIGSTOP (deaf to SIGTERM until killed)",
}
#: When: once the ranks have met (``init_process_group`` returned), or before, while the others
#: wait for it to meet them.
WHEN = ("met", "start")


@dataclass(frozen=True)
class RankFailure:
    """Rank ``rank`` fails as ``kind`` says (``KINDS``; None: no rank fails) at ``at`` (``WHEN``).
    ``pid_dir``: every rank first writes its process id there, a file named by its rank (to check
    that none outlives the run)."""

    kind: str | None = None
    rank: int = 1
    at: str = "met"
    pid_dir: str | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise PlacementError(f"failure kind {self.kind!r}: give one of {', '.join(KINDS)}")
        if self.at not in WHEN:
            raise PlacementError(f"failure at {self.at!r}: give one of {', '.join(WHEN)}")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise PlacementError(f"failure rank {self.rank!r}: give a whole number >= 0")

    def inject(self, when: str, timeout_s: float) -> None:
        """In a rank, at ``when`` (one of ``WHEN``): write this rank's process id, then fail as
        told if this is the rank and the moment. Nothing happens at the other moment."""
        if when != self.at:
            return
        rank = int(os.environ.get("RANK", "0"))
        if self.pid_dir:
            with open(os.path.join(self.pid_dir, str(rank)), "w") as f:
                f.write(str(os.getpid()))
        if rank != self.rank:
            return
        if self.kind == "raise":
            raise RuntimeError("injected failure: this rank raised on purpose")
        if self.kind == "hang":
            time.sleep(10 * timeout_s)  # the others wait in a collective and time out
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)  # dies at once: no traceback, no error file
        if self.kind == "freeze":
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen: deaf to SIGTERM until killed
