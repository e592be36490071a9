"""PyTorch's own accounting of one tensor rank's step: the measured side of
``placement_edu.peak_axes`` (tensor parallelism, with and without sequence parallelism).

The model is the reference module (``reference_models``), built under ``FakeTensorMode`` on a *fake*
process group of t ranks (``dist.init_process_group("fake", ...)``: collectives do nothing, every
shape is real), and parallelised from outside, as torchtitan's ``parallelize_llama`` does it, with
``torch.distributed.tensor.parallel.parallelize_module``:

- in every block, Megatron's pairs: the layers that widen (q, k, v or GPT-2's fused ``c_attn``;
  gate and up or ``c_fc``) ``ColwiseParallel`` -- their weights split by output column, their
  output split over the heads or the hidden units -- and the layers that narrow back (``o_proj``,
  ``down_proj``, GPT-2's two ``c_proj``) ``RowwiseParallel``: split by input row, their partial
  sums all-reduced;
- with sequence parallelism, the norms ``SequenceParallel`` and the residual stream between the
  pairs cut along the sequence (the row-parallel outputs reduce-scattered, each pair's input
  all-gathered: ``PrepareModuleInput``), so what lies outside the pairs is split too;
- the embeddings, the final norm, the head and the loss plain modules, whole on every tensor rank:
  this plan splits the blocks and nothing else. The optimizer steps the DTensors and the plain
  tensors as two parameter groups (``two_groups``).

GPT-2's ``Conv1D`` stores its weight [in, out] (an ``nn.Linear`` stores [out, in]): its column
split is the weight's dim 1, its row split dim 0 (``Conv1DColwise``, ``Conv1DRowwise``).

``MemTracker`` (``torch.distributed._tools``) tracks one steady-state step after a warm-up, as
``peak_tracker.measure`` does for FSDP2: each state after the step, the activations after forward,
the forward/backward peak and the optimizer-step peak, in bytes by the tracker's categories.
"""

from __future__ import annotations

import time
from dataclasses import astuple
from functools import partial
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.parallel.style import ParallelStyle

from placement_edu.architectures import Architecture
from placement_edu.errors import expect
from placement_edu.peak_pipeline import PipelineRank
from placement_edu.step_case import StepCase
from placement_edu.strategies import PIPELINE_SCHEDULES
from placement_edu.runtime.measurement.peak_tracker import _optimizer, loss_backward, tracked_step
from placement_edu.runtime.measurement.reference_models import (
    CausalLM,
    Conv1D,
    batch,
    build,
    recomputed,
)


def _shard(module: nn.Module, mesh: DeviceMesh, dims: dict[str, Any]) -> None:
    """Replace each parameter of ``module`` by a DTensor placed as ``dims`` says."""
    for name, param in list(module.named_parameters(recurse=False)):
        placed = distribute_tensor(param, mesh, [dims[name]])
        module.register_parameter(name, nn.Parameter(placed, param.requires_grad))


class Conv1DColwise(ColwiseParallel):
    """``ColwiseParallel`` for HF's ``Conv1D`` (weight [in, out]): the weight split on dim 1, the
    bias on dim 0 -- each rank computes its own output columns."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        assert isinstance(module, Conv1D)
        inputs = partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts)
        outputs = partial(self._prepare_output_fn, self.output_layouts, self.use_local_output)
        dims = {"weight": Shard(1), "bias": Shard(0)}
        return distribute_module(
            module, device_mesh, lambda n, m, d: _shard(m, d, dims), inputs, outputs
        )


class Conv1DRowwise(RowwiseParallel):
    """``RowwiseParallel`` for ``Conv1D``: the weight split on dim 0 (its input rows), the bias
    replicated (added once, to the partial sum)."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        assert isinstance(module, Conv1D)
        self.desired_input_layouts = (Shard(-1),)
        inputs = partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts)
        outputs = partial(self._prepare_output_fn, self.output_layouts, self.use_local_output)
        dims = {"weight": Shard(0), "bias": Replicate()}
        return distribute_module(
            module, device_mesh, lambda n, m, d: _shard(m, d, dims), inputs, outputs
        )


def _side_inputs(arch: Architecture) -> tuple[None, ...]:
    """The attention's (and a block's) inputs after the stream, left as they are: GPT-2's causal
    mask; Llama's RoPE (cos, sin) and causal mask."""
    return (None,) if arch.kind == "gpt2" else (None, None)


def _block_plan(arch: Architecture, sequence_parallel: bool) -> dict[str, ParallelStyle]:
    """Megatron's pairs in one block, and with sequence parallelism the norms and the pairs'
    inputs (all-gathered from the sequence-split stream); without it, the norms replicated."""
    between = Shard(1) if sequence_parallel else Replicate()  # the stream between the pairs
    if arch.kind == "gpt2":
        col, row = Conv1DColwise, Conv1DRowwise
        pairs = {"attn.c_attn": col(), "attn.c_proj": row(output_layouts=between)}
        pairs |= {"mlp.c_fc": col(), "mlp.c_proj": row(output_layouts=between)}
        norms, attention = ("ln_1", "ln_2"), "attn"
    else:
        pairs = {f"self_attn.{p}_proj": ColwiseParallel() for p in "qkv"}
        pairs["self_attn.o_proj"] = RowwiseParallel(output_layouts=between)
        pairs |= {"mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel()}
        pairs["mlp.down_proj"] = RowwiseParallel(output_layouts=between)
        norms, attention = ("input_layernorm", "post_attention_layernorm"), "self_attn"
    plan: dict[str, ParallelStyle] = dict(pairs)
    if not sequence_parallel:
        return plan  # (the norms stay plain modules: whole, on a whole stream)
    extra = _side_inputs(arch)
    plan |= {norm: SequenceParallel() for norm in norms}
    plan[attention] = PrepareModuleInput(
        input_layouts=(Shard(1), *extra),
        desired_input_layouts=(Replicate(), *extra),
        use_local_output=True,
    )
    plan["mlp"] = PrepareModuleInput(
        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
    )
    return plan


def tensor_parallel(net: CausalLM, mesh: DeviceMesh, sequence_parallel: bool) -> None:
    """Place ``net`` on the tensor mesh: every block split as ``_block_plan`` says, everything
    outside the blocks a plain module, whole on every rank; with sequence parallelism the stream is
    cut along the sequence entering the first block and gathered again entering the final norm."""
    for block in net.blocks:
        parallelize_module(block, mesh, _block_plan(net.arch, sequence_parallel))
    if sequence_parallel:
        extra = _side_inputs(net.arch)
        cut = PrepareModuleInput(
            input_layouts=(Replicate(), *extra),
            desired_input_layouts=(Shard(1), *extra),
            use_local_output=True,
        )
        parallelize_module(net.blocks[0], mesh, cut)
        gather = PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        )
        parallelize_module(net.final_norm, mesh, gather)


def two_groups(opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer's parameters as two groups, the DTensors and the plain tensors: a foreach
    step cannot mix them in one list, so each group makes its own temporaries, one after the
    other. Called before the first step (no state yet)."""
    (group,) = opt.param_groups
    params = group["params"]
    opt.param_groups = [
        {**group, "params": [p for p in params if isinstance(p, DTensor)]},
        {**group, "params": [p for p in params if not isinstance(p, DTensor)]},
    ]
    return opt


def measure(case: StepCase, tensor: int, sequence_parallel: bool = False) -> dict:
    """One tracked steady-state step of ``case`` on tensor rank 0 of ``tensor`` (fp32; bytes by
    tracker category, under the keys ``peak_tracker.measure`` returns)."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    fp32(case)
    arch, micro_batch = case.model, case.micro_batch
    started = time.perf_counter()
    dist.init_process_group("fake", rank=0, world_size=tensor, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (tensor,))
        with FakeTensorMode():
            net = build(arch, case.attention, case.recompute)
            tensor_parallel(net, mesh, sequence_parallel)
            opt = two_groups(_optimizer(net, case.optimizer))
            # warm-up on t·8 tokens (sequence parallelism cuts them in t): Adam's state made
            net(*batch(arch, micro_batch, 8 * tensor)).backward()
            opt.step()
            opt.zero_grad()
            ids, labels = batch(arch, micro_batch, case.seq)
            tracker = MemTracker()
            tracker.track_external(net, opt, ids, labels)
            snaps = tracked_step(tracker, loss_backward(tracker, net, ids, labels), opt)
    finally:
        dist.destroy_process_group()
    return {**snaps, "seconds": round(time.perf_counter() - started, 3)}


def measure_here(case: StepCase, measuring: Callable[..., dict] = measure, **axis: Any) -> dict:
    """``measure(case, **axis)`` (or ``measuring``: ``pipeline_measure``) in this process, torch's
    compiler cache (made when its memory tracker is imported) in a run folder removed after:
    TMPDIR is left as found (``rundir.inductor_cache``)."""
    from placement_edu.runtime.processes import rundir

    with rundir.inductor_cache():
        return measuring(case, **axis)


def fp32(case: StepCase) -> None:
    """The trackers here run fp32 steps: a case in another dtype is refused in one line."""
    expect(
        case.compute == "fp32",
        f"the tensor and pipeline trackers measure fp32 steps, got compute {case.compute}",
    )


# --- pipeline parallelism -------------------------------------------------------------------------
class StageModule(nn.Module):
    """One pipeline stage's slice of a ``CausalLM``: the first stage the embeddings, every stage its
    blocks (``layers``), the last the final norm and the head (the loss is the schedule's
    ``loss_fn``). A tied head is the last stage's own copy of the embedding (Megatron's: its
    gradient is all-reduced with the first stage's), so it is a parameter of that stage alone here.
    Each stage makes the blocks' side inputs (GPT-2's causal mask; Llama's RoPE cos, sin and causal
    mask) for itself, as ``CausalLM.hidden_states`` makes them."""

    def __init__(self, net: CausalLM, layers: range, first: bool, last: bool) -> None:
        super().__init__()
        self.kind, self.recompute = net.arch.kind, net.recompute
        self.blocks = nn.ModuleList(net.blocks[i] for i in layers)
        body = net.body
        self.embed = nn.ModuleDict(
            {
                name: getattr(body, name)
                for name in ("wte", "wpe", "drop", "embed_tokens")
                if first and hasattr(body, name)
            }
        )
        self.norm = net.final_norm if last else None
        self.head = net.lm_head if last else None
        if self.kind == "llama":  # RoPE's inverse frequencies: every stage its own
            self.register_buffer("inv_freq", getattr(body, "inv_freq").clone(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        if "wte" in self.embed:
            positions = torch.arange(s)[None]
            x = self.embed["drop"](self.embed["wte"](x) + self.embed["wpe"](positions))
        elif "embed_tokens" in self.embed:
            x = self.embed["embed_tokens"](x)
        extra: tuple
        if self.kind == "gpt2":
            extra = (torch.ones(s, s, dtype=torch.bool).tril()[None, None],)
        else:
            inv_freq: torch.Tensor = getattr(self, "inv_freq")
            freqs = torch.outer(torch.arange(s, dtype=torch.float32), inv_freq)[None]
            emb = torch.cat((freqs, freqs), dim=-1)
            causal = torch.full((s, s), torch.finfo(x.dtype).min, dtype=x.dtype).triu(1)
            extra = ((emb.cos().to(x.dtype), emb.sin().to(x.dtype)), causal[None, None])
        for block in self.blocks:
            x = recomputed(block, self.recompute, x, *extra)
        if self.norm is not None and self.head is not None:
            x = self.head(self.norm(x))
        return x


def _static(schedule: type) -> type:
    """``schedule`` with its P2P warm-up vote taken as a real group would take it. The vote passes
    one int from stage to stage to learn whether every stage was given its input and output
    shapes (then no shape is exchanged: ``InferenceMode.STATIC``); on a fake group nothing arrives
    and under ``FakeTensorMode`` the int cannot be read (``.item()``), so each stage is told the
    vote's answer, STATIC: ``pipeline_measure`` gives every stage its shapes."""
    from torch.distributed.pipelining._utils import InferenceMode

    def _warmup_p2p(self: Any, stages: list, has_backward: bool, p2p_done: bool) -> None:
        for stage in stages:
            stage._inference_mode = InferenceMode.STATIC

    return type(schedule.__name__, (schedule,), {"_warmup_p2p": _warmup_p2p})


#: The package's pipeline schedules (``schedule.pipeline``) as ``torch.distributed.pipelining``
#: names them.
TORCH_SCHEDULES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved": "ScheduleInterleaved1F1B",
    "zero_bubble": "ScheduleInterleavedZeroBubble",
}


def pipeline_measure(case: StepCase, pipeline: PipelineRank) -> dict:
    """One tracked steady-state step of ``case`` on ``pipeline``'s rank (fp32, one device per
    stage): its ``virtual_stages`` stage modules (``StageModule``; chunks rank, rank + p, ... of
    the v·p) in ``torch.distributed.pipelining``'s ``PipelineStage`` on a fake group of p ranks,
    run by its schedule (``TORCH_SCHEDULES``) over ``pipeline.micro_batches`` micro-batches of
    the case's b sequences, under ``MemTracker``. Bytes by tracker category, under the keys
    ``measure`` returns (its "after_forward" activations are the activations and temporaries at
    the forward/backward peak: a pipeline's forwards and backwards interleave); ``recv_buffers``:
    the bytes of the stage's receive buffers (an input and its gradient for every micro-batch,
    made by the first step and kept), which the tracker counts as inputs."""
    import torch.distributed.pipelining as pipelining
    from torch.testing._internal.distributed.fake_pg import FakeStore

    fp32(case)
    arch, micro_batch = case.model, case.micro_batch
    p, rank, schedule, v, m = astuple(pipeline)
    started = time.perf_counter()
    dist.init_process_group("fake", rank=rank, world_size=p, store=FakeStore())
    try:
        with FakeTensorMode():
            net = build(arch, case.attention, case.recompute)
            chunks = [rank + k * p for k in range(v)]
            ids, labels = batch(arch, m * micro_batch, case.seq)
            modules, pipeline_stages = _stages(net, arch, chunks, v * p, ids[:micro_batch])
            loss = net.loss
            kind = _static(getattr(pipelining, TORCH_SCHEDULES[schedule]))
            one = schedule in PIPELINE_SCHEDULES
            run = kind(
                pipeline_stages[0] if one else pipeline_stages, n_microbatches=m, loss_fn=loss
            )
            params = [q for module in modules for q in module.parameters()]
            opt = _optimizer(nn.ParameterList(params), case.optimizer)
            first, last = 0 in chunks, v * p - 1 in chunks

            def step() -> None:
                args = (ids,) if first else ()
                kwargs = {"target": labels, "return_outputs": False} if last else {}
                run.step(*args, **kwargs)

            step()  # warm-up: the receive buffers and Adam's state made
            opt.step()
            opt.zero_grad()
            buffers = _recv_buffers(pipeline_stages)
            tracker = _every_micro_batch()()
            tracker.track_external(*modules, opt, *(ids, labels)[: first + last], *buffers)

            def forward_backward() -> tuple[dict, object]:
                step()  # (the schedule holds every micro-batch's loss itself)
                return {}, None

            snaps = tracked_step(tracker, forward_backward, opt)
    finally:
        dist.destroy_process_group()
    peak = snaps["forward_backward_peak"]
    return {  # (activations: the tracker's activations and temporaries at the peak)
        **snaps,
        "after_forward": {"Activation": peak["Activation"] + peak["Temp"]},
        "recv_buffers": sum(b.untyped_storage().nbytes() for b in buffers),
        "seconds": round(time.perf_counter() - started, 3),
    }


def _stages(
    net: CausalLM, arch: Architecture, chunks: list[int], n: int, first_input: torch.Tensor
) -> tuple[list[StageModule], list]:
    """This rank's stage modules (``StageModule``: chunks ``chunks`` of the ``n``) and each in a
    ``PipelineStage``, told the shapes it receives and sends: token ids into the first chunk,
    logits out of the last, hidden states between."""
    import torch.distributed.pipelining as pipelining

    from placement_edu.models import stage_layers

    micro_batch, seq = first_input.shape
    hidden = torch.empty(micro_batch, seq, arch.hidden, requires_grad=True)
    logits = torch.empty(micro_batch, seq, arch.vocab, requires_grad=True)
    modules = [
        StageModule(net, stage_layers(arch.layers, n, c), c == 0, c == n - 1) for c in chunks
    ]
    stages = [
        pipelining.PipelineStage(
            module,
            c,
            n,
            torch.device("cpu"),
            input_args=(first_input if c == 0 else hidden,),
            output_args=(logits if c == n - 1 else hidden,),
        )
        for c, module in zip(chunks, modules)
    ]
    return modules, stages


def _every_micro_batch() -> type:
    """``MemTracker`` for a module run once per micro-batch: it follows a module through one
    forward a step, and refuses a second; here each forward starts the module's statistics afresh
    (its parameters, already tracked, stay so). Only the totals by category are read."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class EveryMicroBatch(MemTracker):
        def _pre_fw_hook(self, module: nn.Module, inputs: Any) -> None:
            if not self._mod_tracker.is_bw:
                self.memory_tracking.pop(module, None)
            super()._pre_fw_hook(module, inputs)

    return EveryMicroBatch


def _recv_buffers(stages: list) -> list[torch.Tensor]:
    """The receive buffers of ``stages``: an input for every micro-batch (not on the first stage)
    and the gradient of the output for every micro-batch (not on the last)."""
    out = []
    for stage in stages:
        for infos in (*stage.args_recv_info.values(), *stage.grad_recv_info.values()):
            out += [i.buffer for i in infos if isinstance(getattr(i, "buffer", None), torch.Tensor)]
    return out
