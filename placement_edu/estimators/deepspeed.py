"""DeepSpeed's ZeRO-2 and ZeRO-3 model-state estimators
(``estimate_zero{2,3}_model_states_mem_needs`` and their ``_all_cold`` tables), as the code
computes and prints them, term by term.

DeepSpeed prints GiB (2^30 bytes) labelled "GB"; every ``bytes`` here is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Sequence

from placement_edu.errors import expect, positive_int, within_device_limit
from placement_edu.estimators.estimate import Estimate, Term
from placement_edu.placement import Placement
from placement_edu.strategies import STRATEGIES
from placement_edu.units import GiB
from placement_edu.shown import Shown


#: DeepSpeed's ZeRO-2 GPU estimate without offload, by revision of
#: deepspeed/runtime/zero/stage_1_and_2.py: bytes per parameter kept whole on every GPU, and bytes
#: per parameter divided by total_gpus, each split by our state.
#: - "pr5099" (deepspeedai/DeepSpeed#5099, merged April 2024; the code today):
#:   2Ψ + int(18Ψ/N), "2 = params_16bit, 18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit +
#:   8_optimizer_states_32bit" (its comment).
#: - "pr965" (deepspeedai/DeepSpeed#965, April 2021, the estimator's first version):
#:   4Ψ + int(16Ψ/N) -- fp16 params and fp16 grads whole on every GPU (DeepSpeed issue #4076,
#:   tjruwase: "4 * params: 2 bytes of parameter and 2 bytes for gradient"), fp32 params, grads,
#:   momentum, variance divided. The docs' t5-3b table (docs/code-docs/source/memory.rst, "Memory
#:   Requirements") was printed by this version and never regenerated: it shows 15.93GB where
#:   today's code prints 11.28GB. ZeRO-2 partitions the fp16 gradients, which #5099 corrected.
ZERO2_GPU_FORMULAS: Mapping[str, tuple[Mapping[str, int], Mapping[str, int]]] = {
    "pr5099": ({"params": 2}, {"grads": 2 + 4, "optimizer": 4 + 8}),
    "pr965": ({"params": 2, "grads": 2}, {"grads": 4, "optimizer": 4 + 8}),
}

#: What each of our states holds in DeepSpeed's counting (bytes per parameter), for the ``why``.
_WHAT = {
    "params": "fp16 params",
    "grads": "fp16/fp32 gradients",
    "optimizer": "fp32 params + Adam m + v",
}

#: The placement each DeepSpeed option set means (SPEC §2), so ours is derived by placement: our
#: named strategy's where there is one.
DEEPSPEED_PLACEMENTS: Mapping[tuple[int, bool, bool], Placement] = {
    # (stage, offload_param, offload_optimizer)
    (2, False, False): STRATEGIES["zero2"].placement,
    (2, False, True): STRATEGIES["zero2_offload"].placement,
    (3, False, False): STRATEGIES["zero3"].placement,
    (3, False, True): Placement(params="SG", grads="OFF", optimizer="OFF"),
    (3, True, True): STRATEGIES["zero3_offload"].placement,
}


@dataclass(frozen=True)
class DeepSpeedRow(Shown):
    """One line of DeepSpeed's table: its options, the per-GPU and per-CPU estimates."""

    stage: int
    offload_param: bool
    offload_optimizer: bool
    zero_init: bool
    gpu: Estimate
    cpu: Estimate

    @property
    def options(self) -> str:
        """The Options column as DeepSpeed prints it
        (``f'{OffloadDeviceEnum.cpu:4}'`` is "cpu ")."""
        device = lambda on: "cpu " if on else "none"  # noqa: E731
        if self.stage == 2:
            return f"offload_optimizer={device(self.offload_optimizer)}"
        return (
            f"offload_param={device(self.offload_param)}, "
            f"offload_optimizer={device(self.offload_optimizer)}, zero_init={int(self.zero_init)}"
        )

    @property
    def printed(self) -> str:
        """The row exactly as DeepSpeed prints it:
        ``f" {cpu/2**30:7.2f}GB | {gpu/2**30:6.2f}GB | ..."``."""
        return f" {self.cpu.printed} | {self.gpu.printed} | {self.options}"

    @property
    def placement(self) -> Placement:
        return DEEPSPEED_PLACEMENTS[(self.stage, self.offload_param, self.offload_optimizer)]


def _per_param(psi: int, per: Mapping[str, int], divisor: int, where: str) -> list[Term]:
    return [
        Term(
            f"{kind} ({n} B/param{where})",
            Fraction(n * psi, divisor),
            f"{_WHAT[kind]}: {n} B per parameter{where}",
            kind,
        )
        for kind, n in per.items()
    ]


def _truncated(terms: list[Term], what: str) -> list[Term]:
    """DeepSpeed truncates with int(): the bytes it drops, as a (negative) rounding term."""
    exact = sum((t.bytes for t in terms), Fraction(0))
    drop = math.floor(exact) - exact
    return terms + (
        [Term("int() truncation", drop, f"DeepSpeed truncates {what} to whole bytes", "rounding")]
        if drop
        else []
    )


def _deepspeed_estimate(stage: int, quantity: str, terms: list[Term], fmt: str) -> Estimate:
    total = sum((t.bytes for t in terms), 0)
    expect(
        Fraction(total).denominator == 1, "internal: a DeepSpeed figure is a whole number of bytes"
    )
    return Estimate(
        f"DeepSpeed estimate_zero{stage}_model_states_mem_needs",
        quantity,
        tuple(terms),
        f"{int(total) / GiB:{fmt}.2f}GB",
        'GiB (2^30 bytes), printed as "GB"',
    )


def _deepspeed_row(
    stage: int,
    offload_param: bool,
    offload_optimizer: bool,
    zero_init: bool,
    gpu: list[Term],
    cpu: list[Term],
) -> DeepSpeedRow:
    """One row of DeepSpeed's table from its GPU and CPU terms: DeepSpeed prints the CPU figure in
    a 7-wide field and the GPU figure in a 6-wide one."""
    return DeepSpeedRow(
        stage,
        offload_param,
        offload_optimizer,
        zero_init,
        _deepspeed_estimate(stage, "per GPU", gpu, "6"),
        _deepspeed_estimate(stage, "per CPU (host memory of one node)", cpu, "7"),
    )


def _buffered(terms: list[Term], factor: Fraction, what: str) -> list[Term]:
    """``× additional_buffer_factor``: the extra (factor − 1) × base as its own term, then int()."""
    base = sum((t.bytes for t in terms), Fraction(0))
    extra = Term(
        f"additional_buffer_factor {float(factor):g}",
        (factor - 1) * base,
        f"DeepSpeed multiplies the host estimate by {float(factor):g} to be conservative",
        "buffer",
    )
    return _truncated(terms + [extra], what)


def _load_copy(psi_or_layer: int, processes: int, what: str, note: str = "") -> Term:
    return Term(
        f"fp32 {what} at load (4 B × {processes} processes)",
        4 * psi_or_layer * processes,
        f"each of {processes} processes builds its {what} in fp32 in host memory before moving "
        f"it to its GPU (model loading, which we do not model){note}",
        "load",
    )


def _larger(load: int, steady: Fraction) -> str:
    """Why a max() in DeepSpeed's host formula picked the load-time copies."""
    return (
        f"; max({load}, {steady}) B/param picked these load-time copies over the steady-state "
        f"fp32 params, grads, m and v, which are then not counted"
    )


def deepspeed_zero2(
    psi: int,
    gpus_per_node: int = 1,
    nodes: int = 1,
    offload_optimizer: bool = True,
    buffer_factor: Fraction = Fraction(3, 2),
    formula: str = "pr5099",
) -> DeepSpeedRow:
    """DeepSpeed ``estimate_zero2_model_states_mem_needs``
    (deepspeed/runtime/zero/stage_1_and_2.py), as the code computes it, in bytes:

    - offload_optimizer: GPU 2Ψ (fp16 params); CPU Ψ·max(4·total_gpus, 16)·factor per node;
    - otherwise: GPU 2Ψ + int(18Ψ/total_gpus) ("pr5099", today) or 4Ψ + int(16Ψ/total_gpus)
      ("pr965", the published docs table; see ZERO2_GPU_FORMULAS); CPU Ψ·4·gpus_per_node·factor
      (the fp32 model each process builds at load).

    ``max(4·total_gpus, 16)``: the larger of the load-time fp32 copies and the 16 B/param steady
    state (fp32 params, grads, m, v) -- a maximum, though both are printed as one figure."""
    psi, gpn, nodes = (
        positive_int(n, v)
        for n, v in (("params", psi), ("gpus_per_node", gpus_per_node), ("nodes", nodes))
    )
    expect(
        formula in ZERO2_GPU_FORMULAS,
        f"unknown DeepSpeed ZeRO-2 formula {formula!r}; known: {', '.join(ZERO2_GPU_FORMULAS)}",
    )
    total_gpus = gpn * nodes
    if offload_optimizer:
        gpu = _per_param(psi, {"params": 2}, 1, ", whole on every GPU")
        if 4 * total_gpus >= 16:
            host = [_load_copy(psi, total_gpus, "model", _larger(4 * total_gpus, Fraction(16)))]
        else:
            host = _per_param(
                psi, {"grads": 4, "optimizer": 12}, 1, " on the host (fp32 params, grads, m, v)"
            )
        cpu = _buffered(host, Fraction(buffer_factor), "the host estimate")
    else:
        whole, divided = ZERO2_GPU_FORMULAS[formula]
        gpu = _truncated(
            _per_param(psi, whole, 1, ", whole on every GPU")
            + _per_param(psi, divided, total_gpus, f" / {total_gpus} GPUs"),
            "the divided part",
        )
        cpu = _buffered(
            [_load_copy(psi, gpn, "model")], Fraction(buffer_factor), "the host estimate"
        )
    return _deepspeed_row(2, False, offload_optimizer, True, gpu, cpu)


def deepspeed_zero3(
    psi: int,
    largest_layer: int,
    gpus_per_node: int = 1,
    nodes: int = 1,
    offload_param: bool = True,
    offload_optimizer: bool = True,
    zero_init: bool = True,
    buffer_factor: Fraction = Fraction(3, 2),
) -> DeepSpeedRow:
    """DeepSpeed ``estimate_zero3_model_states_mem_needs`` (deepspeed/runtime/zero/stage3.py), in
    bytes. GPU: 4·largest_layer (its fp16 params gathered + their fp16 grads) plus, by offload,
    int(18Ψ/total_gpus) (nothing offloaded), int(2Ψ/total_gpus) (optimizer offloaded: the fp16
    param slice) or nothing (both offloaded). CPU per node, with gpus_factor = 1/nodes and
    g = gpus_per_node:

    ==================  ==========================  ==================================
    offload             zero_init=1                 zero_init=0
    ==================  ==========================  ==================================
    param + optimizer   Ψ·18·gpus_factor·factor     Ψ·max(4·g, 18·gpus_factor)·factor
    optimizer only      Ψ·16·gpus_factor·factor     Ψ·max(4·g, 16·gpus_factor)·factor
    none                largest_layer·4·g·factor    Ψ·4·g·factor
    ==================  ==========================  ==================================

    (Offloading parameters without the optimizer is not a DeepSpeed option and is refused.)"""
    psi, ll, gpn, nodes = (
        positive_int(n, v)
        for n, v in (
            ("params", psi),
            ("largest_layer", largest_layer),
            ("gpus_per_node", gpus_per_node),
            ("nodes", nodes),
        )
    )
    expect(ll <= psi, f"largest_layer ({ll:,}) cannot exceed the model's parameters ({psi:,})")
    expect(
        offload_optimizer or not offload_param,
        "DeepSpeed's ZeRO-3 estimator has no offload_param=cpu with offload_optimizer=none row",
    )
    total_gpus = gpn * nodes
    window = Term(
        "largest layer gathered (4 B × largest_layer)",
        4 * ll,
        "fp16 params of the largest layer gathered (2 B) and its fp16 grads (2 B); we report "
        "the gather window and reduce bucket apart, as transient terms of the real gather "
        "unit (SPEC §3), not in the model-state figure",
        "window",
    )
    if offload_param:
        gpu, steady = [window], {"grads": 4, "optimizer": 12, "params": 2}
    elif offload_optimizer:
        gpu, steady = (
            _truncated(
                [window] + _per_param(psi, {"params": 2}, total_gpus, f" / {total_gpus} GPUs"),
                "the divided part",
            ),
            {"grads": 4, "optimizer": 12},
        )
    else:
        gpu = _truncated(
            [window]
            + _per_param(
                psi, {"params": 2, "grads": 4, "optimizer": 12}, total_gpus, f" / {total_gpus} GPUs"
            ),
            "the divided part",
        )
        steady = {}
    host = _zero3_host(psi, ll, gpn, nodes, steady, zero_init)
    cpu = _buffered(host, Fraction(buffer_factor), "the host estimate")
    return _deepspeed_row(3, offload_param, offload_optimizer, zero_init, gpu, cpu)


def _zero3_host(
    psi: int, ll: int, gpn: int, nodes: int, steady: Mapping[str, int], zero_init: bool
) -> list[Term]:
    """ZeRO-3's host terms per node before the buffer factor: the fp32 copies each process builds
    at load (the largest layer's under zero_init), when nothing is offloaded; else the offloaded
    ``steady`` state (bytes per parameter) over the nodes, or -- without zero_init, when they are
    larger -- the load-time copies of the whole model."""
    per_param = sum(steady.values())
    if not steady:
        return [
            _load_copy(ll if zero_init else psi, gpn, "largest layer" if zero_init else "model")
        ]
    if zero_init or per_param * Fraction(1, nodes) >= 4 * gpn:
        return _per_param(
            psi, steady, nodes, " on the host" + (f", / {nodes} nodes" if nodes > 1 else "")
        )
    return [_load_copy(psi, gpn, "model", _larger(4 * gpn, Fraction(per_param, nodes)))]


def deepspeed_table(
    psi: int,
    gpus_per_node: int = 1,
    nodes: int = 1,
    stage: int = 2,
    largest_layer: int | None = None,
    formula: str = "pr5099",
) -> tuple[DeepSpeedRow, ...]:
    """Every row DeepSpeed's ``estimate_zero{2,3}_model_states_mem_needs_all_cold`` prints, in its
    order."""
    expect(stage in (2, 3), f"DeepSpeed's estimators cover ZeRO stage 2 and 3, got stage {stage!r}")
    gpus = positive_int("gpus_per_node", gpus_per_node) * positive_int("nodes", nodes)
    within_device_limit(f"gpus_per_node = {gpus_per_node:,} × nodes = {nodes:,}", gpus)
    if stage == 2:
        return tuple(
            deepspeed_zero2(psi, gpus_per_node, nodes, off, formula=formula)
            for off in (True, False)
        )
    expect(
        largest_layer is not None,
        "ZeRO-3's estimate needs the largest layer's parameters (largest_layer)",
    )
    return tuple(
        deepspeed_zero3(psi, largest_layer, gpus_per_node, nodes, param, opt, init)  # type: ignore[arg-type]
        for opt, param in ((True, True), (True, False), (False, False))
        for init in (True, False)
    )


def deepspeed_printout(
    rows: Sequence[DeepSpeedRow],
    psi: int,
    gpus_per_node: int,
    nodes: int,
    largest_layer: int | None = None,
) -> str:
    """The text DeepSpeed's ``..._all_cold`` prints, line for line."""
    layer = (
        f", {int((largest_layer or 0) / 1e6)}M largest layer params"
        if rows and rows[0].stage == 3
        else ""
    )
    return "\n".join(
        [
            "Estimated memory needed for params, optim states and gradients for a:",
            f"HW: Setup with {nodes} {'nodes' if nodes > 1 else 'node'}, {gpus_per_node} "
            f"{'GPUs' if gpus_per_node > 1 else 'GPU'} per node.",
            f"SW: Model with {int(psi / 1e6)}M total params{layer}.",
            "  per CPU  |  per GPU |   Options",
            *[row.printed for row in rows],
        ]
    )
