"""Time: when does communication volume matter? (SPEC §9)

SPEC §4 counts bytes; this package turns them into seconds. Read its modules in order: ``hardware``,
``communication``, ``flops``, ``overlap``, ``step`` (``fit``: a calibration's least squares).

- ``Link`` and ``Hardware``: the numbers a time needs (achieved FLOP/s, device memory, and per mesh
  axis a latency α and a bandwidth W), with named presets in ``HARDWARE``, each citing its sources.
- ``ring_steps``       SPEC §9: how many latency-bound steps a ring collective takes
- ``op_time``          SPEC §9: α·steps + ring bytes / W for one operation of a derived schedule
- ``comm_time``        the seconds of a whole schedule, per phase (forward, backward, step)
- ``flops_per_token``  SPEC §9: 6Ψ per token (2 forward + 4 backward) + attention's 12·L·h·s,
                       plus what recomputation replays (``FLOP_CONVENTION`` names the count)
- ``compute_time``     those FLOPs at the device's achieved FLOP/s, per pass (at the
                       model's matmul shapes when the hardware has a ``gemm_curve``)
- ``on_critical_path`` SPEC §9: tensor parallelism's collectives, which compute waits for
- ``overlapped``       the collectives "bucketed" overlaps unit by unit, with their units
- ``exposed``          the overlap models, "none", "per_pass", "per_pass+tp" and "bucketed"
- ``step_time``        compute + exposed communication + the pipeline bubble, as a ``StepTime``
- ``compute_bound_tokens``  the tokens per device above which a strategy is compute-bound

Units: seconds, bytes, bytes per second, FLOP/s. Every time is a float (a time is a model, not an
exact count: the bytes it starts from stay exact in ``schedule``). Two views of the same step, side
by side (SPEC §9): *volume* (``Schedule.ring_bytes``, exact) and *time* (this module, a model).
"""

from placement_edu.timing.hardware import (
    Link,
    Hardware,
    NVLINK3,
    NVLINK4,
    IB_HDR,
    IB_NDR,
    PCIE4,
    PCIE5,
    PEAK_FLOPS,
    HBM_BANDWIDTH,
    HBM_80GB,
    HBM_141GB,
    HARDWARE,
    get_hardware,
)
from placement_edu.timing.communication import (
    PASSES,
    ring_steps,
    op_time,
    op_link,
    on_critical_path,
    comm_time,
    startup_time,
)
from placement_edu.timing.flops import (
    FLOP_CONVENTION,
    attention_flops_per_token,
    flops_per_token,
    replayed_share,
    palm_flops_per_token,
    model_flops_per_token,
    megatron_layer_matmul_weights,
    megatron_attention_forward_per_token,
    megatron_flops_per_token,
    megatron_hardware_flops_per_token,
    logit_flops_per_token,
    compute_time,
    EAGER_ATTENTION_BYTES,
    SOFTMAX_BYTES,
    eager_attention_bytes_per_token,
)
from placement_edu.timing.overlap import (
    OVERLAPS,
    BUCKET_BYTES,
    overlaps_by_unit,
    Overlapped,
    units_on_stage,
    overlapped,
    bucketed_exposed,
    bucketed_by_pass,
    exposed,
    bubble_time,
)
from placement_edu.timing.step import (
    StepTime,
    tokens_of,
    step_time,
    combine,
    compute_bound_tokens,
    tp_compute_bound,
)

#: The public names (a notebook imports only these).
__all__ = [
    "HARDWARE",
    "HBM_80GB",
    "HBM_141GB",
    "PEAK_FLOPS",
    "HBM_BANDWIDTH",
    "Hardware",
    "IB_HDR",
    "IB_NDR",
    "Link",
    "NVLINK3",
    "NVLINK4",
    "OVERLAPS",
    "PASSES",
    "BUCKET_BYTES",
    "Overlapped",
    "bucketed_by_pass",
    "bucketed_exposed",
    "overlapped",
    "overlaps_by_unit",
    "units_on_stage",
    "PCIE4",
    "PCIE5",
    "StepTime",
    "bubble_time",
    "combine",
    "comm_time",
    "compute_bound_tokens",
    "compute_time",
    "FLOP_CONVENTION",
    "palm_flops_per_token",
    "megatron_layer_matmul_weights",
    "megatron_attention_forward_per_token",
    "megatron_hardware_flops_per_token",
    "attention_flops_per_token",
    "exposed",
    "flops_per_token",
    "megatron_flops_per_token",
    "model_flops_per_token",
    "on_critical_path",
    "get_hardware",
    "op_link",
    "op_time",
    "ring_steps",
    "startup_time",
    "step_time",
    "tokens_of",
    "tp_compute_bound",
]
