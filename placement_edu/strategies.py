"""Named strategies, as data: a name, a placement, and the few schedule choices a placement leaves
open (SPEC §3, §4). Nothing downstream looks at the name: a user-defined strategy with the same
placement gets the same memory and the same schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from placement_edu.errors import MAX_MICRO_BATCHES, PlacementError, expect, one_of, positive_int
from placement_edu.errors import show_limit
from placement_edu.mesh import Mesh
from placement_edu.names import Word, by_name
from placement_edu.names import spelled
from placement_edu.placement import AXES, DEFAULT_SHARD_DIMS, MODEL_STATES, Placement, known_axes

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["COMPOSITIONS", "STRATEGIES", "Strategy", "get_strategy"]


class PipelineSchedule(Word):
    """The pipeline schedules (a ``Word``: each equals, hashes and prints as its name)."""

    ONE_F_ONE_B = "1f1b"
    GPIPE = "gpipe"
    INTERLEAVED = "interleaved"
    ZERO_BUBBLE = "zero_bubble"


#: The schedules of one model chunk per rank, which the gloo engine runs.
PIPELINE_SCHEDULES = (PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.GPIPE)
#: Schedules priced and derived past 1F1B (``schedule.looped_order``), not run by the gloo engine:
#: "interleaved" (Narayanan et al. 2021 §2.2.2; torch's ``ScheduleInterleaved1F1B``) runs
#: ``virtual_stages`` model chunks per rank; "zero_bubble" (Qi et al. 2024's ZB-H1; torch's
#: ``ScheduleInterleavedZeroBubble`` on one chunk per rank) splits backward into I and W passes.
LOOPED_SCHEDULES = (PipelineSchedule.INTERLEAVED, PipelineSchedule.ZERO_BUBBLE)
#: How attention reaches the other chunks of the sequence on a context axis (``schedule.context``).
CONTEXT_ATTENTIONS = ("ring", "ulysses")
#: How owners' updated slices of replicated parameters get back to every replica (SPEC §4 rule 1):
#: "scatter_gather": reduce-scatter the gradient, all-gather the parameters (ZeRO §7: 2Ψ);
#: "allreduce_broadcast": all-reduce the gradient, each owner broadcasts its slice (PyTorch's
#: ZeroRedundancyOptimizer under DDP: 3Ψ).
OWNER_UPDATES = ("scatter_gather", "allreduce_broadcast")


@dataclass(frozen=True)
class Strategy:
    """A placement plus schedule choices.

    ``reshard_after_forward``: an SG parameter is freed after forward and gathered again before
    backward (FSDP FULL_SHARD, ZeRO-3); False keeps it through backward (FSDP SHARD_GRAD_OP).
    ``micro_batches``: m micro-batches per optimizer step (pipeline or gradient accumulation).
    ``pipeline_schedule``: "1f1b" or "gpipe" when a pipeline axis is present, or one of
    ``LOOPED_SCHEDULES``; ``virtual_stages``: v, the model chunks per pipeline rank (v >= 2 for
    "interleaved", 1 otherwise).
    ``sequence_parallel``: the tensor axis also splits each sequence (Megatron sequence
    parallelism), so parameters replicated across tensor ranks (norms) get partial gradients there.
    ``owner_update``: for replicated params with sliced optimizer state, "scatter_gather" (ZeRO
    §7, 2Ψ) or "allreduce_broadcast" (PyTorch ``ZeroRedundancyOptimizer``: all-reduce, then each
    owner broadcasts its updated slice, 3Ψ). See OWNER_UPDATES.
    ``shard_dims``: which tensor dimension each axis shards (SPEC §6 rule 1), e.g.
    ``{"tensor": "hidden"}``; axes not named use DEFAULT_SHARD_DIMS (data: flat, tensor: hidden,
    pipeline: layer). Two axes may name the same dimension (nested sharding, as FSDP2 + TP does);
    a tuple of two dimensions for one axis is that axis splitting both, which rule 1 forbids.
    ``mesh_axes``: the axes of the mesh the strategy is meant for, when they are more than the
    axes its placement splits: dp×tp keeps everything R on data, hsdp everything R on replica.
    ``context_attention``: how attention reaches the other sequence chunks on a context axis,
    "ring" (K/V passed round the ring) or "ulysses" (all-to-alls, heads <-> sequence); see
    ``schedule.context``.
    ``balanced_stages``: how a pipeline splits a transformer. False (Megatron-LM's default): L/p
    layers a stage, the logit layer on the last, which sets the pipeline's pace
    (``timing.compute_time``). True: the split counts the logit layer as work, so every stage does
    1/p of the FLOPs (Megatron-LM's --account-for-loss-in-pipeline-split, DeepSpeed's
    --pp-partition-method type:transformer|embedding, Llama 3's one layer fewer on the last stage).
    """

    name: str
    placement: Placement
    reshard_after_forward: bool = True
    micro_batches: int = 1
    pipeline_schedule: str = PipelineSchedule.ONE_F_ONE_B
    summary: str = ""
    sequence_parallel: bool = False
    shard_dims: tuple[tuple[str, str | tuple[str, ...]], ...] = ()
    owner_update: str = "scatter_gather"
    mesh_axes: tuple[str, ...] = ()
    virtual_stages: int = 1
    context_attention: str = "ring"
    balanced_stages: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PlacementError(f"a strategy's name is non-empty text, got {self.name!r}")
        if not isinstance(self.placement, Placement):
            raise PlacementError(
                f"strategy {self.name!r}: placement must be a Placement, e.g. "
                f'Placement(params="SG", grads="S", optimizer="S"), got '
                f"{self.placement!r} of type {type(self.placement).__name__}"
            )
        object.__setattr__(self, "micro_batches", positive_int("micro_batches", self.micro_batches))
        expect(
            self.micro_batches <= MAX_MICRO_BATCHES,
            f"micro_batches must be at most {show_limit(MAX_MICRO_BATCHES)}, far beyond any real "
            f"step, got {self.micro_batches:,}",
        )
        one_of("owner_update", self.owner_update, OWNER_UPDATES)
        one_of("pipeline schedule", self.pipeline_schedule, PIPELINE_SCHEDULES + LOOPED_SCHEDULES)
        v = positive_int("virtual_stages", self.virtual_stages)
        expect(
            (v >= 2) == (self.pipeline_schedule == PipelineSchedule.INTERLEAVED),
            f"virtual_stages = {v} with pipeline schedule {self.pipeline_schedule!r}: interleaved "
            "1F1B runs v >= 2 model chunks per rank, every other schedule one",
        )
        one_of("context attention", self.context_attention, CONTEXT_ATTENTIONS)
        # accept a mapping; store sorted pairs so strategies stay hashable
        dims = dict(self.shard_dims)
        known_axes(dims, "shard_dims")
        object.__setattr__(
            self, "shard_dims", tuple(sorted(dims.items(), key=lambda p: AXES.index(p[0])))
        )
        known_axes(self.mesh_axes, "mesh_axes")
        object.__setattr__(self, "mesh_axes", tuple(a for a in AXES if a in self.mesh_axes))

    def shard_dim(self, axis: str) -> tuple[str, ...]:
        """The tensor dimensions ``axis`` shards (SPEC §6 rule 1: one per axis)."""
        dims = dict(self.shard_dims).get(axis, DEFAULT_SHARD_DIMS[axis])
        return (dims,) if isinstance(dims, str) else tuple(dims)

    @property
    def axes(self) -> tuple[str, ...]:
        """The mesh axes the strategy is meant for: ``mesh_axes`` with the axes its placement
        splits; a strategy naming none lives on the data axis."""
        named = set(self.mesh_axes) | set(self.placement.axes())
        return tuple(a for a in AXES if a in named) or ("data",)

    def default_mesh(self, devices: int) -> Mesh:
        """All devices on the strategy's one axis; a strategy on several axes needs a mesh."""
        devices = positive_int("devices", devices)
        if len(self.axes) > 1:
            raise PlacementError(
                f"strategy {self.name!r} places states on axes {', '.join(self.axes)}: "
                f'give a mesh whose degrees multiply to {devices}, e.g. mesh="'
                + ",".join(f"{a}=..." for a in self.axes)
                + '"'
            )
        return Mesh.of(**{self.axes[0]: devices})

    def with_(self, **changes: object) -> "Strategy":
        """A copy with some fields changed, e.g. ``zero3.with_(micro_batches=8)``."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _s(name: str, modes: str | Mapping[str, str], summary: str, **options: Any) -> Strategy:
    """One row of the tables below. ``modes``: the modes of params, grads and optimizer state, in
    that order, on the data axis ("R R S" is P=R G=R O=S, as the tables print it), or on each axis
    a mapping names ({"data": "R R R", "tensor": "S S S"}); ``options``: Strategy's other fields."""
    on_axes = {"data": modes} if isinstance(modes, str) else modes
    placement = {
        state.value: {axis: row.split()[i] for axis, row in on_axes.items()}
        for i, state in enumerate(MODEL_STATES)
    }
    return Strategy(name, Placement(**placement), summary=summary, **options)


#: The named strategies, each a placement of the four states (``get_strategy``).
STRATEGIES: Mapping[str, Strategy] = by_name(
    _s("dp", "R R R", "data parallel: everything replicated, gradients all-reduced"),
    _s(
        "zero1_allreduce",
        "R R S",
        "ZeRO stage 1 as PyTorch's ZeroRedundancyOptimizer runs it: all-reduce, "
        "then each owner broadcasts its updated slice (3Ψ)",
        owner_update="allreduce_broadcast",
    ),
    _s("zero1", "R R S", "ZeRO stage 1: optimizer state sharded"),
    _s("zero2", "R S S", "ZeRO stage 2: gradients and optimizer state sharded"),
    _s("zero3", "SG S S", "ZeRO stage 3: parameters gathered per use, everything sharded"),
    _s("fsdp", "SG S S", "FSDP FULL_SHARD: the same placement as ZeRO-3"),
    _s(
        "fsdp_grad_op",
        "SG S S",
        "FSDP SHARD_GRAD_OP: parameters gathered once, kept through backward",
        reshard_after_forward=False,
    ),
    _s(
        "zero2_offload",
        "R OFF OFF",
        "ZeRO-Offload: gradient and optimizer slices in host memory, step on the CPU",
    ),
    _s(
        "zero3_offload",
        "OFF OFF OFF",
        "ZeRO-Infinity style: every model state's slice in host memory",
    ),
    _s(
        "tp",
        {"tensor": "S S S"},
        "Megatron tensor parallel: weight matrices split over the tensor axis",
    ),
    _s(
        "pp",
        {"pipeline": "S S S"},
        "pipeline parallel: layers split into stages, micro-batches flow through",
        micro_batches=4,
    ),
)


#: Compositions on a mesh of named axes (SPEC §6). Each names a mode per state per axis.
COMPOSITIONS: Mapping[str, Strategy] = by_name(
    _s(
        "dp×tp",
        {"data": "R R R", "tensor": "S S S"},
        "data parallel across tensor-parallel groups",
        mesh_axes=("data", "tensor"),
    ),
    _s(
        "dp×pp",
        {"data": "R R R", "pipeline": "S S S"},
        "data parallel across pipelines",
        micro_batches=4,
        mesh_axes=("data", "pipeline"),
    ),
    _s(
        "zero1×tp×pp",
        {"data": "R R S", "tensor": "S S S", "pipeline": "S S S"},
        "Megatron-style 3D parallelism with the distributed optimizer (ZeRO-1 on data)",
        micro_batches=4,
    ),
    _s(
        "zero3×tp",
        {"data": "SG S S", "tensor": "S S S"},
        "FSDP + tensor parallel ('2D'): ZeRO-3 on data, Megatron TP on tensor",
    ),
    _s(
        "dp×cp",
        {"data": "R R R", "context": "R R R"},
        "data parallel across context-parallel groups: each sequence cut in c chunks, "
        "ring attention passes K/V round the context ranks, gradients reduced over both",
        mesh_axes=("data", "context"),
    ),
    _s(
        "dp×cp_ulysses",
        {"data": "R R R", "context": "R R R"},
        "data parallel across context-parallel groups, Ulysses' all-to-alls (heads <-> "
        "sequence) instead of the ring",
        context_attention="ulysses",
        mesh_axes=("data", "context"),
    ),
    _s(
        "zero1×cp",
        {"data": "R R S", "context": "R R S"},
        "Megatron's distributed optimizer with context parallelism: optimizer state "
        "sharded over data × context, gradients reduce-scattered on both, parameters "
        "all-gathered back",
    ),
    _s(
        "hsdp",
        {"replica": "R R R", "data": "SG S S"},
        "FSDP HYBRID_SHARD: ZeRO-3 within each data group, replicated across replica groups",
        mesh_axes=("replica", "data"),
    ),
)


def example_mesh(strategy: Strategy, devices: int = 4, per_axis: int = 2) -> Mesh:
    """The small mesh the checker uses when none is given: ``devices`` on a one-axis strategy's
    axis (data=4 for zero3), ``per_axis`` devices on each axis of a composition
    (data=2,tensor=2)."""
    if len(strategy.axes) == 1:
        return strategy.default_mesh(devices)
    return Mesh.of(**{axis: per_axis for axis in strategy.axes})


def get_strategy(strategy: str | Strategy) -> Strategy:
    """A named strategy or composition ("dp×tp" may be typed "dpxtp" or "dp*tp"), or a
    user-defined Strategy passed through."""
    if isinstance(strategy, Strategy):
        return strategy
    key = spelled(strategy, STRATEGIES)
    named = {**STRATEGIES, **COMPOSITIONS}
    if key not in named:
        raise PlacementError(
            f"unknown strategy {strategy!r}; known strategies: {', '.join(STRATEGIES)}; "
            f"compositions: {', '.join(COMPOSITIONS)}"
        )
    return named[key]
