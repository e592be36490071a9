"""The peak of a real model's step on every axis of a mesh (SPEC §3, §6), from one activation
profile measured on one device (``peak.ActivationProfile``) -- scaled, never measured again.

``peak.derive`` prices one rank of an FSDP2 group. A mesh adds axes, and each changes what a rank
holds in its own way; read top to bottom:

- **tensor** (t, Megatron's column- then row-parallel pairs in every block, as
  ``runtime/axis_tracker.py`` applies them with ``parallelize_module``): a block's weights are
  split (``TensorRank``: the widening layers by output column, the narrowing ones by input row;
  norms and the row-parallel biases whole), and of what a block keeps for backward the part
  between a pair (``block_tp_split``) is split over t; the rest -- norms, the pairs' inputs,
  dropout after them -- stays whole. With **sequence parallelism** the residual stream in the
  blocks is cut along the sequence, so everything but the pairs' inputs (PyTorch's
  ``ColwiseParallel`` saves the input it all-gathered, whole) is split too. The embeddings, the
  head and the loss stay whole on every tensor rank in this plan, plain tensors: the optimizer
  steps them and the DTensors as two groups, so foreach Adam's temporaries are the larger
  group's (``two_group_temporaries``);
- **data** (d): FSDP2 over the data axis, as ``peak.derive`` places it, on the tensor rank's
  shapes; HSDP's **replica** axis (r) repeats the data axis's shards, so a rank holds what its data
  group of d gives it, whatever r.

Not priced here yet, and refused in one line: **pipeline** (the micro-batches a stage holds under
each schedule, the embeddings on the first stage, the head and loss on the last), **context** and
**expert** axes; ``time`` and ``plan`` price them by the formula.

All figures are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.errors import expect
from placement_edu.mesh import Mesh
from placement_edu.peak import (
    OPTIMIZER_TEMPORARIES,
    ActivationProfile,
    Event,
    StepPeak,
    derive,
    fsdp2_applies,
)

# --- tensor parallelism ---------------------------------------------------------------------------
#: The layers that widen (column-parallel) and those that narrow back (row-parallel), by name in
#: a block, for each kind of model.
COLUMN = {
    "gpt2": ("attn.c_attn", "mlp.c_fc"),
    "llama": (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
    ),
}
ROW = {"gpt2": ("attn.c_proj", "mlp.c_proj"), "llama": ("self_attn.o_proj", "mlp.down_proj")}


def _split_shape(kind: str, name: str, shape: tuple[int, ...], t: int) -> tuple[int, ...]:
    """One block tensor's shape on a tensor rank of t. GPT-2's Conv1D stores [in, out]: a column
    split is its dim 1 (and its bias), a row split its dim 0 (its bias whole); an ``nn.Linear``
    stores [out, in]: a column split is dim 0, a row split dim 1."""
    layer, _, param = name.rpartition(".")
    conv = kind == "gpt2"
    if layer in COLUMN[kind]:
        dim = 0 if param == "bias" or not conv else 1
    elif layer in ROW[kind] and param == "weight":
        dim = 0 if conv else 1
    else:
        return shape  # norms, row-parallel biases: whole
    expect(
        shape[dim] % t == 0,
        f"tensor parallelism over {t} splits {name} ({shape[dim]} along dim {dim}) evenly: "
        f"give a tensor degree that divides it",
    )
    return shape[:dim] + (shape[dim] // t,) + shape[dim + 1 :]


@dataclass(frozen=True)
class TensorRank(Architecture):
    """The shape one tensor rank of ``tensor`` holds: every block tensor as ``_split_shape`` cuts
    it, the embeddings, the final norm and the head whole. ``peak.derive`` reads its tensors as it
    reads any model's."""

    tensor: int = 1

    def block_tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        return [
            (name, _split_shape(self.kind, name, shape, self.tensor))
            for name, shape in super().block_tensors()
        ]


def tensor_rank(arch: Architecture | str, tensor: int) -> Architecture:
    """``arch`` as one rank of a tensor group of ``tensor`` holds it (``arch`` itself at 1)."""
    arch = get_architecture(arch)
    if tensor == 1:
        return arch
    expect(
        arch.heads % tensor == 0 and arch.kv_heads % tensor == 0,
        f"tensor parallelism over {tensor} gives each rank whole heads: {arch.name or arch.kind}"
        f" has {arch.heads} heads ({arch.kv_heads} key/value heads); give a tensor degree that "
        "divides both",
    )
    fields = {f: getattr(arch, f) for f in Architecture.__dataclass_fields__}
    rank = TensorRank(**fields, tensor=tensor)
    rank.block_tensors()  # (refused here, in one line, if a width does not divide)
    return rank


def block_on_tensor_rank(profile: ActivationProfile, kind: str, t: int, sp: bool) -> Fraction:
    """Bytes one block keeps on a tensor rank of t: the part between the pairs over t, the rest
    whole -- or, with sequence parallelism, everything but the column-parallel layers' inputs over
    t."""
    if not sp:
        return Fraction(profile.block_tp_split, t) + profile.block - profile.block_tp_split
    inputs = sum(profile.by_module.get(f"block.{name}", 0) for name in COLUMN[kind])
    return Fraction(profile.block - inputs, t) + inputs


def tensor_profile(
    profile: ActivationProfile, arch: Architecture | str, t: int, sp: bool = False
) -> ActivationProfile:
    """``profile`` as one rank of a tensor group of t keeps it (``TensorRank``'s plan).

    A block keeps ``block_on_tensor_rank``; outside the blocks nothing changes (the stream is cut
    entering the first block, and gathered entering the final norm). The moments: those
    outside the blocks see the two blocks' smaller keeps and, in backward, the blocks' smaller
    gradients; those of a block see everything the blocks hold -- all but what was kept before the
    first block -- shrink as one block's keep does (a block's transients are its attention scores,
    its widened MLP and their gradients, split alike)."""
    arch = get_architecture(arch)
    if t == 1 and not sp:
        return profile
    kind = arch.kind
    a, a_t = profile.block, block_on_tensor_rank(profile, kind, t, sp)
    after = ("loss", "lm_head", "transformer.ln_f" if kind == "gpt2" else "model.norm")
    before = profile.outside - sum(profile.by_module.get(k, 0) for k in after)
    full = sum(_numel(s) for _, s in get_architecture(arch).block_tensors())
    local = sum(_numel(s) for _, s in tensor_rank(arch, t).block_tensors())
    moments = []
    for m in profile.moments:
        live: Fraction | int
        grads: Fraction | int
        if m.block is None:
            kept_blocks = 0 if m.name.startswith("backward, embedding") else 2
            live = m.live - kept_blocks * (a - a_t)
            grads = m.grads
        else:
            live = before + (m.live - before) * a_t / a
            grads = Fraction(m.grads * local, full)
        moments.append(replace(m, live=_whole(live), grads=_whole(grads)))
    return replace(
        profile,
        block=_whole(a_t),
        block_tp_split=_whole(Fraction(profile.block_tp_split, t)),
        moments=tuple(moments),
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _whole(x: int | Fraction) -> int:
    return round(x)


def two_group_temporaries(arch: Architecture, t: int, sp: bool) -> int:
    """Foreach Adam's temporaries on a tensor rank stepping two groups, the DTensors (the pairs'
    tensors; with sequence parallelism the norms too) and the plain tensors, one after the other
    (fp32): sqrt(v) of the larger group. (Fused Adam makes none, the for-loop variant two of one
    tensor's size: grouped or not, as ``peak.derive`` has them.)"""
    split_layers = COLUMN[arch.kind] + ROW[arch.kind]
    dtensor = plain = 0
    for name, shape, unit in tensor_rank(arch, t).tensors():
        layer = name.split(".", 3)[-1].rpartition(".")[0] if unit != "root" else ""
        if layer in split_layers or (sp and unit != "root"):
            dtensor += _numel(shape)
        else:
            plain += _numel(shape)
    return 4 * max(dtensor, plain)


def derive_on_mesh(
    arch: Architecture | str,
    profile: ActivationProfile,
    mesh: Mesh,
    rank: int = 0,
    precision: str = "fp32",
    optimizer: str = "adam-foreach",
    reshard_after_forward: bool = True,
    sequence_parallel: bool = False,
) -> StepPeak:
    """Rank ``rank`` of ``mesh``'s states and the live set at every event of a step: its tensor
    rank's shapes and profile (``tensor_rank``, ``tensor_profile``), FSDP2 over the data axis as
    ``peak.derive`` places it; a replica axis (HSDP) repeats the data axis's shards, so a rank holds
    what its data group gives it. A pipeline, context or expert axis is not priced here."""
    others = [a for a, d in mesh if a not in ("data", "tensor", "replica") and d > 1]
    expect(
        not others,
        f"fit prices the data, tensor and replica axes of a mesh; {mesh} has "
        f"{', '.join(others)}: leave it out (time and plan price it by the formula)",
    )
    arch = get_architecture(arch)
    t, d = mesh.degree("tensor"), mesh.degree("data")
    expect(
        not sequence_parallel or t > 1,
        "sequence parallelism cuts the stream over the tensor axis: give a mesh with tensor > 1",
    )
    expect(
        profile.seq % t == 0 or not sequence_parallel,
        f"sequence parallelism over {t} cuts s = {profile.seq} evenly: give s divisible by {t}",
    )
    at = mesh.coords(rank)
    peak = derive(
        tensor_rank(arch, t),
        tensor_profile(profile, arch, t, sequence_parallel),
        d,
        at["data"],
        precision,
        optimizer,
        reshard_after_forward,
    )
    if t == 1 or fsdp2_applies(d, precision) or optimizer != "adam-foreach":
        return peak  # (FSDP2 makes every parameter a DTensor: one group)
    *rest, step = peak.events
    terms = dict(step.terms)
    terms[OPTIMIZER_TEMPORARIES] = two_group_temporaries(arch, t, sequence_parallel)
    return replace(peak, events=(*rest, Event(step.name, step.phase, terms)))
