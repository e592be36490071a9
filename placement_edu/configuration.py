"""One given configuration priced: where a step's time goes, its FLOP/s and MFU, its peak memory.

``plan`` ranks every configuration it generates; this prices the one a user runs ("Megatron,
t = 8, p = 6, d = 48, 4,096 tokens, 1,152 sequences"). It derives nothing new: the step time is
the planner's own (``planner.price``, the function ``plan`` calls for each candidate), and the
breakdown only splits that figure. Read top to bottom:

- ``DATA_PLACEMENTS`` and ``configured_strategy``: the data placement and its composition with tp
  and pp, named as ``plan`` names them (``planner.compose``)
- ``scaled``: the hardware at ``efficiency`` × its achieved FLOP/s
- ``peak_flops``: the dense bf16 peak of a preset's GPU (``timing.PEAK_FLOPS``), what MFU divides by
- ``collectives``: each kind of collective's seconds per pass (affine in m, as the planner's)
- ``price_configuration``: the ``Priced`` step -- time, breakdown, FLOP/s, MFU, peak bytes

Units: seconds, FLOPs, FLOP/s, bytes. FLOPs are counted as ``timing.FLOP_CONVENTION`` says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from placement_edu.errors import PlacementError, expect, shown
from placement_edu.mesh import Mesh
from placement_edu.models import (
    MAX_EVERY,
    TransformerSpec,
    every_kth,
    layer_k,
    tensor_divides_heads,
)
from placement_edu.planner import (
    DATA_STRATEGIES,
    RECOMPUTES,
    Choice,
    compose,
    overlap_streams,
    price,
)
from placement_edu.precision import Precision
from placement_edu.schedule import derive_schedule
from placement_edu.strategies import PIPELINE_SCHEDULES, Strategy
from placement_edu.timing import (
    FLOP_CONVENTION,
    OVERLAPS,
    PASSES,
    PEAK_FLOPS,
    Hardware,
    Overlapped,
    bucketed_by_pass,
    flops_per_token,
    megatron_flops_per_token,
    model_flops_per_token,
    on_critical_path,
    op_link,
    op_time,
)

#: The data placements ``time`` accepts: the planner's, and hsdp (zero3 with a replica axis).
DATA_PLACEMENTS: tuple[str, ...] = DATA_STRATEGIES + ("hsdp",)


#: What ``--schedule`` accepts: GPipe, 1F1B, zero bubble, interleaved 1F1B with V chunks per rank.
SCHEDULE_FORMS = (*PIPELINE_SCHEDULES, "zero_bubble", "interleaved:V")


def parsed_schedule(text: str) -> tuple[str, int]:
    """A schedule as ``--schedule`` names it, as (``Strategy.pipeline_schedule``, virtual stages):
    "1f1b" -> ("1f1b", 1); "interleaved:4" -> ("interleaved", 4), v >= 2 model chunks per rank."""
    name, colon, v = text.partition(":")
    if name == "interleaved":
        expect(
            v.isdigit() and int(v) >= 2,
            f"{shown(text)}: interleaved 1F1B is interleaved:V, V its model chunks per rank, an "
            "integer >= 2 (e.g. interleaved:2)",
        )
        return name, int(v)
    expect(
        not colon and name in SCHEDULE_FORMS,
        f"unknown pipeline schedule {shown(text)}; accepted: {', '.join(SCHEDULE_FORMS)}",
    )
    return name, 1


def configured_strategy(
    name: str, mesh: Mesh, micro_batches: int, sequence_parallel: bool, schedule: str
) -> Strategy:
    """The strategy ``name`` means on ``mesh``: its first part a data placement
    (``DATA_PLACEMENTS``), the rest -- if given -- the composition ``plan`` prints for this mesh
    (``zero1×tp×pp``; ``x`` for ``×``), checked against it. ``planner.compose`` builds it."""
    parts = name.replace("x", "×").split("×")  # no data placement's name has an x
    data = parts[0].removesuffix("+replica")
    expect(
        data in DATA_PLACEMENTS,
        f"unknown data placement {shown(parts[0])} in strategy {shown(name)}; accepted: "
        f"{', '.join(DATA_PLACEMENTS)}, optionally composed as plan prints it (e.g. zero1×tp×pp)",
    )
    replica = mesh.degree("replica") > 1
    expect(
        (data in ("zero3", "hsdp")) or not replica,
        f"strategy {shown(name)} on a mesh with a replica axis: the planner composes only zero3 "
        "there (hsdp: sharded in each group, replicated across groups); give hsdp or zero3",
    )
    expect(
        data != "hsdp" or replica,
        "strategy hsdp needs a replica axis in the mesh (e.g. replica=2,data=4)",
    )
    looped, v = parsed_schedule(schedule)
    p = mesh.degree("pipeline")
    expect(
        looped != "interleaved" or micro_batches % p == 0,
        f"interleaved 1F1B needs the micro-batches to be a multiple of the pipeline stages "
        f"(Megatron's rule): m = {micro_batches} over p = {p}; give a global batch that makes "
        f"m a multiple of {p}",
    )
    strategy = compose("zero3" if data == "hsdp" else data, mesh, micro_batches, sequence_parallel)
    strategy = strategy.with_(pipeline_schedule=looped, virtual_stages=v)
    expect(
        len(parts) == 1 or name.replace("x", "×") == strategy.name,
        f"strategy {shown(name)} does not match the mesh {mesh}: there the composition is "
        f"{strategy.name!r} (give the data placement alone, e.g. {data})",
    )
    return strategy


def scaled(hw: Hardware, efficiency: float) -> Hardware:
    """``hw`` at ``efficiency`` × its achieved FLOP/s (1.0: the preset as it is)."""
    expect(
        isinstance(efficiency, float) and 0 < efficiency and efficiency * hw.flops < float("inf"),
        f"efficiency is a number > 0 (1.0 = the preset's FLOP/s), got {efficiency!r}",
    )
    if efficiency == 1.0:
        return hw
    return replace(hw, flops=hw.flops * efficiency, name=f"{hw.name} × {efficiency:g}")


def peak_flops(hw: Hardware) -> float | None:
    """The dense bf16 peak FLOP/s of ``hw``'s GPU (``timing.PEAK_FLOPS``, by the preset's name:
    "h100-nvlink-ib" -> H100), or None for hardware of no known GPU (this_machine)."""
    return PEAK_FLOPS.get(hw.name.split("-")[0].upper())


def collectives(
    strategy: Strategy, model: TransformerSpec, mesh: Mesh, precision: Precision, hw: Hardware
) -> list[tuple[str, str, str, bool, float]]:
    """Each kind of collective of one step on rank 0: (op, axis, pass, on the critical path,
    seconds), the seconds of every op of that kind summed (``timing.op_time`` on ``op_link``, as
    ``comm_time`` prices them). Affine in m, as ``planner.comm_seconds``: derived at m = 1, 2."""
    m = strategy.micro_batches
    sums: list[dict[tuple[str, str, str, bool], float]] = []
    for k in (1, 2) if m > 2 else (m, m):
        schedule = derive_schedule(strategy.with_(micro_batches=k), model, mesh, precision)
        out: dict[tuple[str, str, str, bool], float] = {}
        for op, times in schedule.counted():
            link = None if op.once else op_link(op, hw, mesh)
            if link is None:
                continue
            key = (op.op, op.axis or "host", op.phase, on_critical_path(op))
            out[key] = out.get(key, 0.0) + times * op_time(op, link, hw.collectives)
        sums.append(out)
    one, two = sums
    return [
        (*key, one.get(key, 0.0) + (m - 1) * (two.get(key, 0.0) - one.get(key, 0.0)))
        for key in sorted(set(one) | set(two), key=lambda k: (PASSES.index(k[2]), k))
    ]


@dataclass(frozen=True)
class Priced:
    """One configuration's step on rank 0 (``choice``: the planner's figures) and what it makes.

    ``tokens_per_device``: global batch × s ÷ devices. ``model_flops``: per device per step,
    forward + backward, nothing replayed; ``hardware_flops``: with what recomputation replays.
    ``peak_flops``: the GPU's dense peak (None: unknown, no MFU). ``megatron_flops``: the model
    FLOPs in Megatron-LM's count (``timing.megatron_flops_per_token``), beside the package's.
    ``streams``: what the "bucketed" overlap models hide unit by unit (``timing.overlapped``;
    () under the others)."""

    choice: Choice
    hardware: Hardware
    overlap: str
    tokens_per_device: Fraction
    model_flops: float
    hardware_flops: float
    peak_flops: float | None
    collectives: tuple[tuple[str, str, str, bool, float], ...]
    megatron_flops: float = 0.0
    streams: tuple[Overlapped, ...] = ()

    @property
    def step_s(self) -> float:
        assert self.choice.time is not None
        return self.choice.time.total_s

    @property
    def fits(self) -> bool:
        """Whether rank 0's peak fits the hardware's device memory."""
        return self.choice.peak_bytes <= self.hardware.memory_bytes

    @property
    def tflops_per_gpu(self) -> float:
        """Model FLOPs per GPU per second, in 10^12."""
        return self.model_flops / self.step_s / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        return self.hardware_flops / self.step_s / 1e12

    @property
    def mfu(self) -> float | None:
        return None if self.peak_flops is None else self.tflops_per_gpu * 1e12 / self.peak_flops

    @property
    def hfu(self) -> float | None:
        if self.peak_flops is None:
            return None
        return self.hardware_tflops_per_gpu * 1e12 / self.peak_flops

    @property
    def megatron_mfu(self) -> float | None:
        """MFU with the model FLOPs Megatron-LM counts (its logs' TFLOP/s/GPU over the peak)."""
        if self.peak_flops is None:
            return None
        return self.megatron_flops / self.step_s / self.peak_flops

    def hidden(self, phase: str, critical: bool) -> str:
        """How a collective of ``phase`` fares under the overlap model (``timing.exposed``):
        "hidden"; "exposed" (no overlap, on the critical path, or in the optimizer step, which
        has no compute to hide under); or "partly exposed" when its pass's overlappable seconds
        exceed the pass's compute (the excess is exposed, not shared out among them)."""
        if self.overlap == "none" or (critical and self.overlap == "per_pass"):
            return "exposed"
        t = self.choice.time
        assert t is not None
        compute = {p: c for p, c, _ in t.by_pass}.get(phase, 0.0)
        waited = self.overlap == "per_pass"
        overlappable = sum(
            s for _, _, p, crit, s in self.collectives if p == phase and not (crit and waited)
        )
        if overlappable <= compute:
            return "hidden"
        return "partly exposed" if compute > 0 else "exposed"

    def stream(self, op: str, axis: str, phase: str) -> Overlapped | None:
        """The unit-wise collective of this kind under "bucketed" (None: not one of them)."""
        return next((s for s in self.streams if (s.op, s.axis, s.phase) == (op, axis, phase)), None)

    def crowded(self, phase: str) -> bool:
        """Under "bucketed": whether ``phase``'s overlappable collectives exceed the compute
        beside them, exposing more than the first gathered unit and the last reduced bucket
        (``timing.bucketed_by_pass`` against its waited and unit seconds)."""
        t = self.choice.time
        assert t is not None
        comm: dict[str, float] = {}
        waited: dict[str, float] = {}
        for _, _, p, crit, s in self.collectives:
            comm[p] = comm.get(p, 0.0) + s
            if crit and self.overlap == "bucketed":
                waited[p] = waited.get(p, 0.0) + s
        compute = {p: c for p, c, _ in t.by_pass}
        m = self.choice.strategy.micro_batches
        exposed = bucketed_by_pass(compute, comm, waited, self.streams, m).get(phase, 0.0)
        units = sum(s.unit_s for s in self.streams if s.hides_under == phase)
        return exposed - waited.get(phase, 0.0) - units > 1e-9 * max(exposed, 1e-30)

    def status(self, op: str, axis: str, phase: str, critical: bool) -> str:
        """How one kind of collective fares: ``hidden`` under "none" and the per-pass models;
        under "bucketed", a unit-wise collective says which unit stays exposed (the last
        reduced bucket or layer after backward, the first gathered before its pass; the step's
        all-gather moved into the next step's forward) and whether the rest hides."""
        if not self.overlap.startswith("bucketed"):
            return self.hidden(phase, critical)
        if critical and self.overlap == "bucketed":
            return "exposed"
        s = self.stream(op, axis, phase)
        if s is None:
            if phase not in ("forward", "backward"):
                return "exposed"
            return "partly exposed" if self.crowded(phase) else "hidden"
        where = (
            f"the last of {s.units} {s.unit}s after backward"
            if s.hides_under == "backward"
            else f"the first of {s.units} {s.unit}s before {s.hides_under}"
        )
        each = f" of each of {s.runs} micro-batches" if s.runs > 1 else ""
        moved = "moved into the next step's forward, " if s.phase != s.hides_under else ""
        if s.units == 1:
            return f"exposed ({moved}one {s.unit}: nothing to overlap)"
        rest = (
            "; the rest exceeds the compute beside it"
            if self.crowded(s.hides_under)
            else ", the rest hidden"
        )
        return f"partly exposed ({moved}{where}{each}: {s.unit_s:.4g} s{rest})"

    def units_of(self, op: str, axis: str, phase: str) -> dict[str, Any]:
        """Under "bucketed", a unit-wise collective's units for --json: how many per run, what
        they are (bucket, layer), runs per step, the pass it hides under, the exposed unit's
        seconds per step; {} for the others."""
        s = self.stream(op, axis, phase)
        if s is None:
            return {}
        return {
            "units": s.units,
            "unit": s.unit,
            "runs": s.runs,
            "hides_under": s.hides_under,
            "exposed_unit_s": s.unit_s,
        }

    def breakdown(self) -> dict[str, Any]:
        """Seconds: compute by pass, each kind of collective (hidden or exposed), the bubble."""
        t = self.choice.time
        assert t is not None
        return {
            "compute_s": {p: c for p, c, _ in t.by_pass if p != "step"},
            "comm_s": t.comm_s,
            "exposed_comm_s": t.exposed_comm_s,
            "bubble_s": t.bubble_s,
            "collectives": [
                {
                    "op": op,
                    "axis": axis,
                    "pass": phase,
                    "critical_path": critical,
                    "seconds": s,
                    "overlap": self.status(op, axis, phase, critical),
                    **self.units_of(op, axis, phase),
                }
                for op, axis, phase, critical, s in self.collectives
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        c = self.choice
        return {
            "step_s": self.step_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "flop_convention": FLOP_CONVENTION,
            "mfu_megatron": self.megatron_mfu,
            "peak_bytes": c.peak_bytes,
            "fits": self.fits,
            "memory_bytes": self.hardware.memory_bytes,
            "breakdown": self.breakdown(),
            "strategy": c.strategy.name,
            "mesh": dict(c.mesh.degrees),
            "micro_batches": c.strategy.micro_batches,
            "pipeline_schedule": c.strategy.pipeline_schedule,
            "virtual_stages": c.strategy.virtual_stages,
            "recompute": c.recompute,
            "overlap": self.overlap,
            "hardware": self.hardware.name,
            "achieved_flops": self.hardware.flops,
            "peak_flops": self.peak_flops,
            "tokens_per_device": float(self.tokens_per_device),
            "units": "seconds per optimizer step on rank 0; FLOP/s in 1e12; bytes",
        }


def price_configuration(
    model: TransformerSpec,
    mesh: Mesh,
    strategy: str,
    global_batch: int,
    hw: Hardware,
    precision: Precision,
    recompute: str = "none",
    sequence_parallel: bool = False,
    schedule: str = "1f1b",
    overlap: str = "per_pass",
    efficiency: float = 1.0,
    context_attention: str = "ring",
    balanced_stages: bool = False,
) -> Priced:
    """Price one configuration: ``global_batch`` sequences per step, split over the mesh's r·d
    data replicas in micro-batches of ``model.micro_batch`` (m = global_batch / (r·d·b), which
    must be whole), priced by ``planner.price`` on ``hw`` at ``efficiency`` × its FLOP/s. A
    context axis cuts each sequence into c chunks (it adds no replicas); ``context_attention``
    says how attention reaches the others ("ring" or "ulysses", ``schedule.context``);
    ``balanced_stages``: a pipeline split that counts the logit layer (``Strategy``)."""
    recompute = layer_k(recompute) or recompute
    expect(
        recompute in RECOMPUTES or every_kth(recompute),
        f"unknown recompute choice {shown(recompute)}; accepted: {', '.join(RECOMPUTES)}, or "
        f"layer:K (K from 1 to {MAX_EVERY:,})",
    )
    expect(
        not every_kth(recompute) or max(mesh.degree("tensor"), mesh.degree("context")) == 1,
        f"recompute {recompute} is priced on data, replica and pipeline axes; a checkpointed "
        f"layer's replay of the tensor and context collectives is not: {mesh} has one",
    )
    expect(
        overlap in OVERLAPS,
        f"unknown overlap model {shown(overlap)}; accepted: {', '.join(OVERLAPS)}",
    )
    sequence_parallel = sequence_parallel or "+sp" in strategy  # zero1×tp+sp, as plan names it
    expect(
        not sequence_parallel or mesh.degree("tensor") > 1,
        "sequence parallelism splits sequences over the tensor axis; the mesh has none "
        "(e.g. tensor=8)",
    )
    tensor_divides_heads(model, mesh.degree("tensor"))
    replicas = mesh.degree("replica") * mesh.degree("data")
    b = model.micro_batch
    if global_batch % (replicas * b):
        raise PlacementError(
            f"a global batch of {global_batch} sequences does not split into {replicas} data "
            f"replicas × micro-batches of {b}; expected a multiple of {replicas * b}"
        )
    m = global_batch // (replicas * b)
    built = configured_strategy(strategy, mesh, m, sequence_parallel, schedule)
    built = built.with_(context_attention=context_attention, balanced_stages=balanced_stages)
    chunks = built.virtual_stages * mesh.degree("pipeline")
    expect(
        built.virtual_stages == 1 or model.layers % chunks == 0,
        f"interleaved 1F1B over {mesh.degree('pipeline')} stages × {built.virtual_stages} chunks "
        f"splits the layers into {chunks} equal chunks: {model.layers} layers do not; give "
        f"--layers a multiple of {chunks}",
    )
    hw = scaled(hw, efficiency)
    choice = price(built, model, mesh, recompute, hw, precision, overlap)
    tokens = Fraction(global_batch * model.seq, mesh.world_size)
    shaped = replace(model, recompute=recompute, sequence_parallel=sequence_parallel)
    comm_model = replace(
        model,
        recompute="full"
        if recompute == "full" and max(mesh.degree("tensor"), mesh.degree("context")) > 1
        else "none",
        sequence_parallel=sequence_parallel,
    )
    return Priced(
        choice,
        hw,
        overlap,
        tokens,
        float(model_flops_per_token(shaped) * tokens),
        float(sum(flops_per_token(shaped, recompute).values()) * tokens),
        peak_flops(hw),
        tuple(collectives(built, comm_model, mesh, precision, hw)),
        float(megatron_flops_per_token(shaped) * tokens),
        streams=(
            overlap_streams(built, comm_model, mesh, precision, hw)
            if overlap.startswith("bucketed")
            else ()
        ),
    )
