"""The runtime: execute a strategy on real torch.distributed processes, measure what each rank
held and sent, and compare every step with one process (SPEC §7).

Read in this order:
- ``toy.py``      the tiny models and synthetic data; ``reference.py`` the single-process run
- ``comm.py``     every collective, with a ledger; ``memtrack.py`` bytes held per state
- ``dp.py``, ``zero1.py``, ``zero2.py``, ``zero3.py``, ``offload.py``, ``tp.py``, ``pp.py``:
  one engine per strategy, each collective where the placement puts it; then two variants of
  zero3: ``zero3_offload.py`` (every slice on the host) and ``hsdp.py`` (replicated across groups)
- ``launcher.py``   starting the ranks; ``result.py`` measured against predicted

    >>> from placement_edu.runtime import RunConfig, run
    >>> print(run(RunConfig("zero3", world_size=4, steps=5)))
"""

from placement_edu.runtime.config import RunConfig
from placement_edu.runtime.engines import RUNNABLE
from placement_edu.runtime.launcher import RunFailed, launch, run, run_many
from placement_edu.runtime.result import RunResult

__all__ = ["RUNNABLE", "RunConfig", "RunFailed", "RunResult", "launch", "run", "run_many"]
