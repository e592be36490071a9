"""Which engine runs which strategy. One engine per idea; compositions reuse the engine of their
model-splitting axis, which handles the data axis too (dp×tp, zero3×tp: tp.py; dp×pp: pp.py);
hsdp (zero3 within data groups, replicated across replica groups) has its own: hsdp.py."""

from __future__ import annotations

from typing import Callable

from placement_edu.errors import PlacementError


def _registry() -> dict[str, Callable]:
    from placement_edu.runtime.dp import DataParallel
    from placement_edu.runtime.hsdp import HybridShard
    from placement_edu.runtime.offload import Zero2Offload
    from placement_edu.runtime.pp import Pipeline
    from placement_edu.runtime.tp import TensorParallel, TensorParallelZero3
    from placement_edu.runtime.zero1 import Zero1
    from placement_edu.runtime.zero2 import Zero2
    from placement_edu.runtime.zero3 import Zero3
    from placement_edu.runtime.zero3_offload import Zero3Offload
    return {
        "dp": DataParallel, "zero1": Zero1, "zero2": Zero2, "zero3": Zero3, "fsdp": Zero3,
        "fsdp_grad_op": lambda ctx: Zero3(ctx, reshard_after_forward=False),
        "zero2_offload": Zero2Offload, "zero3_offload": Zero3Offload, "tp": TensorParallel,
        "pp": Pipeline, "dp×tp": TensorParallel, "zero3×tp": TensorParallelZero3, "dp×pp": Pipeline,
        "hsdp": HybridShard,
    }


#: The strategies the runtime can execute (SPEC §7).
RUNNABLE = ("dp", "zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op", "zero2_offload", "zero3_offload",
            "tp", "pp", "dp×tp", "dp×pp", "zero3×tp", "hsdp")


def engine_for(name: str) -> Callable:
    registry = _registry()
    if name not in registry:
        raise PlacementError(f"the runtime has no engine for {name!r}; it runs: {', '.join(RUNNABLE)} "
                             "(use `placement-edu table` to derive the others)")
    return registry[name]
