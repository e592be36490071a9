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

from typing import TYPE_CHECKING

from placement_edu.lazy import exports

#: Where each public name lives (``__all__`` is its keys). Imported on first use (PEP 562), so a
#: torch-free module of the runtime (``args.py``, ``verdict.py``) can be imported without torch.
_EXPORTS = {
    "Adam": "placement_edu.runtime.adam",
    "RunConfig": "placement_edu.runtime.config",
    "memory_limit": "placement_edu.runtime.container",
    "ContextRun": "placement_edu.runtime.context_config",
    "ExpertRun": "placement_edu.runtime.expert_run",
    "run_expert_layer": "placement_edu.runtime.expert_measure",
    "RUNNABLE": "placement_edu.runtime.engines",
    **dict.fromkeys(["RunFailed", "launch", "run", "run_many"], "placement_edu.runtime.launcher"),
    **dict.fromkeys(["WorkerPool", "shared_pool"], "placement_edu.runtime.pool"),
    "RunResult": "placement_edu.runtime.result",
    "TinyTransformer": "placement_edu.runtime.toy",
    "run_torch_refs": "placement_edu.runtime.torch_ref_result",
    "applicable": "placement_edu.runtime.verdict",
    "time_line": "placement_edu.runtime.walltime",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from placement_edu.runtime.adam import Adam
    from placement_edu.runtime.config import RunConfig
    from placement_edu.runtime.container import memory_limit
    from placement_edu.runtime.context_config import ContextRun
    from placement_edu.runtime.expert_run import ExpertRun
    from placement_edu.runtime.expert_measure import run_expert_layer
    from placement_edu.runtime.engines import RUNNABLE
    from placement_edu.runtime.launcher import RunFailed, launch, run, run_many
    from placement_edu.runtime.pool import WorkerPool, shared_pool
    from placement_edu.runtime.result import RunResult
    from placement_edu.runtime.toy import TinyTransformer
    from placement_edu.runtime.torch_ref_result import run_torch_refs
    from placement_edu.runtime.verdict import applicable
    from placement_edu.runtime.walltime import time_line

__getattr__, __dir__ = exports(__name__, _EXPORTS, globals())
