"""The per-step communication schedule, derived from the placement alone (SPEC §4).

Each entry is one operation one device performs, in execution order: a collective (all-reduce,
reduce-scatter, all-gather, send, recv, broadcast), a host transfer of offloaded state (h2d, d2h),
or a local step that matters for correctness (scale, optimizer_step).

One file per concern, read in this order:

- ``costs.py``    SPEC §4's cost table (one table, read by the exact scalar path, the numpy sweep,
                  the time model and the runtime's ledger), the kinds of op, and ``ring_bytes``
- ``ops.py``      the ``Op``, ``Repeat`` and ``Schedule`` values, and a schedule's totals
- ``../axes.py``  what a placement leaves open on each axis, and ``validate``
- ``pipeline.py`` GPipe, 1F1B, interleaved and zero-bubble orders, the kinds of stage, the
                  bubble, the timeline
- ``rules.py``    one small function per rule, each keyed on the modes along one axis, never on a
                  strategy's name ("where does ZeRO-2 reduce-scatter?": ``reduce_partial_grads``)
- ``derive.py``   ``derive_schedule``, which calls the rules in execution order

Everything is importable from ``placement_edu.schedule`` as before.
"""

from __future__ import annotations

from placement_edu.schedule.costs import (
    OpKind,
    OpCost,
    OP_COSTS,
    RING_FACTOR,
    ZERO_FACTOR,
    COLLECTIVES,
    HOST_TRANSFERS,
    LINK_OPS,
    REDUCTIONS,
    PARAM_SYNCS,
    BROADCASTS,
    LIBRARIES,
    ring_factor,
    ring_bytes,
    sent_bytes,
)
from placement_edu.schedule.ops import (
    Op,
    MAX_LISTED_OPS,
    Repeat,
    Schedule,
    held,
)
from placement_edu.axes import (
    split_axes,
    model_axis_degree,
    layers_on_stage,
    validate,
)
from placement_edu.schedule.pipeline import (
    pipeline_runs,
    stage_kinds,
    pipeline_order,
    pipeline_bubble,
    pipeline_timeline,
    bubble_divisor,
    looped_warmup,
    looped_order,
    looped_in_flight,
    looped_timeline,
)
from placement_edu.schedule.rules import (
    Device,
    startup_broadcasts,
    gather_before_use,
    grad_reduction,
    reduce_partial_grads,
    scale_once,
    offload_grad_slice,
    sequence_parallel_norms,
    owner_update_sync,
    reduces_per_micro_batch,
    tensor_parallel_collectives,
    pipeline_boundary,
)
from placement_edu.schedule.derive import (
    passes_held_once,
    derive_schedule,
)

__all__ = [
    "OpKind",
    "OpCost",
    "OP_COSTS",
    "RING_FACTOR",
    "ZERO_FACTOR",
    "COLLECTIVES",
    "HOST_TRANSFERS",
    "LINK_OPS",
    "REDUCTIONS",
    "PARAM_SYNCS",
    "BROADCASTS",
    "LIBRARIES",
    "ring_factor",
    "ring_bytes",
    "sent_bytes",
    "Op",
    "MAX_LISTED_OPS",
    "Repeat",
    "Schedule",
    "held",
    "split_axes",
    "model_axis_degree",
    "layers_on_stage",
    "validate",
    "pipeline_runs",
    "stage_kinds",
    "pipeline_order",
    "pipeline_bubble",
    "pipeline_timeline",
    "bubble_divisor",
    "looped_warmup",
    "looped_order",
    "looped_in_flight",
    "looped_timeline",
    "Device",
    "startup_broadcasts",
    "gather_before_use",
    "grad_reduction",
    "reduce_partial_grads",
    "scale_once",
    "offload_grad_slice",
    "sequence_parallel_norms",
    "owner_update_sync",
    "reduces_per_micro_batch",
    "tensor_parallel_collectives",
    "pipeline_boundary",
    "passes_held_once",
    "derive_schedule",
]
