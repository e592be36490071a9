"""PyTorch's own accounting of one rank's step on a data axis with more to it: the measured side of
``peak_axes.derive_on_mesh`` on a data × tensor mesh, and of ``peak.accumulated``.

Two placements that ``peak_tracker.measure`` (FSDP2 on a data axis, one micro-batch) and
``axis_tracker.measure`` (a tensor axis alone) do not run:

- **TP × FSDP2** on a 2-D mesh (data, tensor), composed as torchtitan's ``parallelize_llama``
  composes them: tensor parallelism first, ``parallelize_module`` on the "tensor" submesh
  (``axis_tracker.tensor_parallel``: Megatron's pairs in every block), then ``fully_shard`` on the
  "data" submesh, every block and then the root. FSDP2 shards each DTensor's *local* shard along
  dim 0 over the data ranks (``_StridedShard`` where the tensor split is dim 0 too), so a rank
  stores ``ceil(rows/d)`` rows of its tensor rank's shape -- what ``peak_axes.tensor_rank`` gives
  ``peak.derive``;
- **gradient accumulation**: m micro-batches of b sequences before one optimizer step. FSDP2
  reduce-scatters every micro-batch's gradients (its default) and adds them to the sharded
  gradient, so from the second micro-batch on every rank holds its whole sharded gradient
  through forward and backward (``peak.accumulated``). With ``gradient_sync=False``
  (``set_requires_gradient_sync(False)`` until the last micro-batch, as a trainer skips the
  collective) every rank keeps the *unsharded* gradient instead: measured here, not priced.

The model is built under ``FakeTensorMode`` on a fake process group of d·t ranks, as the other
trackers do. One thing differs: a 2-D mesh's submeshes compute their ranks from the mesh's own
index tensors (real ones, ``DeviceMesh._concatenate`` when ``fully_shard`` meets a DTensor), which
``FakeTensorMode`` refuses to mix with fake ones; so the model is placed with the mode left for the
moment (its parameters stay fake: a fake tensor carries its mode) and the step runs in it again.

``FSDPMemTracker`` tracks the step after a warm-up. It follows a module through one forward a step
and refuses a second, so its module statistics are reset before each micro-batch after the first
(``reset_mod_stats``; its live bytes by category and its peaks are kept). Every micro-batch's token
ids and labels are made before the step, and the tracker counts one pair of them, as a data
loader holds one micro-batch at a time (``peak.input_bytes``).
"""

from __future__ import annotations

import threading
import time

import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

from placement_edu.errors import expect
from placement_edu.step_case import StepCase
from placement_edu.runtime.axes.axis_tracker import tensor_parallel
from placement_edu.runtime.measurement.hf_models import build_model
from placement_edu.runtime.measurement.peak_tracker import MP, _optimizer, _snapshot, tracked_step
from placement_edu.runtime.measurement.reference_models import batch


def measure(case: StepCase, data: int, **placement: object) -> dict:
    """``_measure(case, data, **placement)`` in a thread of its own (re-raising what it raises).

    DTensor keeps caches of its sharding decisions keyed by ``DeviceMesh``, and a mesh compares by
    its layout, names and *thread*, not by its process groups: a second case in this process, on
    another rank's groups (rank 3's tensor group is named "4" where rank 0's is "3"), would be
    handed the first case's mesh, whose groups went with its fake process group. Those caches are
    per thread, and a mesh made in another thread never equals an earlier one."""
    answer: dict = {}

    def run() -> None:
        try:
            answer["raw"] = _measure(case, data, **placement)  # type: ignore[arg-type]
        except BaseException as error:  # (handed to the caller's thread, raised there)
            answer["error"] = error

    thread = threading.Thread(target=run, name="mesh tracker", daemon=True)
    thread.start()
    thread.join()
    if "error" in answer:
        raise answer["error"]
    return answer["raw"]


def _check(case: StepCase, data: int, precision: str) -> None:
    """What the mesh tracker runs: FSDP2 over 2 or more data ranks, in a precision of ``MP``
    whose compute dtype is the case's; refused in one line otherwise."""
    expect(
        data > 1,
        f"the mesh tracker runs FSDP2 over a data axis of 2 or more ranks, got data={data}",
    )
    expect(
        precision in MP,
        f"the mesh tracker runs FSDP2 in {' or '.join(MP)}, got precision {precision}",
    )
    compute = "bf16" if MP[precision] else "fp32"
    expect(
        case.compute == compute,
        f"precision {precision} computes in {compute}, the case says {case.compute}",
    )


def _measure(
    case: StepCase,
    data: int,
    tensor: int = 1,
    rank: int = 0,
    precision: str = "fp32",
    sequence_parallel: bool = False,
    micro_batches: int = 1,
    gradient_sync: bool = True,
    reshard_after_forward: bool = True,
) -> dict:
    """One tracked steady-state step of rank ``rank`` of a data × tensor mesh (tensor innermost, as
    ``Mesh.coords`` and ``init_device_mesh`` number ranks): FSDP2 over ``data`` ranks in
    ``precision`` ("fp32" or "fsdp2_bf16"), on the blocks tensor-parallel over ``tensor`` (with
    sequence parallelism if asked), over ``micro_batches`` micro-batches of the case's b
    sequences. Bytes by ``FSDPMemTracker``'s categories, under the keys ``peak_tracker.measure``
    returns (read them with ``peak_tracker.states(raw, fsdp=True)``); "after_forward" is after the
    first micro-batch's forward."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    _check(case, data, precision)
    arch, b, m = case.model, case.micro_batch, micro_batches
    reshard = reshard_after_forward
    started = time.perf_counter()
    dist.init_process_group("fake", rank=rank, world_size=data * tensor, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (data, tensor), mesh_dim_names=("data", "tensor"))
        fake = FakeTensorMode()
        with fake:
            net = build_model(arch, case.attention, case.recompute)
        # (placed outside the mode: the meshes' own index tensors are real)
        if tensor > 1:
            tensor_parallel(net, mesh["tensor"], sequence_parallel)
        dtypes = MP[precision]
        policy = MixedPrecisionPolicy(*dtypes) if dtypes else MixedPrecisionPolicy()
        shard = mesh["data"]
        for block in net.blocks:
            fully_shard(block, mesh=shard, mp_policy=policy, reshard_after_forward=reshard)
        sharded = fully_shard(net, mesh=shard, mp_policy=policy)
        with fake:
            opt = _optimizer(net, case.optimizer)
            # warm-up on t·8 tokens (sequence parallelism cuts them in t): FSDP2's lazy
            # initialisation done and Adam's state made
            net(*batch(arch, b, 8 * tensor)).backward()
            opt.step()
            opt.zero_grad()
            micro = [batch(arch, b, case.seq) for _ in range(m)]
            tracker = FSDPMemTracker(net, opt)
            tracker.track_inputs(micro[0])  # (one micro-batch's ids and labels: see above)

            def forward_backward() -> tuple[dict[str, dict[str, int]], object]:
                snaps: dict[str, dict[str, int]] = {}
                for i, (ids, labels) in enumerate(micro):
                    if not gradient_sync:  # (the collective only after the last micro-batch)
                        sharded.set_requires_gradient_sync(i == m - 1)
                    if i:
                        tracker.reset_mod_stats()
                    loss = net(ids, labels)
                    snaps.setdefault("after_forward", _snapshot(tracker))
                    loss.backward()
                return snaps, loss

            snaps = tracked_step(tracker, forward_backward, opt)
    finally:
        dist.destroy_process_group()
    return {**snaps, "seconds": round(time.perf_counter() - started, 3)}
