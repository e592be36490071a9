"""PyTorch's own implementations, trained and measured: does the theory predict what people run?

Our engines (``engines/``) are written to follow the placement rules, so their agreeing with the
core proves little about real code. Here the same toy model is trained by PyTorch itself --
``DistributedDataParallel``; ``ZeroRedundancyOptimizer`` under DDP (its documented use); FSDP2's
``fully_shard`` with ``reshard_after_forward`` True, False and None (the default) -- and each rank
measures what it holds and every collective those implementations issue:

- state bytes: parameters, gradients and Adam's moments as this rank holds them (a DTensor's local
  shard, ``to_local()``), and FSDP2's padded shard storage apart (``storage_params``);
- a ledger of collectives (op, payload bytes in SPEC §4's sense, group size), recorded by wrapping
  the ``torch.distributed`` functions these implementations call while the step runs (DDP's own
  C++ reducer is routed through a Python comm hook that does what its default hook does);
- deviation: every parameter element this rank holds against a single-process run of the same
  model, data and seed with ``torch.optim.Adam`` (SPEC §5, §7).

The prediction of the same runs is the core's (``placement_edu.implementations``);
``torch_ref_result.py`` launches the ranks and puts the two side by side.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
from collections import OrderedDict
from typing import Callable, Iterator, Sequence, TypedDict

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import distributed_c10d as c10d
from torch.distributed.distributed_c10d import _resolve_process_group
from torch.utils._python_dispatch import TorchDispatchMode

from placement_edu.models import stage_layers
from placement_edu.schedule import OpKind
from placement_edu.strategies import LOOPED_SCHEDULES
from placement_edu.implementations import (
    IMPLEMENTATIONS,
    TRANSFORMER,
    TRANSFORMER_TP_PLAN,
    TorchRefConfig,
)


class AdamOptions(TypedDict):
    """``torch.optim.Adam``'s keyword arguments that the runs here set."""

    lr: float
    betas: tuple[float, float]
    eps: float


#: Adam as every run here uses it: eps large enough that the update sees the gradient's scale
#: (SPEC §5: with torch's 1e-8 Adam is nearly scale-invariant and a doubly-scaled gradient hides).
ADAM = AdamOptions(lr=1e-2, betas=(0.9, 0.999), eps=1e-3)

#: What a step runs on this rank's rows (x, y): forward and backward, gradients left in place.
StepFn = Callable[[torch.Tensor, torch.Tensor], None]


# --- the models and their data ----------------------------------------------------------------
#: Each of ``TORCH_REF_PRECISIONS``: the dtype the parameters are stored in, and FSDP2's
#: ``MixedPrecisionPolicy(param_dtype, reduce_dtype)`` (None: no policy).
DTYPES: dict[str, tuple[torch.dtype, tuple[torch.dtype, torch.dtype | None] | None]] = {
    "fp64_adam": (torch.float64, None),
    "fsdp2_bf16": (torch.float32, (torch.bfloat16, torch.float32)),
    "fsdp2_bf16_reduce_bf16": (torch.float32, (torch.bfloat16, None)),
}


def build_mlp(
    widths: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float64
) -> nn.Sequential:
    """``--model mlp:a,b,c``: Linear(a,b), Tanh, Linear(b,c) -- no Tanh after the last Linear --
    in ``dtype`` (float64 unless a mixed-precision run stores float32), initialised by torch's
    default rule under ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths, widths[1:])):
            layers.append(nn.Linear(a, b, dtype=dtype))
            if i < len(widths) - 2:
                layers.append(nn.Tanh())
        return nn.Sequential(*layers)


class Block(nn.Module):
    """``--model transformer``: an input projection, then attention (q, k, v, o) and an MLP (up,
    tanh, down) with residual connections; no biases or norms. Heads are read from the width of
    q's output, so the same code runs on a tensor-parallel rank's local heads."""

    def __init__(self, hidden: int, heads: int, ffn: int, seq: int) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        linear = lambda a, b: nn.Linear(a, b, bias=False, dtype=torch.float64)  # noqa: E731
        self.embed, self.q, self.k, self.v, self.o = (linear(hidden, hidden) for _ in range(5))
        self.up, self.down = linear(hidden, ffn), linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        e = self.embed(x)
        heads = lambda t: t.view(b, s, -1, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(e)), heads(self.k(e)), heads(self.v(e))
        context = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim**0.5, dim=-1) @ v
        y = e + self.o(context.transpose(1, 2).reshape(b, s, -1))
        return y + self.down(torch.tanh(self.up(y)))


def build_model(config: TorchRefConfig) -> nn.Module:
    if config.widths:
        return build_mlp(config.widths, config.seed, DTYPES[config.precision][0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return Block(**TRANSFORMER)


def batch(config: TorchRefConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of ``step``, the same on every rank and in the single-process run."""
    g = torch.Generator().manual_seed(10_000 * config.seed + step)
    shape_in: tuple[int, ...]
    shape_out: tuple[int, ...]
    if config.widths:
        shape_in, shape_out = (
            (config.global_batch, config.widths[0]),
            (config.global_batch, config.widths[-1]),
        )
    else:
        shape_in = shape_out = (config.global_batch, TRANSFORMER["seq"], TRANSFORMER["hidden"])
    dtype = DTYPES[config.precision][0]
    return (
        torch.randn(shape_in, generator=g, dtype=torch.float64).to(dtype),
        torch.randn(shape_out, generator=g, dtype=torch.float64).to(dtype),
    )


def my_rows(config: TorchRefConfig, rank: int) -> slice:
    """This rank's rows: an equal slice under data parallelism, all of them under tensor
    parallelism."""
    if not config.splits_batch:
        return slice(None)
    rows = config.rows_per_rank
    return slice(rank * rows, (rank + 1) * rows)


def single_process(config: TorchRefConfig) -> list[dict[str, torch.Tensor]]:
    """Parameters after each step of a one-process run on the whole global batch."""
    model = build_model(config)
    optimizer = torch.optim.Adam(model.parameters(), **ADAM)
    history = []
    for step in range(config.steps):
        x, y = batch(config, step)
        optimizer.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        history.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return history


# --- the ledger -------------------------------------------------------------------------------
#: The ``torch.distributed`` functions the implementations call, the op each is in SPEC §4's
#: table, and the argument that holds the payload S (all-gather: the full output; reduce-scatter:
#: the full input). torch >= 2.7 names the tensor-in, tensor-out collectives ``*_single``.
WATCHED = {
    "all_reduce": (OpKind.ALL_REDUCE, "tensor"),
    "broadcast": (OpKind.BROADCAST, "tensor"),
    "all_gather_single": (OpKind.ALL_GATHER, "output_tensor"),
    "all_gather_into_tensor": (OpKind.ALL_GATHER, "output_tensor"),
    "reduce_scatter_single": (OpKind.REDUCE_SCATTER, "input"),
    "reduce_scatter_tensor": (OpKind.REDUCE_SCATTER, "input"),
    "isend": (OpKind.SEND, "tensor"),
    "irecv": (OpKind.RECV, "tensor"),
}


#: DTensor's collectives are functional ops dispatched by torch (not ``torch.distributed``
#: calls): the op each is, and how to read its group's size from the op's arguments.
FUNCTIONAL = {
    "_c10d_functional.all_reduce.default": OpKind.ALL_REDUCE,  # (input, reduce_op, group_name)
    # (input, group_size, group_name)
    "_c10d_functional.all_gather_into_tensor.default": OpKind.ALL_GATHER,
    "_c10d_functional.reduce_scatter_tensor.default": OpKind.REDUCE_SCATTER,
}


class _Functional(TorchDispatchMode):
    """Sees every op torch dispatches on this thread (forward and, on CPU, backward too) and hands
    DTensor's functional collectives to the ledger."""

    def __init__(self, ledger: "Ledger") -> None:
        super().__init__()
        self.ledger = ledger

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: tuple = (),
        kwargs: dict | None = None,
    ) -> object:
        op = FUNCTIONAL.get(str(func))
        if op is not None:
            group = _resolve_process_group(args[-1])
            tensor = args[0]
            n = dist.get_world_size(group)
            full = tensor.numel() * tensor.element_size() * (n if op == OpKind.ALL_GATHER else 1)
            self.ledger.ops.append({"op": op, "payload_bytes": full, "group": n})
        return func(*args, **(kwargs or {}))


class Ledger:
    """Every collective issued while ``recording``: (op, payload bytes, group size), in order."""

    def __init__(self) -> None:
        self.ops: list[dict] = []
        self.metadata_bytes = 0  # integer tensors sent or received: objects, not training state

    def add(self, op: str, tensors: list[torch.Tensor], group: dist.ProcessGroup | None) -> None:
        self.ops.append(
            {
                "op": op,
                "payload_bytes": sum(t.numel() * t.element_size() for t in tensors),
                "group": dist.get_world_size(group),
            }
        )

    @contextlib.contextmanager
    def recording(self) -> Iterator["Ledger"]:
        originals = {name: getattr(dist, name) for name in WATCHED if hasattr(dist, name)}
        coalesced = dist._broadcast_coalesced  # DDP's start-up broadcast (a C++ function)

        def watch(name: str, call: Callable[..., object]) -> Callable[..., object]:
            op, argument = WATCHED[name]
            signature = inspect.signature(call)

            def wrapped(*args: object, **kwargs: object) -> object:
                bound = signature.bind(*args, **kwargs).arguments
                tensor = bound[argument]
                if tensor.is_floating_point():
                    self.add(op, [tensor], bound.get("group"))
                else:  # pickled objects: pipelining's shape metadata
                    self.metadata_bytes += tensor.numel() * tensor.element_size()
                return call(*args, **kwargs)

            return wrapped

        def broadcast_coalesced(
            process_group: dist.ProcessGroup,
            tensors: list[torch.Tensor],
            buffer_size: int,
            src: int = 0,
        ) -> None:
            self.add(OpKind.BROADCAST, list(tensors), process_group)
            return coalesced(process_group, tensors, buffer_size, src)

        # P2POp checks its op against distributed_c10d's own isend/irecv: one wrapper under both
        # names. (Only those two there: c10d's own functions call each other, and nothing may count
        # twice.)
        wrappers = {name: watch(name, call) for name, call in originals.items()}
        for name, wrapper in wrappers.items():
            setattr(dist, name, wrapper)
            if name in ("isend", "irecv"):
                setattr(c10d, name, wrapper)
        dist._broadcast_coalesced = broadcast_coalesced
        try:
            with _Functional(self):
                yield self
        finally:
            for name, call in originals.items():
                setattr(dist, name, call)
                if name in ("isend", "irecv"):
                    setattr(c10d, name, call)
            dist._broadcast_coalesced = coalesced

    def take(self) -> list[dict]:
        ops, self.ops = self.ops, []
        return ops


def ddp_allreduce_hook(
    group, bucket
):  # (no annotations: DDP checks them, and they are strings here)
    """What DDP's default hook does (divide by the group size, all-reduce the bucket), through the
    Python ``dist.all_reduce`` so the ledger sees it: DDP's reducer otherwise calls C++ directly."""
    tensor = bucket.buffer().div_(dist.get_world_size(group))
    return (
        dist.all_reduce(tensor, group=group, async_op=True)
        .get_future()
        .then(lambda f: f.value()[0])
    )


# --- the implementations ----------------------------------------------------------------------
def forward_backward(module: nn.Module) -> StepFn:
    """One step's forward and backward on this rank's rows: the loss is the mean over them."""

    def run(x: torch.Tensor, y: torch.Tensor) -> None:
        nn.functional.mse_loss(module(x), y).backward()

    return run


def pipeline(
    config: TorchRefConfig, model: nn.Sequential
) -> tuple[StepFn, nn.Module, torch.optim.Optimizer]:
    """This rank's stages of ``model`` (whole Linears, the core's stage split over v·p stages:
    stages rank, rank + p, ... under interleaving) under ``torch.distributed.pipelining``'s
    GPipe, 1F1B, interleaved 1F1B or zero-bubble schedule: (forward-backward, the rank's Linears,
    optimizer)."""
    from torch.distributed import pipelining

    rank, ranks = dist.get_rank(), config.world_size
    impl = IMPLEMENTATIONS[config.impl]
    stages = ranks * impl.virtual_stages
    linears = len(config.widths) - 1
    children = dict(model.named_children())  # Linear i is child 2i

    def stage_module(stage: int) -> nn.Sequential:
        mine = stage_layers(linears, stages, stage)
        return nn.Sequential(
            OrderedDict((name, c) for name, c in children.items() if int(name) // 2 in mine)
        )

    chunks = [stage_module(s) for s in range(rank, stages, ranks)]
    pipes = [
        pipelining.PipelineStage(m, s, stages, torch.device("cpu"))
        for m, s in zip(chunks, range(rank, stages, ranks))
    ]
    assert impl.pipeline_schedule is not None  # a pipelining implementation names its schedule
    kind = {
        "gpipe": pipelining.ScheduleGPipe,
        "1f1b": pipelining.Schedule1F1B,
        "interleaved": pipelining.ScheduleInterleaved1F1B,
        "zero_bubble": pipelining.ScheduleInterleavedZeroBubble,
    }[impl.pipeline_schedule]
    looped = impl.pipeline_schedule in LOOPED_SCHEDULES  # they take a list of stages
    schedule = kind(
        pipes if looped else pipes[0],
        n_microbatches=config.micro_batches,
        loss_fn=nn.functional.mse_loss,
    )  # grads / m
    first, last = rank == 0, rank == ranks - 1  # stage 0 and stage v·p - 1 live there

    def run(x: torch.Tensor, y: torch.Tensor) -> None:
        if first:
            schedule.step(x)
        elif last:
            schedule.step(target=y)
        else:
            schedule.step()

    # the rank's Linears under their own names ("0.weight", ...), for its state and its deviation
    mine = nn.Sequential(OrderedDict((n, c) for m in chunks for n, c in m.named_children()))
    return run, mine, torch.optim.Adam(mine.parameters(), **ADAM)


def wrap(
    config: TorchRefConfig, model: nn.Module, ledger: Ledger
) -> tuple[StepFn, nn.Module, torch.optim.Optimizer]:
    """(forward-backward of one step, the module whose parameters this rank holds, its optimizer):
    ``model`` as ``config.impl`` trains it."""
    if IMPLEMENTATIONS[config.impl].family == "pipelining":
        assert isinstance(model, nn.Sequential)  # pipelining splits the MLP's Linears
        return pipeline(config, model)
    module, optimizer = _wrap(config, model, ledger)
    return forward_backward(module), model, optimizer


def _wrap(
    config: TorchRefConfig, model: nn.Module, ledger: Ledger
) -> tuple[nn.Module, torch.optim.Optimizer]:
    impl = IMPLEMENTATIONS[config.impl]
    if impl.family in ("ddp", "zero_redundancy"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        with ledger.recording():  # DDP broadcasts rank 0's state at start-up
            ddp = DDP(model)
        ddp.register_comm_hook(None, ddp_allreduce_hook)
        if impl.family == "ddp":
            return ddp, torch.optim.Adam(ddp.parameters(), **ADAM)
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ddp, ZeroRedundancyOptimizer(
            ddp.parameters(), optimizer_class=torch.optim.Adam, **ADAM
        )
    from torch.distributed.device_mesh import init_device_mesh

    # Every mesh follows the backend: on gloo a CPU mesh, even on a machine with CUDA (FSDP2 without
    # a mesh builds a CUDA one and crashes a gloo run there).
    mesh = init_device_mesh("cpu" if dist.get_backend() == "gloo" else "cuda", (config.world_size,))
    if impl.family == "dtensor_tp":
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        style = {"col": ColwiseParallel, "row": RowwiseParallel}
        plan = {
            name.removesuffix(".weight"): style[tp]()
            for name, tp in TRANSFORMER_TP_PLAN.items()
            if tp
        }
        return parallelize_module(model, mesh, plan), torch.optim.Adam(model.parameters(), **ADAM)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    assert isinstance(model, nn.Sequential)  # FSDP2 wraps the MLP's Linears
    mixed = DTYPES[config.precision][1]
    policy = MixedPrecisionPolicy(*mixed) if mixed else MixedPrecisionPolicy()
    linears = [m for m in model if isinstance(m, nn.Linear)]
    for layer in linears[:-1]:  # one unit per Linear; the root owns the last
        fully_shard(layer, mesh=mesh, reshard_after_forward=impl.reshard, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=impl.reshard, mp_policy=policy)
    return model, torch.optim.Adam(model.parameters(), **ADAM)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def held(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Bytes this rank holds now: parameters, gradients and Adam's two moments (local shards), the
    padded storage behind FSDP2's shards, and Adam's per-tensor step counters apart."""
    params = list(model.parameters())
    size = lambda t: t.numel() * t.element_size()  # noqa: E731
    moments = counters = 0
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's local Adam
    for state in inner.state.values():
        for key, value in state.items():
            if key == "step":
                counters += size(_local(value))
            else:
                moments += size(_local(value))
    return {
        "params": sum(size(_local(p)) for p in params),
        "grads": sum(size(_local(p.grad)) for p in params if p.grad is not None),
        "optimizer": moments,
        "storage_params": sum(_local(p).untyped_storage().nbytes() for p in params),
        "optimizer_step_counters": counters,
    }


def deviation(
    model: nn.Module, reference: dict[str, torch.Tensor], world_size: int, rank: int
) -> float:
    """Max |θ − θ_reference| over the parameter elements this rank holds: a DTensor's shard is
    compared with the same slice of the reference (chunks of ceil(size/N) along its shard dim)."""
    from torch.distributed.tensor import DTensor, Shard

    worst = 0.0
    for name, p in model.named_parameters():
        ref = reference[name.removeprefix("module.")]
        mine = _local(p.detach())
        if mine.shape != ref.shape:
            assert isinstance(p, DTensor)  # only a DTensor's local shard differs in shape
            shard = p.placements[0]
            assert isinstance(shard, Shard)
            dim = shard.dim
            chunk = math.ceil(ref.shape[dim] / world_size)
            ref = ref.narrow(dim, rank * chunk, mine.shape[dim])
        if mine.numel():
            worst = max(worst, float((mine - ref).abs().max()))
    return worst


def run_job(
    config: TorchRefConfig, progress: str | None = None, index: tuple[int, int] = (0, 1)
) -> dict:
    """Train ``config`` on this rank (an initialised process group); return what it measured.
    Rank 0 writes where it is to ``progress`` after every step (``index``: this run, runs in the
    job), as an engine's run does: the bar, and the line of a run that is stopped, name the step."""
    from placement_edu.runtime.processes.progress import write as progress_line

    start = time.perf_counter()
    rank = dist.get_rank()
    reference = single_process(config)
    ledger = Ledger()
    step_fn, model, optimizer = wrap(config, build_model(config), ledger)
    steps: list[dict] = [{"step": -1, "ops": ledger.take()}]  # start-up
    for step in range(config.steps):
        x, y = batch(config, step)
        rows = my_rows(config, rank)
        optimizer.zero_grad(set_to_none=True)
        with ledger.recording():
            step_fn(x[rows], y[rows])
            optimizer.step()
        steps.append(
            {
                "step": step,
                "ops": ledger.take(),
                "held": held(model, optimizer),
                "deviation": deviation(model, reference[step], config.world_size, rank),
            }
        )
        if progress and rank == 0:
            progress_line(progress, *index, step + 1, config.steps, config.label)
    dist.barrier()
    return {
        "rank": rank,
        "steps": steps,
        "wall_s": time.perf_counter() - start,
        "metadata_bytes": ledger.metadata_bytes,
    }
