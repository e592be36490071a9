"""One peak: where a real module is known, the peak a user sees is the module's -- ``fit``'s
profile, measured under FakeTensorMode, placed by ``peak.derive`` on the mesh -- and Korthikanti's
formula stands beside it as what it is, Megatron's model of Megatron's code (issue 39, item 2).

``time --model NAME`` reads the transformer's shape from the model (``spec_of``), prices the step
as before, and takes its peak from ``profile_peak`` where ``fit`` derives that placement: FSDP2
(``zero3``, ``fsdp``, ``fsdp_grad_op``; ``hsdp`` with its replica axis) on data, replica and
tensor axes, with its
micro-batches' gradients accumulated (``peak.accumulated``). Anywhere else the formula prices the
peak, and the output says why.
"""

from __future__ import annotations

import math
from dataclasses import replace

from placement_edu.architectures import Architecture, get_architecture
from placement_edu.errors import expect
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec, every_kth
from placement_edu.names import data_part
from placement_edu.configuration import PeakOf
from placement_edu.precision import Precision
from placement_edu.strategies import Strategy

#: ``time``'s recomputation -> the policy a profile is measured under (the formula's selective is
#: Korthikanti's, Megatron-LM's: the module's megatron-selective).
POLICY_OF = {
    "none": "none",
    "selective": "megatron-selective",
    "torchtitan-op": "torchtitan-op",
    "full": "full",
}
#: ``time``'s attention -> the module's.
ATTENTION_OF = {"flash": "sdpa", "eager": "eager"}
#: The data placements ``fit`` derives, and FSDP2's ``reshard_after_forward`` for each:
#: ``fully_shard`` per block (ZeRO-3, and HSDP on its replica axis) frees a block's gathered
#: parameters after its forward; FSDP's SHARD_GRAD_OP (``fsdp_grad_op``) is FSDP2 without
#: resharding (``fit --strategy fsdp2_no_reshard``), each block gathered until its backward.
FSDP2_PLACEMENTS = {"zero3": True, "fsdp": True, "hsdp": True, "fsdp_grad_op": False}


def spec_of(
    model: str, seq: int, micro_batch: int, attention: str, recompute: str
) -> TransformerSpec:
    """The formula's view of ``model`` (a preset or an HF config): its layers, widths, heads and
    vocabulary in a ``TransformerSpec`` whose block is the model's. Refused in one line where the
    two would not count the same parameters (GPT-2 at a sequence other than its position table's:
    the formula's table is s rows)."""
    arch = get_architecture(model)
    spec = transformer_of(arch, seq, micro_batch, attention, recompute)
    held = parameters(arch)
    expect(
        spec.psi == held,
        f"--model {model} has {held:,} parameters; the formula's {spec.block} block counts "
        f"{spec.psi:,} at s = {seq}"
        + " (its position table)"
        + ": give the transformer flags instead",
    )
    return spec


def transformer_of(
    arch: Architecture,
    seq: int,
    micro_batch: int = 1,
    attention: str = "eager",
    recompute: str = "none",
) -> TransformerSpec:
    """``arch``'s formula at ``seq`` (``Architecture.formula``; ``spec_of`` also checks that the
    two count the same parameters)."""
    return arch.formula(seq, micro_batch, attention, recompute)


def parameters(arch: Architecture) -> int:
    """Every parameter of the module (a tied embedding once)."""
    return sum(math.prod(shape) for _, shape, _ in arch.tensors())


def profile_peak(
    model: str,
    spec: TransformerSpec,
    strategy: str,
    mesh: Mesh,
    precision: Precision,
    micro_batches: int,
    sequence_parallel: bool = False,
) -> tuple[int | None, str]:
    """(rank 0's peak bytes, how it was priced) from the module's profile where ``fit`` derives
    the placement, else (None, why the formula prices it). The profile is measured once per
    (model, b, s, dtype, attention, recomputation) and cached (``runtime.profiles``)."""
    others = sorted(a for a, d in mesh if d > 1 and a not in ("data", "replica", "tensor"))
    why_not = (
        f"{strategy} is not FSDP2 ({', '.join(FSDP2_PLACEMENTS)})"
        if strategy not in FSDP2_PLACEMENTS
        else f"the {', '.join(others)} axis"
        if others
        else ""
    )
    if why_not:
        return None, (
            f"Korthikanti's formula ({why_not}; the module's profile prices FSDP2 on the data, "
            "replica and tensor axes)"
        )
    from placement_edu.peak import accumulated
    from placement_edu.peak_axes import derive_on_mesh
    from placement_edu.runtime.measurement.profiles import StepCase, get_profile

    fsdp2 = "fsdp2_bf16" if precision.activations == 2 else "fp32"
    compute = "bf16" if fsdp2 == "fsdp2_bf16" else "fp32"
    every = every_kth(spec.recompute)  # torchtitan's layer:K: the profiles none and full
    policy = "none" if every else POLICY_OF[spec.recompute]
    attention = ATTENTION_OF[spec.attention]
    case = StepCase.of(model, spec.micro_batch, spec.seq, compute, attention, policy)
    profile, cached = get_profile(case)
    kth = (every, get_profile(case.with_(recompute="full"))[0]) if every else None
    step = derive_on_mesh(
        model,
        profile,
        mesh,
        0,
        fsdp2,
        "adam-foreach",
        FSDP2_PLACEMENTS[strategy],
        sequence_parallel,
        every_kth=kth,
    )
    peak = accumulated(step, micro_batches).peak
    return peak.total, (
        f"the module's profile ({'cached' if cached else 'measured'} under FakeTensorMode, "
        f"{attention}, {spec.recompute if every else policy}), FSDP2 {fsdp2}: "
        f"{peak.name}"
    )


def planner_peaks(model: str, spec: TransformerSpec, precision: Precision) -> PeakOf:
    """``plan``'s ``peak_of`` for ``model``: each candidate's peak from the module's profile where
    ``profile_peak`` derives it (its data placement, the first part of its name: ``zero3×tp+sp``
    is zero3's), else None (the formula's)."""

    def peak_of(strategy: Strategy, mesh: Mesh, recompute: str) -> int | None:
        shaped = replace(spec, recompute=recompute)
        data = data_part(strategy.name)
        return profile_peak(
            model,
            shaped,
            data,
            mesh,
            precision,
            strategy.micro_batches,
            strategy.sequence_parallel,
        )[0]

    return peak_of
