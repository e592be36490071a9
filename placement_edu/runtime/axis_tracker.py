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
from functools import partial
from typing import Any

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

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.runtime.peak_tracker import _optimizer, _reset_peak, _snapshot
from placement_edu.runtime.reference_models import CausalLM, Conv1D, batch, build


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


def measure(
    model: str | Architecture,
    tensor: int,
    sequence_parallel: bool = False,
    micro_batch: int = 1,
    seq: int = 1024,
    attention: str = "eager",
    recompute: str = "none",
    optimizer: str = "adam-foreach",
) -> dict:
    """One tracked steady-state step of tensor rank 0 of ``tensor`` (fp32; bytes by tracker
    category, under the keys ``peak_tracker.measure`` returns)."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    arch = get_architecture(model)
    started = time.perf_counter()
    dist.init_process_group("fake", rank=0, world_size=tensor, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (tensor,))
        with FakeTensorMode():
            net = build(arch, attention, recompute)
            tensor_parallel(net, mesh, sequence_parallel)
            opt = two_groups(_optimizer(net, optimizer))
            # warm-up on t·8 tokens (sequence parallelism cuts them in t): Adam's state made
            net(*batch(arch, micro_batch, 8 * tensor)).backward()
            opt.step()
            opt.zero_grad()
            ids, labels = batch(arch, micro_batch, seq)
            tracker = MemTracker()
            tracker.track_external(net, opt, ids, labels)
            with tracker:
                loss = net(ids, labels)
                after_forward = _snapshot(tracker)
                loss.backward()
                after_backward = _snapshot(tracker)
                forward_backward_peak = _snapshot(tracker, "peak")
                _reset_peak(tracker)
                opt.step()
                step_peak = _snapshot(tracker, "peak")
                after_step = _snapshot(tracker)
                opt.zero_grad()
    finally:
        dist.destroy_process_group()
    return {
        "after_forward": after_forward,
        "after_backward": after_backward,
        "after_step": after_step,
        "forward_backward_peak": forward_backward_peak,
        "step_peak": step_peak,
        "seconds": round(time.perf_counter() - started, 3),
    }


def measure_here(**case: Any) -> dict:
    """``measure(**case)`` in this process, torch's compiler cache (made when its memory tracker
    is imported) in a run folder removed after: TMPDIR is left as found."""
    import os

    from placement_edu.runtime import rundir

    scratch, before = rundir.make("inductor"), os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = scratch
    try:
        return measure(**case)
    finally:
        rundir.remove(scratch)
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before
