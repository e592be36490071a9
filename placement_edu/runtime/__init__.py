"""The runtime: execute a strategy on real torch.distributed processes, measure what each rank
held and sent, and compare every step with one process (SPEC §7).

Here, what a run is and what it gives back: ``config.py`` (``RunConfig``: what to run), ``args.py``
(its options, shared by ``placement-edu run`` and torchrun; torch-free), ``worker.py`` (each rank's
code: ``torchrun -m placement_edu.runtime.worker``), ``result.py`` (measured against predicted, in
the core's types) and ``verdict.py`` (which condition a fault breaks). The rest, in rooms:

- ``engines/``      one engine per placement (``engines/__init__.py`` lists them in reading order
  and picks one by the strategy's placement, never by its name), what they share (``engine.py``,
  ``flat.py``, ``adam.py``), the toy models (``toy.py``) and the single-process ``reference.py``
- ``measurement/``  the ledgers (``comm.py``: every collective; ``memtrack.py``: bytes held per
  state) and PyTorch's own accounting: ``torch_reference.py``, ``peak_tracker.py``,
  ``activation_profile.py``, ``cuda_peak.py``, the reference models
- ``processes/``    starting the ranks: ``launcher.py``, ``agent.py``, ``forkserver.py``,
  ``pool.py`` (ranks kept warm between runs), ``rundir.py``, ``progress.py``, ``container.py``
- ``axes/``         the tensor, context and expert axes run for real
- ``calibration/``  timing this machine, and a run's time against the predicted (``walltime.py``)

    >>> from placement_edu.runtime import RunConfig, run
    >>> print(run(RunConfig("zero3", world_size=4, steps=5)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from placement_edu.lazy import exports

#: Where each public name lives (``__all__`` is its keys). Imported on first use (PEP 562), so a
#: torch-free module of the runtime (``args.py``, ``verdict.py``) can be imported without torch.
_EXPORTS = {
    "Adam": "placement_edu.runtime.engines.adam",
    "RunConfig": "placement_edu.runtime.config",
    "memory_limit": "placement_edu.runtime.processes.container",
    "ContextRun": "placement_edu.runtime.axes.context_config",
    "ExpertRun": "placement_edu.runtime.axes.expert_run",
    "run_expert_layer": "placement_edu.runtime.axes.expert_measure",
    "RUNNABLE": "placement_edu.runtime.engines",
    **dict.fromkeys(
        ["RunFailed", "launch", "run", "run_many"], "placement_edu.runtime.processes.launcher"
    ),
    **dict.fromkeys(["WorkerPool", "shared_pool"], "placement_edu.runtime.processes.pool"),
    "RunResult": "placement_edu.runtime.result",
    "TinyTransformer": "placement_edu.runtime.engines.toy",
    "run_torch_refs": "placement_edu.runtime.measurement.torch_ref_result",
    "applicable": "placement_edu.runtime.verdict",
    "time_line": "placement_edu.runtime.calibration.walltime",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from placement_edu.runtime.engines.adam import Adam
    from placement_edu.runtime.config import RunConfig
    from placement_edu.runtime.processes.container import memory_limit
    from placement_edu.runtime.axes.context_config import ContextRun
    from placement_edu.runtime.axes.expert_run import ExpertRun
    from placement_edu.runtime.axes.expert_measure import run_expert_layer
    from placement_edu.runtime.engines import RUNNABLE
    from placement_edu.runtime.processes.launcher import RunFailed, launch, run, run_many
    from placement_edu.runtime.processes.pool import WorkerPool, shared_pool
    from placement_edu.runtime.result import RunResult
    from placement_edu.runtime.engines.toy import TinyTransformer
    from placement_edu.runtime.measurement.torch_ref_result import run_torch_refs
    from placement_edu.runtime.verdict import applicable
    from placement_edu.runtime.calibration.walltime import time_line

__getattr__, __dir__ = exports(__name__, _EXPORTS, globals())
