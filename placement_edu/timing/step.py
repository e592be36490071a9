"""One optimizer step's time (SPEC §9): compute + exposed communication + the pipeline bubble.

- ``step_time``        a ``StepTime`` for a strategy, model, mesh, precision and hardware
- ``combine``          a ``StepTime`` from per-pass compute and communication seconds
- ``compute_bound_tokens``  the tokens per device above which a strategy is compute-bound
- ``tp_compute_bound`` tensor parallelism's width condition
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Mapping, Sequence

from placement_edu.errors import PlacementError, expect
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import (
    Model,
    ModelOrPsi,
    TransformerSpec,
    as_model,
    tensor_divides_heads,
)
from placement_edu.precision import Precision, get_precision
from placement_edu.schedule import Schedule, derive_schedule, model_axis_degree, ring_bytes
from placement_edu.strategies import Strategy, get_strategy
from placement_edu.timing.communication import PASSES, comm_time
from placement_edu.timing.flops import compute_time, flops_per_token
from placement_edu.timing.hardware import Hardware, get_hardware
from placement_edu.timing.overlap import (
    BUCKETED,
    OVERLAPS,
    Overlap,
    Overlapped,
    bubble_time,
    exposed,
    overlapped,
)
from placement_edu.shown import Shown

if TYPE_CHECKING:
    from placement_edu.setting import Setting


@dataclass(frozen=True)
class StepTime(Shown):
    """One optimizer step on one device, in seconds.

    ``compute_s``: FLOPs ÷ achieved FLOP/s (forward + backward). ``comm_s``: every collective's
    α·steps + bytes/W, hidden or not. ``exposed_comm_s``: the part of comm_s not hidden under
    compute by the ``overlap`` model. ``bubble_s``: pipeline idle time. ``total_s`` = compute_s +
    exposed_comm_s + bubble_s. ``by_pass``: {pass: (compute, comm)} seconds."""

    compute_s: float
    comm_s: float
    exposed_comm_s: float
    bubble_s: float
    total_s: float
    overlap: str
    by_pass: tuple[tuple[str, float, float], ...] = ()

    def __str__(self) -> str:
        passes = [
            f"  {name}: compute {compute:.4g} s, communication {comm:.4g} s"
            for name, compute, comm in self.by_pass
        ]
        return "\n".join(
            [
                f"step {self.total_s:.4g} s = compute {self.compute_s:.4g} s + exposed "
                f"communication {self.exposed_comm_s:.4g} s + pipeline bubble "
                f"{self.bubble_s:.4g} s",
                f"  communication {self.comm_s:.4g} s, of it exposed under overlap "
                f"{self.overlap}: {self.exposed_comm_s:.4g} s",
                *passes,
            ]
        )


def tokens_of(model: Model, strategy: Strategy, mesh: Mesh) -> Fraction | None:
    """Tokens per device a transformer's shape fixes: m micro-batches of b sequences of s tokens on
    each data replica, shared by its t·p devices (m·b·s/(t·p)); None for a model without a
    sequence."""
    if not isinstance(model, TransformerSpec):
        return None
    share = model_axis_degree(strategy, mesh, "tensor") * model_axis_degree(
        strategy, mesh, "pipeline"
    )
    return Fraction(strategy.micro_batches * model.micro_batch * model.seq, share)


def step_time(
    strategy: str | Strategy | Setting,
    model: ModelOrPsi | None = None,
    mesh: Mesh | str | None = None,
    precision: str | Precision = "mixed_adam",
    hw: str | Hardware = "h100-nvlink-ib",
    tokens_per_device: float | Fraction | None = None,
    overlap: str = "none",
    micro_batches: int | None = None,
    schedule: Schedule | None = None,
) -> StepTime:
    """Seconds of one optimizer step on rank 0 of ``mesh`` (SPEC §9).

    ``tokens_per_device``: the global batch's tokens ÷ the number of devices (the JAX scaling
    book's B/N). For a TransformerSpec its shape fixes them (``tokens_of``); give None to use
    that, or the same number. ``micro_batches``: m (default: the strategy's). ``schedule``: an
    already derived schedule for exactly these arguments (the planner reuses one). ``strategy``
    may be a ``Setting`` (``setting.resolve``); the other forms are resolved into one here, once."""
    from placement_edu.setting import Setting, resolve  # (the door imports timing's presets)

    door = (
        strategy if isinstance(strategy, Setting) else resolve(strategy, model, mesh, precision, hw)
    )
    expect(
        door.strategy is not None and door.model is not None and door.mesh is not None,
        "step_time needs a strategy, a model and a mesh (e.g. data=8)",
    )
    assert door.strategy is not None and door.model is not None and door.mesh is not None
    strategy, model, mesh = door.strategy, door.model, door.mesh
    precision, hw = door.precision, door.hardware
    tensor_divides_heads(model, model_axis_degree(strategy, mesh, "tensor"))
    if micro_batches is not None:
        strategy = strategy.with_(micro_batches=micro_batches)
    fixed = tokens_of(model, strategy, mesh)
    if tokens_per_device is None:
        if fixed is None:
            raise PlacementError(
                "give tokens_per_device: an abstract model has no sequence to count tokens from"
            )
        tokens_per_device = fixed
    elif fixed is not None and isinstance(model, TransformerSpec):  # its shape fixes the tokens
        share = model_axis_degree(strategy, mesh, "tensor") * model_axis_degree(
            strategy, mesh, "pipeline"
        )
        expect(
            math.isclose(float(tokens_per_device), float(fixed), rel_tol=1e-12),
            "this transformer's shape fixes the tokens per device: m·b·s/(t·p) = "
            f"{strategy.micro_batches}·{model.micro_batch}·{model.seq}/{share} = {float(fixed):g}, "
            f"got tokens_per_device={tokens_per_device!r}; change micro_batch or micro_batches, or "
            "leave tokens_per_device out",
        )
    schedule = schedule or derive_schedule(strategy, model, mesh, precision)
    recompute = model.recompute
    tensor = model_axis_degree(strategy, mesh, "tensor")
    paced = 1 if strategy.balanced_stages else model_axis_degree(strategy, mesh, "pipeline")
    compute = compute_time(
        model, tokens_per_device, hw, recompute, tensor, paced, precision.float8_recipe
    )
    comm = comm_time(schedule, hw, mesh)
    streams = overlapped(strategy, model, mesh, precision, hw) if overlap in BUCKETED else ()
    return combine(
        compute,
        comm,
        overlap,
        model_axis_degree(strategy, mesh, "pipeline"),
        strategy.micro_batches,
        comm_time(schedule, hw, mesh, critical=True),
        streams,
        strategy.pipeline_schedule,
        strategy.virtual_stages,
    )


def combine(
    compute: Mapping[str, float],
    comm: Mapping[str, float],
    overlap: str,
    stages: int = 1,
    micro_batches: int = 1,
    critical: Mapping[str, float] | None = None,
    streams: Sequence[Overlapped] = (),
    pipeline_schedule: str = "1f1b",
    virtual_stages: int = 1,
) -> StepTime:
    """A StepTime from per-pass compute and comm seconds: compute + exposed comm + bubble.
    ``critical``: the per-pass comm seconds ``on_critical_path``; ``streams``: what "bucketed"
    overlaps unit by unit (``exposed``); ``pipeline_schedule``, ``virtual_stages``: the bubble's
    (``bubble_time``)."""
    compute_s, comm_s = sum(compute.values()), sum(comm.values())
    hidden_or_not = exposed(compute, comm, overlap, critical, streams, micro_batches)
    bubble = bubble_time(compute_s, stages, micro_batches, pipeline_schedule, virtual_stages)
    passes = tuple((p, compute.get(p, 0.0), comm.get(p, 0.0)) for p in PASSES)
    return StepTime(
        compute_s,
        comm_s,
        hidden_or_not,
        bubble,
        compute_s + hidden_or_not + bubble,
        overlap,
        passes,
    )


# --- the compute-bound threshold ---------------------------------------------------------------
def compute_bound_tokens(
    strategy: str | Strategy,
    model: ModelOrPsi,
    mesh: Mesh | str,
    precision: str | Precision,
    hw: str | Hardware,
    overlap: str = "none",
) -> float:
    """Tokens per device above which ``strategy`` is compute-bound (SPEC §9), for a strategy
    whose communication does not grow with the tokens (dp, zero1/2/3 on an abstract model: the
    bytes are Ψ's, whatever the batch). Returns math.inf when no token count is enough.

    "none": compute-bound when compute time >= communication time (more than half the step is
    compute): 6Ψ·T/F >= comm, T* = comm·F/(6Ψ). "per_pass": when every pass hides its own
    collectives, 2Ψ·T/F >= forward comm and 4Ψ·T/F >= backward comm; the step phase has no
    compute to hide under, so under this model zero1/zero2's parameter all-gather stays exposed
    at any T -- a property of the overlap model, not of ZeRO. "bucketed": the same, with the
    step's all-gather moved into the next forward (Megatron-LM's ``--overlap-param-gather``),
    where it hides; compute-bound then means only the first gathered unit and the last reduced
    bucket stay exposed.

    With α = 0 and N large: dp 2/3·F/W (none), F/W (per_pass); zero3 F/W under both -- under
    per-pass overlap ZeRO-3's 1.5× volume costs nothing more than dp's. Tensor parallelism's
    traffic grows with the tokens as its compute does: see ``tp_compute_bound``."""
    strategy, model, mesh = get_strategy(strategy), as_model(model), as_mesh(mesh)
    hw = get_hardware(hw)
    expect(
        tokens_of(model, strategy, mesh) is None and model.boundary_elements == 0,
        "compute_bound_tokens is for communication that does not grow with tokens (dp, zero1/2/3 "
        "on an abstract ModelSpec); for tensor parallelism use tp_compute_bound",
    )
    comm = comm_time(derive_schedule(strategy, model, mesh, get_precision(precision)), hw, mesh)
    per_token = {p: f / hw.flops for p, f in flops_per_token(model.psi, model.recompute).items()}
    if overlap == Overlap.NONE:
        return sum(comm.values()) / sum(per_token.values())
    expect(overlap in OVERLAPS, f"unknown overlap model {overlap!r}; known: {', '.join(OVERLAPS)}")
    if overlap in BUCKETED:  # the step's all-gather moves into forward
        streams = overlapped(strategy, model, mesh, precision, hw)
        moved = sum(s.seconds for s in streams if s.phase != s.hides_under)
        comm = {**comm, "forward": comm["forward"] + moved}
    needed = [comm[p] / per_token[p] for p in ("forward", "backward") if comm[p] > 0]
    return max(needed, default=0.0)


def tp_compute_bound(model: TransformerSpec, tensor: int, hw: str | Hardware) -> dict[str, float]:
    """Tensor parallelism (Megatron, degree t) per layer and micro-batch, bandwidth terms only:
    forward compute 2·(12h²)·bs/t FLOPs against two all-reduces of b·s·h 16-bit activations,
    2·2(t-1)/t·2bsh bytes. Both grow with the tokens b·s, so tokens cannot make TP compute-bound:
    the condition is on the width, h >= (t-1)/3 · F/W (the JAX scaling book's model-parallel
    rule). Compute-bound is not hidden: the next matmul waits for these all-reduces
    (``on_critical_path``), so only an implementation that overlaps them ("per_pass+tp") hides
    them, and only when h is this wide. Returns {"h_needed": (t-1)/3·F/W, "h": h, "ratio":
    comm/compute}."""
    hw = get_hardware(hw)
    t, h = tensor, model.hidden
    w = hw.axis_link(Mesh.of(tensor=t), "tensor").bandwidth  # t consecutive ranks
    # per token b·s: two all-reduces of h 16-bit values against 2·(12h²)/t FLOPs
    comm_s = 2 * float(ring_bytes("all_reduce", t, 2 * h)) / w
    ratio = comm_s / (24 * h * h / t / hw.flops)
    return {"h_needed": (t - 1) / 3 * hw.flops / w, "h": float(h), "ratio": ratio}
