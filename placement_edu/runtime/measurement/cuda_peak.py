"""One device's step on a real GPU, read from CUDA's caching allocator: the third witness of
``placement-edu fit`` (``--verify --device cuda``, N = 1 in fp32), beside the derivation and
PyTorch's ``MemTracker`` under ``FakeTensorMode``.

The model and its batch live on ``cuda:0``; one warm-up step creates Adam's state and
``zero_grad`` frees the gradients, as in ``peak_tracker``; then one step is measured:

- the states, from the tensors themselves (the allocator rounds every block up to 512 B, so its
  counters are not the states' bytes);
- the activations after forward: ``torch.cuda.memory_allocated()`` after the forward minus before
  it (the loss and the saved tensors, each rounded as the allocator rounds it);
- the forward/backward peak and the optimizer-step peak: ``torch.cuda.max_memory_allocated()``,
  reset before each (``reset_peak_memory_stats``).

What the allocator reserves beyond what it hands out (``memory_reserved``: its cache, its
fragmentation) is reported apart: it is what ``nvidia-smi`` shows and no derivation predicts.
"""

from __future__ import annotations

import time

import torch

from placement_edu.errors import expect
from placement_edu.runtime.measurement.hf_models import build_model
from placement_edu.runtime.measurement.peak_tracker import _optimizer
from placement_edu.runtime.measurement.reference_models import batch
from placement_edu.step_case import StepCase


def measure_cuda(case: StepCase) -> dict:
    """One measured steady-state step of ``case`` (fp32) on ``cuda:0`` (bytes), under the keys of
    ``peak_tracker.states``, with ``reserved_peak`` and the device's name beside them."""
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device here")
    expect(case.compute == "fp32", f"a CUDA step is measured in fp32, got {case.compute}")
    device = torch.device("cuda", 0)
    started = time.perf_counter()
    arch = case.model
    with device:
        net = build_model(arch, case.attention, case.recompute)
    opt = _optimizer(net, case.optimizer)
    ids, labels = (t.to(device) for t in batch(arch, case.micro_batch, case.seq))
    net(ids, labels).backward()  # warm-up: Adam's state exists after it
    opt.step()
    opt.zero_grad()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    loss = net(ids, labels)
    activations = torch.cuda.memory_allocated() - before
    loss.backward()
    forward_backward_peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    opt.step()
    step_peak = torch.cuda.max_memory_allocated()
    grads = sum(_bytes(p.grad) for p in net.parameters() if p.grad is not None)
    opt.zero_grad()
    torch.cuda.synchronize()
    return {
        "params": sum(_bytes(p) for p in net.parameters()),
        "grads": grads,
        "optimizer": sum(_bytes(v) for s in opt.state.values() for v in s.values()),
        "activations": activations,
        "forward_backward_peak": forward_backward_peak,
        "step_peak": step_peak,
        "reserved_peak": torch.cuda.max_memory_reserved(),
        "device": torch.cuda.get_device_name(device),
        "seconds": round(time.perf_counter() - started, 3),
    }


def _bytes(t: object) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
