"""Other tools' memory estimators, reproduced as named conventions, and reconciled with ours.

Users compare our figures with what DeepSpeed, Megatron-LM and Accelerate print. Each function below
reproduces one tool's formula as its source computes it, split into named terms, and returns an
``Estimate`` holding those terms and the number exactly as the tool prints it. ``reconcile`` then
lines the terms up with our own derivation (``report.analyze``), kind by kind, so that every
difference is a named term -- an fp32 gradient copy, a 1.5 buffer factor, a model-load copy, a
maximum over phases instead of a sum -- and never a mystery (SPEC §8).

Units: every ``bytes`` here is exact (an int or a Fraction). What the tools print is not always
what it says: DeepSpeed prints GiB (2^30 bytes) labelled "GB", Megatron MiB (2^20) labelled "MB",
Accelerate powers of 1024 labelled "KB/MB/GB". ``Estimate.unit`` says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Sequence, Union

from placement_edu.errors import expect, positive_int, within_device_limit
from placement_edu.models import TransformerSpec, tensor_divides_heads
from placement_edu.placement import Placement, State
from placement_edu.report import Report
from placement_edu.strategies import STRATEGIES
from placement_edu.units import GiB, MiB

Bytes = Union[int, Fraction]

#: What a term corresponds to on our side: one of our three model states, a transient term, or
#: something only the other tool counts. ``reconcile`` compares the two sides kind by kind.
KINDS = (
    "params",
    "grads",
    "optimizer",
    "window",
    "activations",
    "load",
    "step",
    "buffer",
    "rounding",
)


@dataclass(frozen=True)
class Term:
    """One named part of an estimate: ``bytes`` (exact), ``why`` (where it comes from), ``kind``
    (one of KINDS: what it is compared with on the other side)."""

    name: str
    bytes: Bytes
    why: str
    kind: str

    def __post_init__(self) -> None:
        expect(
            self.kind in KINDS,
            f"term {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}",
        )


@dataclass(frozen=True)
class Estimate:
    """One figure a tool prints (or we derive): its terms and how they combine.

    ``rule`` is "sum" (the terms add up: DeepSpeed, Megatron, ours) or "max" (the largest term is
    the figure: Accelerate prints the largest phase). ``printed`` is the figure as the tool prints
    it, and ``unit`` says what that unit really is."""

    convention: str
    quantity: str
    terms: tuple[Term, ...]
    printed: str
    unit: str
    rule: str = "sum"

    @property
    def total_bytes(self) -> Bytes:
        """The figure in bytes: the sum of the terms, or the largest one when ``rule`` is "max"."""
        sizes = [t.bytes for t in self.terms]
        return (max(sizes) if self.rule == "max" else sum(sizes)) if sizes else 0

    def kind_bytes(self, kind: str) -> Bytes:
        """Bytes of the terms of ``kind`` (summed: the parts of one phase or one state)."""
        return sum((t.bytes for t in self.terms if t.kind == kind), 0)


# --- DeepSpeed -------------------------------------------------------------------------------

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
class DeepSpeedRow:
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
    per_param = sum(steady.values())
    if not steady:
        host = [
            _load_copy(ll if zero_init else psi, gpn, "largest layer" if zero_init else "model")
        ]
    elif zero_init or per_param * Fraction(1, nodes) >= 4 * gpn:
        host = _per_param(
            psi, steady, nodes, " on the host" + (f", / {nodes} nodes" if nodes > 1 else "")
        )
    else:
        host = [_load_copy(psi, gpn, "model", _larger(4 * gpn, Fraction(per_param, nodes)))]
    cpu = _buffered(host, Fraction(buffer_factor), "the host estimate")
    return _deepspeed_row(3, offload_param, offload_optimizer, zero_init, gpu, cpu)


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


# --- Megatron-LM -----------------------------------------------------------------------------
def megatron_theoretical_memory(
    model: TransformerSpec,
    tensor: int = 1,
    pipeline: int = 1,
    data: int = 1,
    distributed_optimizer: bool = False,
    micro_batches: int | None = None,
) -> Estimate:
    """Megatron-LM ``report_theoretical_memory`` (megatron/training/theoretical_memory_usage.py) for
    a dense GPT with LayerNorm, tied embeddings, no GQA/MoE/SwiGLU, no virtual pipeline; in bytes.

    Weights and optimizer: the most loaded shard -- the first pipeline stage: (L/p layers of
    2h·(f + 2) + 4h² parameters, plus the final 2h layernorm, all over p) + the whole V·h embedding,
    over t -- times 18 B per parameter (bf16 params 2, fp32 grads 4, fp32 master + m + v 12), or
    6 + 12/d with the distributed optimizer. Megatron counts no biases and no position embeddings.

    Activations (first stage, Korthikanti et al. 2022, Table 2): with sequence parallelism and
    selective recomputation (``compute_activation_memory``) s·b·h·(18 + 4f/h) per layer × L (L/p
    layers × p micro-batches in flight), + 8·s·b·p (embedding input) + s·b·h·p (embedding dropout),
    × min(1, m/p) when m < p, + 4·s·b·h·(1 + V/h) (output layer and loss, when p = 1), all over t.
    Otherwise (``compute_activation_memory_without_sp``, which assumes selective recomputation):
    s·b·h·(10 + 24/t) per layer × L + the same embedding terms, × min(1, m/p), + 2·(s·b·V/t + s·b·h)
    when p = 1, then × 1.05 overhead. Printed in MiB labelled "MB"."""
    t, p, d = (
        positive_int(n, v) for n, v in (("tensor", tensor), ("pipeline", pipeline), ("data", data))
    )
    s, b, h, f, L, V = (
        model.seq,
        model.micro_batch,
        model.hidden,
        model.ffn,
        model.layers,
        model.vocab,
    )
    expect(L >= p, f"{L} layers cannot fill {p} pipeline stages")
    tensor_divides_heads(model, t)
    per_layer_params = 2 * h * (f + 2) + 4 * h * h
    block = L * per_layer_params + 2 * h
    shard = Fraction(Fraction(block, p) + V * h, t)
    why = (
        "the first stage holds (L·(2h(f+2) + 4h²) + 2h)/p + V·h = "
        f"{float(shard * t):,.0f} parameters (the whole embedding, no biases, no position "
        f"embeddings), / t = {float(shard):,.0f}"
    )
    weights = [
        Term("bf16 params (2 B)", 2 * shard, why, "params"),
        Term("fp32 main grads (4 B)", 4 * shard, why, "grads"),
        Term(
            "fp32 master + Adam m + v (12 B" + (f" / d = {d})" if distributed_optimizer else ")"),
            Fraction(12, d if distributed_optimizer else 1) * shard,
            why
            + ("; the distributed optimizer shards these over d" if distributed_optimizer else ""),
            "optimizer",
        ),
    ]
    sbh = s * b * h
    in_flight = (
        min(Fraction(1), Fraction(micro_batches, p))
        if micro_batches is not None and p > 1
        else Fraction(1)
    )
    flight = f" × min(1, m/p) = {in_flight}" if in_flight != 1 else ""
    sp_selective = model.sequence_parallel and model.recompute == "selective"
    # The two branches differ in the per-layer term, in dividing everything over t, and in the
    # output layer; the embedding terms are the same formula in both.
    if sp_selective:
        scale, note = in_flight / t, f"{flight}, / t"
        layers = Term(
            "transformer layers",
            sbh * (18 + Fraction(4 * f, h)) * L * scale,
            "s·b·h·(18 + 4f/h) per layer (= 34·s·b·h when f = 4h) × L layers (L/p layers × p "
            f"micro-batches in flight){note}",
            "activations",
        )
        output = Term(
            "output layer and loss",
            Fraction(4 * sbh + 4 * s * b * V, t),
            "4·s·b·h·(1 + V/h): inputs to the output layer and the fp32 logits, / t",
            "activations",
        )
        branch = "compute_activation_memory (sequence parallel + selective recomputation)"
    else:
        scale, note = in_flight, flight
        layers = Term(
            "transformer layers",
            sbh * (10 + Fraction(24, t)) * L * scale,
            "s·b·h·(10 + 24/t) per layer × L (selective recomputation assumed, no sequence "
            f"parallelism){note}",
            "activations",
        )
        output = Term(
            "output layer and loss",
            2 * (Fraction(s * b * V, t) + sbh),
            "2·(s·b·V/t + s·b·h): logits and final layernorm output",
            "activations",
        )
        branch = "compute_activation_memory_without_sp"
    act = [
        layers,
        Term("embedding input (token ids)", 8 * s * b * p * scale, f"8·s·b·p{note}", "activations"),
        Term("embedding dropout mask", sbh * p * scale, f"s·b·h·p{note}", "activations"),
    ] + ([output] if p == 1 else [])
    if not sp_selective:
        base = sum((x.bytes for x in act), Fraction(0))
        act.append(
            Term(
                "overhead factor 1.05",
                Fraction(base) / 20,
                "Megatron adds 5% for optimizer and other temporaries",
                "buffer",
            )
        )
    w = sum((x.bytes for x in weights), Fraction(0))
    a = sum((x.bytes for x in act), Fraction(0))
    printed = (
        f"Theoretical memory footprints: weight and optimizer={float(w / MiB):.2f} MB, "
        f"activation={float(a / MiB):.2f} MB, total={float((w + a) / MiB):.2f} MB"
    )
    return Estimate(
        f"Megatron-LM report_theoretical_memory ({branch})",
        "per GPU, first pipeline stage",
        tuple(weights + act),
        printed,
        'MiB (2^20 bytes), printed as "MB"',
    )


# --- Accelerate ------------------------------------------------------------------------------
#: ``accelerate estimate-memory``'s dtypes: the divisor of the fp32 size for the "Total Size"
#: column.
ACCELERATE_DTYPES: Mapping[str, int] = {"float32": 1, "float16": 2, "int8": 4, "int4": 8}


def accelerate_convert_bytes(size: float) -> str:
    """accelerate.utils.convert_bytes: powers of 1024 labelled KB, MB, GB, rounded with
    round(x, 2)."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"


def accelerate_training(psi: int, dtype: str = "float32", buffer_bytes: int = 0) -> Estimate:
    """The "Training using Adam" column of ``accelerate estimate-memory``
    (src/accelerate/commands/estimate.py, ``estimate_training_usage``), in bytes: the LARGEST of
    four phases, not their sum. With B = the model's fp32 size (4Ψ + ``buffer_bytes``: the empty
    model is built in float32 and its buffers, e.g. BERT's int64 position ids, are counted too):

    - float32: model B, gradients B, optimizer 2B, step 4B → 4B = 16Ψ;
    - float16 (mixed precision): model B (fp32 weights), gradients 1.5B (fp32 + fp16), optimizer 2B,
      step 2B → 2B = 8Ψ;
    - int8, int4: not estimated ("N/A"): no terms.
    """
    psi = positive_int("params", psi)
    expect(
        dtype in ACCELERATE_DTYPES,
        f"unknown Accelerate dtype {dtype!r}; known: {', '.join(ACCELERATE_DTYPES)}",
    )
    B = 4 * psi + buffer_bytes
    if dtype == "float32":
        phases = [
            Term("model (fp32 weights)", B, "phase 'model': the fp32 weights, B", "params"),
            Term("gradients (fp32)", B, "phase 'gradients': B", "grads"),
            Term("optimizer (Adam m + v)", 2 * B, "phase 'optimizer': 2B", "optimizer"),
            Term(
                "step (4 × model size)",
                4 * B,
                "phase 'step': weights + gradients + m + v, 4B",
                "step",
            ),
        ]
    elif dtype == "float16":
        phases = [
            Term("model (fp32 weights)", B, "phase 'model': the fp32 weights, B", "params"),
            Term(
                "gradients (fp32 + fp16)",
                B + B // 2,
                "phase 'gradients': 1.5B, 'weight gradient + computation (GEMM)'",
                "grads",
            ),
            Term("optimizer (Adam m + v)", 2 * B, "phase 'optimizer': 2B", "optimizer"),
            Term("step (= optimizer)", 2 * B, "phase 'step': the optimizer's 2B", "step"),
        ]
    else:
        phases = []
    total = max((x.bytes for x in phases), default=None)
    return Estimate(
        "Accelerate estimate-memory ('Training using Adam')",
        f"{dtype}, largest phase",
        tuple(phases),
        "N/A" if total is None else accelerate_convert_bytes(float(total)),
        'powers of 1024, printed as "KB/MB/GB"',
        rule="max",
    )


def accelerate_table(
    psi: int,
    buffer_bytes: int = 0,
    largest_layer: int | None = None,
    dtypes: Sequence[str] = tuple(ACCELERATE_DTYPES),
) -> tuple[tuple[str, str, str, str], ...]:
    """The rows of ``accelerate estimate-memory``: (dtype, Largest Layer, Total Size, Training using
    Adam), as it prints them. ``largest_layer`` is in parameters (fp32, 4 B each); None prints
    "?"."""
    B = 4 * positive_int("params", psi) + buffer_bytes
    rows = []
    for dtype in dtypes:
        divisor = ACCELERATE_DTYPES[dtype]
        layer = (
            "?" if largest_layer is None else accelerate_convert_bytes(4 * largest_layer / divisor)
        )
        rows.append(
            (
                dtype,
                layer,
                accelerate_convert_bytes(B / divisor),
                accelerate_training(psi, dtype, buffer_bytes).printed,
            )
        )
    return tuple(rows)


# --- ours, and the reconciliation ----------------------------------------------------------
def ours(
    report: Report,
    quantity: str = "per GPU",
    host: bool = False,
    per_node: int = 1,
    transient: Sequence[str] = (),
) -> Estimate:
    """Our derivation as an Estimate: the persistent P, G, O bytes on the device (or, ``host=True``,
    in host memory, times ``per_node`` devices sharing a host), plus the named ``transient`` terms
    of the peak phase (e.g. "activations"). Exact bytes; printed as GB (10^9) and GiB (2^30)."""
    memory = report.memory
    where = memory.host if host else memory.device
    p = report.precision
    terms = [
        Term(
            f"{state.value} ({p.bytes_per(state)} B/param)",
            where[state] * per_node,
            f"{p.name}: {p.bytes_per(state)} B per parameter of Ψ = {report.model.psi:,}, divided "
            "by each axis it is split on "
            f"({report.strategy.placement.mode(state, 'data').value} on data)",
            state.value,
        )
        for state in (State.PARAMS, State.GRADS, State.OPTIMIZER)
    ]
    for name in transient:
        size = memory.transient_peak(name)
        if size:
            terms.append(
                Term(
                    name,
                    size,
                    f"transient, at its peak phase ({memory.peak_phase})",
                    "activations" if name == "activations" else "window",
                )
            )
    total = sum((t.bytes for t in terms), 0)
    return Estimate(
        f"ours ({report.strategy.name} [{report.strategy.placement}] on {report.mesh}, {p.name})",
        quantity,
        tuple(terms),
        f"{float(Fraction(total) / 10**9):.6g} GB ({float(Fraction(total) / GiB):.6g} GiB)",
        "GB = 10^9 bytes, GiB = 2^30 bytes",
    )


@dataclass(frozen=True)
class Line:
    """One kind of term on both sides: their bytes, ours, and why they differ (or that they
    agree)."""

    kind: str
    theirs: Bytes
    ours: Bytes
    why: str

    @property
    def agrees(self) -> bool:
        return self.theirs == self.ours


@dataclass(frozen=True)
class Reconciliation:
    """Their estimate against ours, kind by kind (KINDS order)."""

    theirs: Estimate
    ours: Estimate
    lines: tuple[Line, ...]

    @property
    def agrees(self) -> bool:
        """True when the two totals are equal to the byte."""
        return self.theirs.total_bytes == self.ours.total_bytes


def reconcile(theirs: Estimate, mine: Estimate) -> Reconciliation:
    """Line up two estimates kind by kind. A line's ``why`` names the terms on each side; a kind
    found on one side only is something the other does not count. Under a "max" rule the lines
    are the phases, and the last line says the figure is the largest one, not their sum."""
    lines = []
    for kind in KINDS:
        mine_t = [t for t in mine.terms if t.kind == kind]
        their_t = [t for t in theirs.terms if t.kind == kind]
        if not mine_t and not their_t:
            continue
        a, b = theirs.kind_bytes(kind), mine.kind_bytes(kind)
        if a == b == 0:
            continue
        if a == b:
            why = "; ".join(t.why for t in their_t)
        else:
            why = (
                "they: "
                + ("; ".join(f"{t.name} -- {t.why}" for t in their_t) or "not counted")
                + " | we: "
                + ("; ".join(f"{t.name} -- {t.why}" for t in mine_t) or "not counted")
            )
        lines.append(Line(kind, a, b, why))
    if theirs.rule != mine.rule:
        lines.append(
            Line(
                "total",
                theirs.total_bytes,
                mine.total_bytes,
                f"they print the {'largest' if theirs.rule == 'max' else 'sum'} of their terms, "
                f"we the {'largest' if mine.rule == 'max' else 'sum'} (what is alive at once)",
            )
        )
    return Reconciliation(theirs, mine, tuple(lines))


#: The public names (a notebook imports only these).
__all__ = [
    "ACCELERATE_DTYPES",
    "Bytes",
    "DEEPSPEED_PLACEMENTS",
    "DeepSpeedRow",
    "Estimate",
    "KINDS",
    "Line",
    "Reconciliation",
    "Term",
    "ZERO2_GPU_FORMULAS",
    "accelerate_convert_bytes",
    "accelerate_table",
    "accelerate_training",
    "deepspeed_printout",
    "deepspeed_table",
    "deepspeed_zero2",
    "deepspeed_zero3",
    "megatron_theoretical_memory",
    "ours",
    "reconcile",
]
