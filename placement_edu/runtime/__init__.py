"""The runtime: execute a strategy on real torch.distributed processes, measure what each rank
held and sent, and compare every step with one process (SPEC §7).

Read in this order:
- ``toy.py``      the tiny models and synthetic data; ``reference.py`` the single-process run
- ``comm.py``     every collective, with a ledger; ``memtrack.py`` bytes held per state
- ``engine.py``   what every engine shares; then ``engines/``: one engine per placement, each
  collective where the placement puts it (``engines/__init__.py`` lists them in reading order and
  picks one by the strategy's placement, never by its name)
- ``config.py``, ``worker.py``, ``launcher.py``: what to run, each rank's code, starting the ranks;
  ``pool.py``: ranks kept warm between runs (a run in a tenth of a second instead of several)
- ``result.py``   measured against predicted, in the core's types (``Memory``, ``Schedule``)
- ``args.py``     the options of a run, shared by ``placement-edu run`` and torchrun (torch-free)

    >>> from placement_edu.runtime import RunConfig, run
    >>> print(run(RunConfig("zero3", world_size=4, steps=5)))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Where each public name lives. Imported on first use (PEP 562), so a torch-free module of the
#: runtime (``args.py``, ``verdict.py``) can be imported without importing torch.
_EXPORTS = {
    "RunConfig": "placement_edu.runtime.config",
    "RUNNABLE": "placement_edu.runtime.engines",
    "RunFailed": "placement_edu.runtime.launcher",
    "launch": "placement_edu.runtime.launcher",
    "run": "placement_edu.runtime.launcher",
    "run_many": "placement_edu.runtime.launcher",
    "RunResult": "placement_edu.runtime.result",
    "WorkerPool": "placement_edu.runtime.pool",
    "shared_pool": "placement_edu.runtime.pool",
}

__all__ = ["RUNNABLE", "RunConfig", "RunFailed", "RunResult", "WorkerPool", "launch", "run", "run_many",
           "shared_pool"]

if TYPE_CHECKING:
    from placement_edu.runtime.config import RunConfig
    from placement_edu.runtime.engines import RUNNABLE
    from placement_edu.runtime.launcher import RunFailed, launch, run, run_many
    from placement_edu.runtime.pool import WorkerPool, shared_pool
    from placement_edu.runtime.result import RunResult


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value                            # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
