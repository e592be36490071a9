"""fit on a data axis with more to it (issue 39, item 1's combined meshes): the one-device profile
placed by ``peak_axes.derive_on_mesh`` (TP × FSDP2 on a data × tensor mesh) and by
``peak.accumulated`` (m micro-batches before one step) against ``FSDPMemTracker`` on a fake
process group (``runtime/axes/mesh_tracker.py``): every state equal to the byte, the activations
and both peaks within 2 % (they come out within 0.02 %: the tracker's loss scalars and ids).

The model is GPT-2's shape at small widths (4 blocks of 256, 8 heads, its 50,257-token vocabulary),
so each case runs in a few seconds; the rules are per block and per unit, as on the full model."""

from __future__ import annotations

import json

import pytest

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.mesh import Mesh
from placement_edu.peak import PRECISIONS, StepPeak, accumulated
from placement_edu.peak_axes import derive_on_mesh
from placement_edu.runtime.axes.axis_tracker import measure_here
from placement_edu.runtime.axes.mesh_tracker import measure
from placement_edu.runtime.measurement.peak_tracker import states
from placement_edu.runtime.measurement.profiles import get_profile
from placement_edu.step_case import StepCase

pytestmark = pytest.mark.runtime

SMALL_GPT2 = get_architecture("gpt2").with_(layers=4, hidden=256, heads=8, kv_heads=8, ffn=1024)
#: Llama-3.2-1B's shape at the same widths: grouped-query attention (8 heads, 4 key/value heads),
#: SwiGLU, RoPE, its 128,256-token vocabulary, untied head
SMALL_LLAMA = get_architecture("llama-1b").with_(layers=4, hidden=256, heads=8, kv_heads=4, ffn=704)
SEQ = 256


def _predicted(
    data: int, tensor: int, rank: int, precision: str, sp: bool, m: int, arch: Architecture
) -> StepPeak:
    case = StepCase(arch, 1, SEQ, PRECISIONS[precision].compute_name)
    profile, _ = get_profile(case)
    mesh = Mesh.of(data=data, tensor=tensor)
    step = derive_on_mesh(arch, profile, mesh, rank, precision, sequence_parallel=sp)
    return accumulated(step, m)


def _compare(
    data: int,
    tensor: int,
    rank: int,
    precision: str = "fp32",
    sp: bool = False,
    m: int = 1,
    arch: Architecture = SMALL_GPT2,
) -> dict[str, int]:
    """Predicted against tracked: the states equal, the rest within 2 %; the tracked figures."""
    predicted = _predicted(data, tensor, rank, precision, sp, m, arch)
    case = StepCase(arch, 1, SEQ, PRECISIONS[precision].compute_name)
    axes = dict(data=data, tensor=tensor, rank=rank, precision=precision)
    raw = measure_here(case, measure, **axes, sequence_parallel=sp, micro_batches=m)
    tracked = states(raw, True)
    assert (predicted.params, predicted.grads, predicted.optimizer) == (
        tracked["params"],
        tracked["grads"],
        tracked["optimizer"],
    )
    for ours, key in (
        (predicted.activations, "activations"),
        (predicted.forward_backward_peak.total, "forward_backward_peak"),
        (predicted.step_peak.total, "step_peak"),
    ):
        assert ours == pytest.approx(tracked[key], rel=0.02), key
    return tracked


@pytest.mark.parametrize(
    "data, tensor, rank, precision, sp",
    [
        # ranks 0 and the last of data=2,tensor=2 and data=4,tensor=2 (tensor innermost: the last
        # rank is data index d - 1, whose shards have the padding), fp32 and FSDP2's bf16
        (2, 2, 0, "fp32", False),
        (2, 2, 3, "fsdp2_bf16", True),
        (4, 2, 0, "fsdp2_bf16", False),
        (4, 2, 7, "fp32", True),
    ],
)
def test_tp_then_fsdp2_on_a_2d_mesh_matches_fsdpmemtracker(
    data: int, tensor: int, rank: int, precision: str, sp: bool
) -> None:
    _compare(data, tensor, rank, precision, sp)


def test_tp_then_fsdp2_on_a_llama_shape_matches_fsdpmemtracker() -> None:
    _compare(4, 2, 7, "fsdp2_bf16", sp=True, arch=SMALL_LLAMA)


def test_a_data_x_tensor_rank_stores_its_tensor_rank_s_shapes_sharded_over_data() -> None:
    # data=4,tensor=2, rank 0, by hand. A tensor rank's block: ln_1, ln_2 4 x 256; c_attn
    # [256, 384] + 384; attn.c_proj [128, 256] + 256 (its bias whole); c_fc [256, 512] + 512;
    # mlp.c_proj [512, 256] + 256 -- 395,648 parameters, every dim 0 a multiple of 4, so a data
    # rank stores a quarter. The root, whole on every tensor rank: wte ceil(50,257 / 4) = 12,565
    # rows of 256 (padded), wpe 256 rows of 256, ln_f 2 x 64.
    block = 4 * 256 + 256 * 384 + 384 + 128 * 256 + 256 + 256 * 512 + 512 + 512 * 256 + 256
    assert block == 395_648
    root = 12_565 * 256 + 256 * 256 + 2 * 64
    stored = 4 * block // 4 + root  # (four blocks, a quarter of each)
    predicted = _predicted(4, 2, 0, "fp32", False, 1, SMALL_GPT2)
    assert predicted.params == 4 * stored == 14_711_808  # (fp32: 4 B a parameter)


@pytest.mark.parametrize("m, rank, precision", [(2, 0, "fp32"), (4, 3, "fsdp2_bf16")])
def test_accumulated_micro_batches_under_fsdp2_match_fsdpmemtracker(
    m: int, rank: int, precision: str
) -> None:
    # FSDP2 reduce-scatters every micro-batch: from the second on, the sharded gradient is held
    # through forward and backward
    tracked = _compare(4, 1, rank, precision, m=m)
    one, many = (_predicted(4, 1, rank, precision, False, n, SMALL_GPT2) for n in (1, m))
    assert tracked["forward_backward_peak"] > one.forward_backward_peak.total
    # (the peak stays at the logits' backward, now beside the whole sharded gradient)
    assert many.forward_backward_peak.total == one.forward_backward_peak.total + one.grads


def test_without_gradient_sync_a_rank_keeps_the_whole_gradient_which_fit_does_not_price() -> None:
    # set_requires_gradient_sync(False) until the last micro-batch: each rank accumulates the
    # whole model's gradient, unsharded (fp32: 4 bytes a parameter), not its shard
    case = StepCase(SMALL_GPT2, 1, SEQ, "fp32")
    axes = dict(data=4, micro_batches=2, gradient_sync=False)
    raw = measure_here(case, measure, **axes)
    whole = 4 * sum(n for _, n in _numels())
    assert raw["forward_backward_peak"]["Unsharded Grad"] == whole
    synced = _predicted(4, 1, 0, "fp32", False, 2, SMALL_GPT2).forward_backward_peak.total
    assert raw["forward_backward_peak"]["Total"] > 1.1 * synced


def _numels() -> list[tuple[str, int]]:
    import math

    return [(name, math.prod(shape)) for name, shape, _ in SMALL_GPT2.tensors()]


@pytest.mark.parametrize(
    "flags", ["--mesh data=2,tensor=2 --rank 3", "--devices 4 --micro-batches 2"]
)
def test_fit_verify_on_a_data_x_tensor_mesh_and_with_micro_batches(flags: str, capsys) -> None:
    # GPT-2 at its 12 blocks (about 8 s a case), in fit's defaults: FSDP2 bf16, SDPA
    from placement_edu.cli import main

    argv = ["fit", "--model", "gpt2", "--seq", "256", "--json", "--verify", *flags.split()]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("params", "grads", "optimizer"):
        assert out["memory"][key] == out["measured"]["memory"][key]
    assert out["peak_bytes"] == pytest.approx(out["measured"]["peak_bytes"], rel=0.02)
    assert out.get("micro_batches", 1) == (2 if "micro" in flags else 1)


@pytest.mark.xfail(
    strict=True,
    reason="PENDING: tensor_profile scales a block's backward moment by what the block keeps, "
    "but the last block's backward also holds tensors a tensor rank keeps whole (the stream's "
    "gradient and the head's leftovers): 3.7 % under the tracker where that moment is the peak",
)
def test_the_last_block_s_backward_under_tensor_parallelism_where_it_is_the_peak() -> None:
    # A 512-token vocabulary moves the peak from the logits' backward into the last block's:
    # predicted 44,460,304 B, tracked 46,148,840 B (data=4,tensor=2, rank 7, fp32). TP alone
    # (axis_tracker, MemTracker's per-block backward peaks) shows the same moment off on the
    # reference widths too, hidden there because the logits' backward is the peak: GPT-2 t = 2
    # -3.2 % (block 11), t = 4 with SP -7.9 %; Llama-3.2-1B's widths on 4 blocks t = 2 -5.0 %,
    # t = 4 with SP -11.7 %. Keeping a block's transients whole instead over-predicts the Llama
    # rows (+4.8 %, +9.3 %): part of them (the attention's per-head tensors) splits, part (the
    # stream's gradients, the partial sums all-reduced) does not, and the one-device profile
    # does not say which.
    _compare(4, 2, 7, arch=SMALL_GPT2.with_(vocab=512))
