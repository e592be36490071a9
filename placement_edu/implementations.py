"""PyTorch's own implementations of the placements, predicted from the core (issue: predict real
PyTorch byte for byte and op for op).

Each implementation realises one of our placements (DDP: ``dp``; ZeroRedundancyOptimizer under
DDP: ``zero1_allreduce``; FSDP2: ``zero3`` / ``fsdp_grad_op``), slices tensors by its own rule
(``models.SHARDING_RULES``: whole tensors greedily, or FSDP2's dim-0 chunks) and gathers by its
own units (one ``fully_shard``-ed module each). The core derives the ideal schedule of that
placement on that model; the implementation then makes a few documented choices of its own --
DDP's gradient buckets, ZeroRedundancyOptimizer's one broadcast per tensor, FSDP2's order of
gathers with its backward prefetch and its root module, pipelining's order of sends and recvs.
Each choice is one small function (``torch_orders.py``, the orders PyTorch's source documents),
and each implementation says in one sentence how it differs from the ideal schedule.

Torch-free: ``runtime/measurement/torch_reference.py`` trains and measures the same runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from placement_edu.errors import MAX_COUNT, expect, one_of, positive_int
from placement_edu.memory import derive_memory
from placement_edu.mesh import Mesh
from placement_edu.models import ConcreteModel, TensorSpec
from placement_edu.placement import State
from placement_edu.precision import get_precision
from placement_edu.schedule import Op, derive_schedule
from placement_edu.names import by_name
from placement_edu.strategies import LOOPED_SCHEDULES, PipelineSchedule, get_strategy
from placement_edu.torch_orders import (
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    ddp_buckets,
    fsdp2_order,
    torch_1f1b,
    torch_1f1b_order,
    torch_looped_order,
    zero_redundancy_broadcasts,
)


@dataclass(frozen=True)
class Implementation:
    """One of PyTorch's implementations of a placement, as data.

    ``placement``: the strategy it realises; ``rule``: how it slices tensors
    (``models.SHARDING_RULES``); ``units``: what it gathers at a time (``models.GATHER_UNITS``);
    ``what``: the torch API; ``family``: which of its documented choices reshape the ideal schedule
    (ddp, zero_redundancy, fsdp2, dtensor_tp, pipelining); ``reshard``: FSDP2's
    ``reshard_after_forward``; ``pipeline_schedule``: gpipe, 1f1b, interleaved or zero_bubble;
    ``virtual_stages``: the pipeline stages each rank holds (interleaved: 2); ``differs``: one
    sentence, how its schedule differs from the placement's ideal one."""

    name: str
    placement: str
    rule: str
    units: str
    what: str
    family: str
    differs: str
    reshard: bool | None = None
    pipeline_schedule: str | None = None
    virtual_stages: int = 1


_FSDP2_ORDER = (
    "FSDP2 gathers the root's unit (the last Linear) first, prefetches the next unit's gather "
    "in backward before the current unit's reduce-scatter, and reduce-scatters the units whose "
    "inputs need no gradient (the root and the first Linear) in its final callback, where the "
    "ideal schedule runs the units in forward, then backward order"
)

_LOOPED_ORDER = (
    "torch's runtime lowers the rank's passes (looped_order) to sends and receives rank by rank, "
    "one action per rank per round, and posts each receive when its sender's pass is placed "
    "(_add_send_recv): the same messages and bytes as the ideal schedule, in that order."
)

IMPLEMENTATIONS: Mapping[str, Implementation] = by_name(
    Implementation(
        "ddp",
        "dp",
        "zero",
        "model",
        "torch.nn.parallel.DistributedDataParallel",
        "ddp",
        "DDP all-reduces the gradient in buckets (one bucket at the first step; then 1 "
        "MiB, then 25 MiB, in reverse parameter order) so that communication overlaps "
        "backward; the ideal schedule has one all-reduce of the whole gradient -- the same "
        "bytes.",
    ),
    Implementation(
        "zero_redundancy",
        "zero1_allreduce",
        "greedy",
        "model",
        "torch.distributed.optim.ZeroRedundancyOptimizer under DDP",
        "zero_redundancy",
        "ZeroRedundancyOptimizer broadcasts each tensor from its owner, largest first, "
        "where the ideal schedule has one broadcast per owner -- the same bytes; the "
        "gradient all-reduce is DDP's, bucketed.",
    ),
    Implementation(
        "fsdp2",
        "zero3",
        "fsdp2",
        "layer",
        "FSDP2 fully_shard(reshard_after_forward=True)",
        "fsdp2",
        _FSDP2_ORDER + " -- the same collectives and bytes.",
        reshard=True,
    ),
    Implementation(
        "fsdp2_grad_op",
        "fsdp_grad_op",
        "fsdp2",
        "layer",
        "FSDP2 fully_shard(reshard_after_forward=False)",
        "fsdp2",
        _FSDP2_ORDER + " -- the same collectives and bytes.",
        reshard=False,
    ),
    Implementation(
        "fsdp2_root_kept",
        "zero3",
        "fsdp2",
        "layer",
        "FSDP2 fully_shard(reshard_after_forward=None): the default, root not resharded",
        "fsdp2",
        _FSDP2_ORDER
        + "; and reshard_after_forward=None keeps the root's unit gathered from forward "
        "into backward, so it is gathered once, not twice (SPEC §4).",
        reshard=None,
    ),
    Implementation(
        "dtensor_tp",
        "tp",
        "zero",
        "model",
        "DTensor tensor parallelism: parallelize_module with "
        "ColwiseParallel / RowwiseParallel (Megatron's plan)",
        "dtensor_tp",
        "DTensor all-reduces the gradient of the replicated block input once per "
        "column-parallel module that reads it (q, k, v and up: 4 per layer), where "
        "Megatron's f sums them first and all-reduces once per block (2): twice the "
        "backward tensor-parallel traffic, 1.5x per step.",
    ),
    Implementation(
        "pipelining_gpipe",
        "pp",
        "zero",
        "model",
        "torch.distributed.pipelining ScheduleGPipe",
        "pipelining",
        "the same sends and receives as the ideal GPipe schedule, in the same order.",
        pipeline_schedule=PipelineSchedule.GPIPE,
    ),
    Implementation(
        "pipelining_1f1b",
        "pp",
        "zero",
        "model",
        "torch.distributed.pipelining Schedule1F1B",
        "pipelining",
        "Schedule1F1B counts min(m, p - stage) forwards as warm-up: the textbook's "
        "p - stage - 1 and its first steady-state forward, so the same forwards run before "
        "the first backward; it fires the last warm-up forward's send with the first "
        "backward's receive (and each backward send with the next forward's receive): the "
        "same messages and bytes in another order.",
        pipeline_schedule=PipelineSchedule.ONE_F_ONE_B,
    ),
    Implementation(
        "pipelining_interleaved",
        "pp",
        "zero",
        "model",
        "torch.distributed.pipelining ScheduleInterleaved1F1B, 2 stages per rank",
        "pipelining",
        _LOOPED_ORDER,
        pipeline_schedule=PipelineSchedule.INTERLEAVED,
        virtual_stages=2,
    ),
    Implementation(
        "pipelining_zero_bubble",
        "pp",
        "zero",
        "model",
        "torch.distributed.pipelining ScheduleInterleavedZeroBubble, 1 stage per rank "
        "(ZB-H1: backward split into input- and weight-gradient passes)",
        "pipelining",
        _LOOPED_ORDER,
        pipeline_schedule=PipelineSchedule.ZERO_BUBBLE,
    ),
)

#: Micro-batches per step of the pipelining runs (1F1B needs at least as many as stages).
PIPELINE_MICRO_BATCHES = 8

#: The transformer toy ``--model transformer`` builds: one block (attention + MLP, no biases or
#: norms) on an input projection, hidden h, heads, MLP width f, sequence s. Tensor degrees that
#: divide the heads (and so h and f) run: 2, 4, 8.
TRANSFORMER = {"hidden": 16, "heads": 8, "ffn": 32, "seq": 4}
#: Megatron's split of each weight (``TensorSpec.tp``): column-parallel splits output rows (dim 0),
#: row-parallel input columns (dim 1); the input projection stays whole on every tensor rank.
TRANSFORMER_TP_PLAN = {
    "embed.weight": None,
    "q.weight": "col",
    "k.weight": "col",
    "v.weight": "col",
    "o.weight": "row",
    "up.weight": "col",
    "down.weight": "row",
}

#: The MLP anyone can rebuild: float64 Linear/Tanh, these widths, seed 0.
DEFAULT_MODEL = "mlp:64,128,128,16"


def parse_model(text: str) -> tuple[int, ...]:
    """``mlp:a,b,c,...`` -> the widths (a, b, c, ...): at least two, each a positive integer;
    ``transformer`` -> () (the fixed toy of ``TRANSFORMER``)."""
    if str(text) == "transformer":
        return ()
    kind, _, rest = str(text).partition(":")
    expect(
        kind == "mlp" and rest,
        f"model must be transformer or look like mlp:64,128,128,16 (widths of a "
        f"Tanh MLP), got {text!r}",
    )
    try:
        widths = tuple(int(w) for w in rest.split(","))
    except ValueError:
        widths = ()
    expect(
        len(widths) >= 2 and all(0 < w <= MAX_COUNT for w in widths),
        f"model {text!r}: the widths must be at least two positive integers (at most "
        f"{MAX_COUNT:,}), e.g. mlp:64,128,128,16",
    )
    expect(
        sum(a * b + b for a, b in zip(widths, widths[1:])) <= 10**8,
        f"model {text!r} has more than 10^8 parameters: too large to train here",
    )
    return widths


#: The precisions a torch-ref run trains in (``precision.PRESETS``' names): float64 throughout,
#: or FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32 | None)`` over
#: float32 shards -- gathered in bf16, gradients reduced in fp32 or in bf16.
TORCH_REF_PRECISIONS = ("fp64_adam", "fsdp2_bf16", "fsdp2_bf16_reduce_bf16")


@dataclass(frozen=True)
class TorchRefConfig:
    """One run of a PyTorch implementation: which, on how many ranks, which MLP, how many steps.
    Each rank trains on ``rows_per_rank`` rows of the global batch of each step."""

    impl: str
    world_size: int
    model: str = DEFAULT_MODEL
    steps: int = 3
    rows_per_rank: int = 6
    seed: int = 0
    #: Which of ``TORCH_REF_PRECISIONS`` the run trains in: float64 throughout by default (rounding
    #: negligible next to a real fault), or FSDP2's mixed precision.
    precision: str = "fp64_adam"

    def validate(self) -> None:
        one_of("implementation", self.impl, IMPLEMENTATIONS)
        n = positive_int("world_size", self.world_size)
        expect(n >= 2, f"world_size must be at least 2, got {n}")
        positive_int("steps", self.steps)
        tensor_parallel = self.axis == "tensor"
        widths = parse_model(self.model)
        if self.axis == "pipeline":
            linears, stages = len(widths) - 1, n * IMPLEMENTATIONS[self.impl].virtual_stages
            expect(
                2 <= stages <= linears and n <= PIPELINE_MICRO_BATCHES,
                f"{self.impl} puts whole Linears on each of the {stages} stages: {self.model} has "
                f"{linears}; give an MLP with at least {stages} Linears (e.g. "
                "mlp:64" + ",128" * (stages - 1) + ",16)",
            )
            expect(
                IMPLEMENTATIONS[self.impl].pipeline_schedule != PipelineSchedule.INTERLEAVED
                or PIPELINE_MICRO_BATCHES % n == 0,
                f"{self.impl}: interleaved 1F1B needs the {PIPELINE_MICRO_BATCHES} micro-batches "
                f"to be a multiple of the ranks: world_size must divide {PIPELINE_MICRO_BATCHES} "
                f"(2, 4 or 8), got {n}",
            )
            expect(
                len(set(widths[1:-1])) <= 1,
                f"{self.impl}: the core prices one activation size at every stage boundary, so the "
                f"hidden widths of {self.model} must be equal (e.g. mlp:64,128,128,16)",
            )
        expect(
            tensor_parallel == (widths == ()),
            f"{self.impl} trains "
            + (
                "the transformer toy (--model transformer)"
                if tensor_parallel
                else f"an MLP (--model mlp:...), not {self.model!r}"
            ),
        )
        expect(
            not tensor_parallel or TRANSFORMER["heads"] % n == 0,
            f"dtensor_tp splits the {TRANSFORMER['heads']} heads over the ranks: world_size must "
            f"divide {TRANSFORMER['heads']} (2, 4 or 8), got {n}",
        )
        positive_int("rows_per_rank", self.rows_per_rank)
        one_of("torch-ref precision", self.precision, TORCH_REF_PRECISIONS)
        expect(
            self.precision == "fp64_adam" or IMPLEMENTATIONS[self.impl].family == "fsdp2",
            f"{self.precision} is FSDP2's MixedPrecisionPolicy: it runs with an fsdp2 "
            f"implementation, not {self.impl}",
        )

    @property
    def axis(self) -> str:
        """The one mesh axis the implementation's placement splits states on: data, tensor or
        pipeline."""
        return get_strategy(IMPLEMENTATIONS[self.impl].placement).axes[0]

    @property
    def splits_batch(self) -> bool:
        """Data parallel implementations split the batch over the ranks; tensor parallel ranks all
        see all of it, and pipeline stages see it in micro-batches, one after another."""
        return self.axis == "data"

    @property
    def micro_batches(self) -> int:
        return PIPELINE_MICRO_BATCHES if self.axis == "pipeline" else 1

    @property
    def global_batch(self) -> int:
        """Rows per step: rows_per_rank on each data rank, or in each micro-batch."""
        return self.rows_per_rank * (self.world_size if self.splits_batch else self.micro_batches)

    @property
    def widths(self) -> tuple[int, ...]:
        return parse_model(self.model)

    @property
    def label(self) -> str:
        return f"{self.impl} on {self.world_size} ranks, {self.model}"


# --- the model, as the core reads it ----------------------------------------------------------
def mlp_model(widths: tuple[int, ...], rule: str, units: str) -> ConcreteModel:
    """The MLP's tensors as ``torch.nn.Sequential`` names them (Linear i is module 2i: a Tanh sits
    between), one layer per Linear, sliced by ``rule`` and gathered by ``units``."""
    tensors = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        tensors += [
            TensorSpec(f"{2 * i}.weight", (b, a), layer=i),
            TensorSpec(f"{2 * i}.bias", (b,), layer=i),
        ]
    return ConcreteModel(
        tuple(tensors), rule=rule, units=units, name=f"mlp:{','.join(map(str, widths))}"
    )


def transformer_model(rows: int) -> ConcreteModel:
    """The transformer toy's tensors with Megatron's split (``TRANSFORMER_TP_PLAN``); ``rows``
    sequences per step, so one block boundary activation is rows·s·h elements."""
    h, f, s = TRANSFORMER["hidden"], TRANSFORMER["ffn"], TRANSFORMER["seq"]
    shapes = {
        "embed.weight": (h, h),
        "q.weight": (h, h),
        "k.weight": (h, h),
        "v.weight": (h, h),
        "o.weight": (h, h),
        "up.weight": (f, h),
        "down.weight": (h, f),
    }
    return ConcreteModel(
        tuple(TensorSpec(name, shapes[name], 0, tp) for name, tp in TRANSFORMER_TP_PLAN.items()),
        boundary_elements=rows * s * h,
        tp_blocks_per_layer=2,
        name="transformer toy",
    )


def dtensor_tp_backward(ops: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """DTensor's tensor-parallel step: forward as Megatron (one all-reduce of each row-parallel
    output); in backward, the gradient of the replicated block input is all-reduced once per
    column-parallel module that reads it (q, k, v, up: 4 per layer), where Megatron's f adds the
    three attention inputs' gradients first and all-reduces once per block (2 per layer)."""
    forward = ops[: len(ops) // 2]
    columns = sum(tp == "col" for tp in TRANSFORMER_TP_PLAN.values())
    return forward + [forward[0]] * columns


def torch_looped(
    ideal: list[tuple[str, int, int]], stages: int, stage: int, m: int, impl: Implementation
) -> list[tuple[str, int, int]]:
    """The ideal schedule's sends and recvs (one boundary activation or its gradient each, all of
    one size) in the order torch's looped runtime issues them on rank ``stage``."""
    size = ideal[0][1]
    zero_bubble = impl.pipeline_schedule == PipelineSchedule.ZERO_BUBBLE
    order = torch_looped_order(stages, m, impl.virtual_stages, zero_bubble)[stage]
    return [(op, size, stages) for op, _, _ in order]


# --- what each implementation does its own way --------------------------------------------------
def _differs(impl: Implementation, ideal: list[tuple], mine: list[tuple]) -> str:
    """One sentence: how the implementation's schedule differs from the placement's ideal one."""
    if ideal == mine:
        return "the same operations as the placement's ideal schedule, in the same order"
    return impl.differs


def predict(config: TorchRefConfig) -> list[dict]:
    """Per rank: the state bytes the core predicts for ``config`` and, per step (index 0 is
    start-up), the collectives the implementation issues, each ``{op, payload_bytes, group}``;
    plus ``ideal``: the placement's own schedule of one step, and ``differs``: one sentence."""
    config.validate()
    impl = IMPLEMENTATIONS[config.impl]
    rule, units = impl.rule, impl.units
    strategy = get_strategy(impl.placement)
    n = config.world_size
    if config.axis == "pipeline":
        model = replace(
            mlp_model(config.widths, rule, units),
            boundary_elements=config.rows_per_rank * config.widths[1],
        )
        mesh = Mesh.of(pipeline=n)
        # Interleaved, rank r holds stages r, r + p, ...: the core counts the rank's bytes on its
        # contiguous share of the Linears, the same count of them (the first on rank 0, the last
        # on rank p - 1) -- the same bytes, as validate requires every hidden width equal.
        strategy = strategy.with_(
            micro_batches=config.micro_batches,
            pipeline_schedule=impl.pipeline_schedule,
            virtual_stages=impl.virtual_stages,
        )
    elif config.splits_batch:
        model, mesh = mlp_model(config.widths, rule, units), Mesh.of(data=n)
    else:
        model, mesh = transformer_model(config.global_batch), Mesh.of(tensor=n)
    precision = get_precision(config.precision)
    element = precision.params
    numels = [t.numel for t in model.tensors]
    out = []
    for rank in range(n):
        memory = derive_memory(strategy, model, mesh, precision, rank)
        schedule = derive_schedule(strategy, model, mesh, precision, rank)
        ideal = [_entry(o) for o in schedule.collectives]
        startup = [_entry(o) for o in schedule.ops if o.once]
        steps = [startup] + [
            _implemented(
                impl,
                ideal,
                schedule.collectives,
                numels,
                element,
                n,
                step,
                model,
                rank,
                config.micro_batches,
            )
            for step in range(config.steps)
        ]
        padded = (
            model.data_shard(model.local_tensors({}), n, rank)[1] // n
            if rule == "fsdp2"
            else memory.device[State.PARAMS] // element
        ) * element
        out.append(
            {
                "params": int(memory.device[State.PARAMS]),
                "grads": int(memory.device[State.GRADS]),
                "optimizer": int(memory.device[State.OPTIMIZER]),
                "storage_params": int(padded),
                "steps": steps,
                "ideal": ideal,
                "differs": _differs(impl, ideal, steps[-1]),
            }
        )
    return out


def _entry(op: Op) -> tuple[str, int, int]:
    return (op.op, int(op.payload_bytes), op.group)


def _implemented(
    impl: Implementation,
    ideal: list[tuple],
    ops: tuple[Op, ...],
    numels: list[int],
    element: int,
    n: int,
    step: int,
    model: ConcreteModel,
    rank: int,
    m: int,
) -> list[tuple[str, int, int]]:
    """The collectives ``impl`` issues at ``step``: the ideal ones, reshaped by its own choices."""
    if impl.family == "dtensor_tp":
        return dtensor_tp_backward(ideal)
    if impl.family == "pipelining" and impl.pipeline_schedule in LOOPED_SCHEDULES:
        return torch_looped(ideal, n, rank, m, impl)
    if impl.family == "pipelining":
        return (
            torch_1f1b(ideal, n, rank, m)
            if impl.pipeline_schedule == PipelineSchedule.ONE_F_ONE_B
            else ideal
        )
    if impl.family in ("ddp", "zero_redundancy"):
        grads = [("all_reduce", b, n) for b in ddp_buckets([k * element for k in numels], step)]
        if impl.family == "ddp":
            return grads
        return grads + [
            ("broadcast", k * element, n) for _, k in zero_redundancy_broadcasts(numels, n)
        ]
    # Each unit's bytes in forward order, per op: a gather moves the gather dtype, a reduce-scatter
    # the reduce dtype (Precision.wire_bytes).
    units = {
        op: [_entry(o)[1] for o in ops if o.op == op][: model.gather_units]
        for op in ("all_gather", "reduce_scatter")
    }
    units["reduce_scatter"].reverse()  # the schedule reduces in backward order
    return [(op, units[op][u], n) for op, u in fsdp2_order(len(units["all_gather"]), impl.reshard)]


#: The public names (a notebook imports only these).
__all__ = [
    "DDP_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "DEFAULT_MODEL",
    "IMPLEMENTATIONS",
    "Implementation",
    "PIPELINE_MICRO_BATCHES",
    "TRANSFORMER",
    "TORCH_REF_PRECISIONS",
    "TRANSFORMER_TP_PLAN",
    "TorchRefConfig",
    "ddp_buckets",
    "dtensor_tp_backward",
    "fsdp2_order",
    "mlp_model",
    "parse_model",
    "predict",
    "torch_1f1b",
    "torch_1f1b_order",
    "torch_looped",
    "torch_looped_order",
    "transformer_model",
    "zero_redundancy_broadcasts",
]
