"""Pricing: one configuration's peak bytes and step time, the one price ``plan`` asks of every
candidate and ``placement-edu time`` (``price_configuration``) of the configuration it is given.

It derives nothing new: the peak is ``derive_memory``'s (SPEC §3) -- or a real module's, where a
``PeakOf`` gives one -- and the step time ``timing``'s (SPEC §9, each group on the link where its
ranks sit). Read top to bottom:

- ``candidates.compose``: the placement on the data axis, composed with tp and pp (imported here)
- ``peak_bytes`` and ``price``: one candidate's peak and, when it fits, its step time
- ``comm_seconds``: the schedule's seconds, affine in the micro-batch count m (derived at m = 1, 2)
- ``traffic.data_traffic``: rule 5 counted, the "×m" of each plan line (imported here)
- ``DATA_PLACEMENTS`` and ``configured_strategy``: a strategy as ``time`` names it, checked against
  the mesh and built by ``compose``
- ``scaled``, ``peak_flops`` and ``collectives``: the hardware at an efficiency, the GPU's dense
  peak (what MFU divides by), each kind of collective's seconds
- ``price_configuration``: the ``Priced`` step -- time, breakdown, FLOP/s, MFU, peak bytes

The result types (``Choice``, ``Priced``) live in ``configuration``. Units: seconds, FLOPs, FLOP/s,
bytes. FLOPs are counted as ``timing.FLOP_CONVENTION`` says.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from functools import lru_cache, partial
from typing import TypedDict

from placement_edu.candidates import (
    DATA_STRATEGIES,
    NO_SYNC,
    NO_SYNC_STRATEGIES,
    RECOMPUTES,
    compose,
    data_replicas,
)
from placement_edu.configuration import Choice, PeakOf, Priced
from placement_edu.errors import PlacementError, expect, shown
from placement_edu.experts import MoESpec, has_experts
from placement_edu.memory import derive_memory
from placement_edu.mesh import Mesh
from placement_edu.models import (
    TransformerSpec,
    tensor_divides_heads,
)
from placement_edu import names
from placement_edu.placement import State
from placement_edu.precision import Precision
from placement_edu.roofline import optimizer_seconds
from placement_edu.schedule import derive_schedule
from placement_edu.setting import ALIASES, Setting, did_you_mean, resolve
from placement_edu.strategies import PIPELINE_SCHEDULES, Strategy
from placement_edu.traffic import at_micro_batches, cached_schedule, data_traffic
from placement_edu.timing.communication import comm_times
from placement_edu.timing import (
    OVERLAPS,
    PASSES,
    PEAK_FLOPS,
    Hardware,
    Overlapped,
    StepTime,
    combine,
    compute_time,
    flops_per_token,
    megatron_flops_per_token,
    model_flops_per_token,
    on_critical_path,
    op_link,
    op_time,
    overlapped,
)


# --- one candidate's peak and step time --------------------------------------------------------
@lru_cache(maxsize=4096)  # (a context run's bisection, then its price, ask twice)
def peak_bytes(
    strategy: Strategy, model: TransformerSpec, mesh: Mesh, recompute: str, precision: Precision
) -> int:
    """Rank 0's peak bytes (``derive_memory``, SPEC §3) of ``strategy`` on ``mesh``, with
    ``recompute`` and the strategy's sequence parallelism: what ``price`` compares with the
    budget."""
    shaped = _shaped(model, recompute, strategy.sequence_parallel)
    return int(math.ceil(derive_memory(strategy, shaped, mesh, precision).peak))


def price(
    strategy: Strategy,
    model: TransformerSpec,
    mesh: Mesh,
    recompute: str,
    hw: Hardware,
    precision: Precision,
    overlap: str,
    budget: int | None = None,
    peak_of: PeakOf | None = None,
) -> Choice:
    """One candidate priced, as ``plan`` prices each (``placement-edu time`` prices one): rank 0's
    peak bytes (``derive_memory``, SPEC §3) and, when it fits ``budget`` (None: always), its step
    time (SPEC §9) for ``strategy.micro_batches`` micro-batches of ``model``'s b sequences on each
    of the mesh's r·d data replicas. ``model``'s own recompute and sequence_parallel are replaced
    by ``recompute`` and the strategy's. ``precision.float8``: float8's GEMMs, on the roofline
    (``timing.compute_time``)."""
    sp = strategy.sequence_parallel
    shaped = _shaped(model, recompute, sp)
    measured = peak_of(strategy, mesh, recompute) if peak_of is not None else None
    # (torchtitan-op's peak: only a profile prices it, the formula has no term for it)
    formula = (
        None
        if measured is not None and recompute in TransformerSpec.PROFILE_ONLY
        else peak_bytes(strategy, model, mesh, recompute, precision)
    )
    peak, beside = (measured, formula) if measured is not None else (formula, None)
    assert peak is not None
    limit = peak if budget is None else budget
    if peak > limit:
        return Choice(strategy, mesh, recompute, peak, limit, formula_peak_bytes=beside)
    m = strategy.micro_batches
    tokens = Fraction(m * model.micro_batch * model.seq * data_replicas(mesh), mesh.world_size)
    paced = 1 if strategy.balanced_stages else mesh.degree("pipeline")  # the last stage's pace
    compute = compute_time(
        shaped, tokens, hw, recompute, mesh.degree("tensor"), paced, precision.float8_recipe
    )
    # Only full recomputation changes the schedule: it replays the tensor-parallel (and context-
    # parallel) collectives of forward in backward (SPEC §4). Price the others once.
    replays = recompute == "full" and max(mesh.degree("tensor"), mesh.degree("context")) > 1
    priced = _shaped(model, "full" if replays else "none", sp)
    comm = comm_seconds(strategy, priced, mesh, precision, hw)
    # tensor parallelism's collectives (and Ulysses' and the experts' all-to-alls): on the
    # critical path (SPEC §9)
    critical = (
        comm_seconds(strategy, priced, mesh, precision, hw, critical=True)
        if max(mesh.degree("tensor"), mesh.degree("context"), mesh.degree("expert")) > 1
        else None
    )
    streams = (
        overlap_streams(strategy, priced, mesh, precision, hw)
        if overlap.startswith("bucketed")
        else ()
    )
    time = combine(
        compute,
        comm,
        overlap,
        mesh.degree("pipeline"),
        m,
        critical,
        streams,
        strategy.pipeline_schedule,
        strategy.virtual_stages,
    )
    if hw.roofline and hw.memory_bandwidth is not None:
        time = with_optimizer_step(  # (the optimizer's state: the same whatever recomputes)
            time, optimizer_step_seconds(strategy, priced, mesh, precision, hw)
        )
    traffic = partial(data_traffic, strategy, priced, mesh, precision, hw)  # (when shown)
    return Choice(strategy, mesh, recompute, peak, limit, time, beside, traffic)


def with_optimizer_step(time: StepTime, seconds: float) -> StepTime:
    """``time`` with the optimizer step's ``seconds`` added to the step phase's compute, after
    the pipeline and the overlap are priced: it runs once, after the last backward, and the
    step's collectives need its result (nothing hides under it, no stage idles for it)."""
    by_pass = tuple((p, c + seconds if p == "step" else c, m) for p, c, m in time.by_pass)
    return replace(
        time,
        compute_s=time.compute_s + seconds,
        total_s=time.total_s + seconds,
        by_pass=by_pass,
    )


def optimizer_step_seconds(
    strategy: Strategy,
    model: TransformerSpec | MoESpec,
    mesh: Mesh,
    precision: Precision,
    hw: Hardware,
) -> float:
    """On the roofline, rank 0's optimizer step: AdamW with the hardware's kernels
    (``roofline.optimizer_seconds``: 80 B a parameter foreach, 28 fused) over the parameters whose
    optimizer state rank 0 holds on the device -- its optimizer bytes ÷ the precision's bytes a
    parameter -- at the HBM bandwidth. State offloaded to the host steps on the CPU: not priced."""
    assert hw.memory_bandwidth is not None
    held = derive_memory(strategy, model, mesh, precision).device.get(State.OPTIMIZER, 0)
    elements = int(held) // precision.optimizer
    return optimizer_seconds(elements, hw.memory_bandwidth, hw.optimizer)


# --- seconds of communication, affine in m --------------------------------------------------------
@lru_cache(maxsize=4096)
def comm_seconds(
    strategy: Strategy,
    model: TransformerSpec,
    mesh: Mesh,
    precision: Precision,
    hw: Hardware,
    critical: bool | None = None,
) -> dict[str, float]:
    """``timing.comm_time`` of the schedule at ``strategy.micro_batches`` = m, per phase
    (``critical``: as ``comm_time``'s, the ops on the critical path or the others only).

    Every per-step operation of a schedule runs once per step (start-up broadcasts, fsdp_grad_op's
    one gather, the optimizer's all-gather) or once per micro-batch (tensor-parallel collectives,
    pipeline sends, resharded gathers, and ZeRO-2/3's reductions under SPEC §4 rule 5), so its
    seconds are affine in m: derived at m = 1 and m = 2, they are exact at any m, without listing
    m micro-batches' operations (``tests/test_planner.py`` checks this against the full
    derivation)."""
    if critical is False:
        return _comm_seconds(strategy, model, mesh, precision, hw, (False,))[0]
    # (price asks for every op's and the critical path's: each schedule read once for both)
    return _comm_seconds(strategy, model, mesh, precision, hw, (None, True))[critical is True]


@lru_cache(maxsize=4096)
def _comm_seconds(
    strategy: Strategy,
    model: TransformerSpec,
    mesh: Mesh,
    precision: Precision,
    hw: Hardware,
    criticals: tuple[bool | None, ...],
) -> tuple[dict[str, float], ...]:
    """``comm_seconds`` for each of ``criticals`` (``timing.comm_times``)."""
    m = strategy.micro_batches
    one, two = (
        comm_times(
            cached_schedule(at_micro_batches(strategy, k), model, mesh, precision),
            hw,
            mesh,
            criticals,
        )
        for k in ((1, 2) if m > 2 else (m, m))
    )
    return tuple(
        {phase: at1[phase] + (m - 1) * (at2[phase] - at1[phase]) for phase in at1}
        for at1, at2 in zip(one, two)
    )


@lru_cache(maxsize=4096)
def overlap_streams(
    strategy: Strategy, model: TransformerSpec, mesh: Mesh, precision: Precision, hw: Hardware
) -> tuple[Overlapped, ...]:
    """``timing.overlapped`` from the schedules ``comm_seconds`` derives (m = 1 and 2, cached):
    what the "bucketed" overlap model hides unit by unit."""
    one, two = (
        cached_schedule(at_micro_batches(strategy, k), model, mesh, precision) for k in (1, 2)
    )
    return overlapped(strategy, model, mesh, precision, hw, (one, two))


@lru_cache(maxsize=64)
def _shaped(
    model: TransformerSpec | MoESpec, recompute: str, sequence_parallel: bool
) -> TransformerSpec | MoESpec:
    """``model`` with this recomputation choice and sequence parallelism (activations: SPEC §3);
    a mixture of experts as it is (none of either is modelled for it)."""
    if has_experts(model):
        return model
    return replace(model, recompute=recompute, sequence_parallel=sequence_parallel)


# --- one configuration, as ``time`` names it --------------------------------------------------
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
    (``zero1×tp×pp``; ``x`` for ``×``), checked against it. ``compose`` builds it."""
    given = names.parts(name)
    no_sync = given[0].endswith(NO_SYNC)
    data = given[0].removesuffix(NO_SYNC).removesuffix("+replica")
    data = ALIASES.get(data, data)  # one vocabulary: fit's fsdp2 is zero3
    expect(
        data in DATA_PLACEMENTS,
        f"unknown data placement {shown(given[0])} in strategy {shown(name)}; accepted: "
        f"{', '.join(DATA_PLACEMENTS)}, optionally composed as plan prints it (e.g. zero1×tp×pp)"
        + did_you_mean(data, DATA_PLACEMENTS),
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
    expect(
        not no_sync or data in NO_SYNC_STRATEGIES + ("hsdp",),
        f"strategy {shown(name)}: {NO_SYNC} (the gradient accumulated unsharded, reduced once a "
        f"step) is for the placements that shard it: {', '.join(NO_SYNC_STRATEGIES)}, hsdp "
        "(zero2's is zero1; dp and zero1 accumulate unsharded already)",
    )
    looped, v = parsed_schedule(schedule)
    p = mesh.degree("pipeline")
    expect(
        looped != "interleaved" or micro_batches % p == 0,
        f"interleaved 1F1B needs the micro-batches to be a multiple of the pipeline stages "
        f"(Megatron's rule): m = {micro_batches} over p = {p}; give a global batch that makes "
        f"m a multiple of {p}",
    )
    on_data = "zero3" if data == "hsdp" else data
    strategy = compose(on_data, mesh, micro_batches, sequence_parallel, no_sync=no_sync)
    strategy = strategy.with_(pipeline_schedule=looped, virtual_stages=v)
    expect(
        len(given) == 1 or names.spelled(name) == strategy.name,
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
    ``comm_time`` prices them). Affine in m, as ``comm_seconds``: derived at m = 1, 2."""
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


class PriceOptions(TypedDict, total=False):
    """``price_configuration``'s keywords beyond the setting and the batch (``time``'s flags), as
    ``tasks.price`` hands them on: their defaults are ``price_configuration``'s, stated there once.
    """

    sequence_parallel: bool
    schedule: str
    overlap: str
    efficiency: float
    context_attention: str
    balanced_stages: bool


def price_configuration(
    model: TransformerSpec | Setting,
    mesh: Mesh | str | None = None,
    strategy: str | None = None,
    global_batch: int = 0,
    hw: Hardware | str = "h100-nvlink-ib",
    precision: Precision | str = "mixed_adam",
    recompute: str = "none",
    sequence_parallel: bool = False,
    schedule: str = "1f1b",
    overlap: str = "per_pass",
    efficiency: float = 1.0,
    context_attention: str = "ring",
    balanced_stages: bool = False,
    peak_of: PeakOf | None = None,
) -> Priced:
    """Price one configuration: ``global_batch`` sequences per step, split over the mesh's r·d
    data replicas in micro-batches of ``model.micro_batch`` (m = global_batch / (r·d·b), which
    must be whole), priced by ``price`` on ``hw`` at ``efficiency`` × its FLOP/s. A
    context axis cuts each sequence into c chunks (it adds no replicas); ``context_attention``
    says how attention reaches the others ("ring" or "ulysses", ``schedule.context``);
    ``balanced_stages``: a pipeline split that counts the logit layer (``Strategy``);
    ``peak_of``: the peak from a module's profile (``price``), where there is one.

    ``model`` may be a ``Setting`` (``setting.resolve``): its model, mesh, hardware, precision and
    recomputation, and its strategy's name as ``strategy`` when none is given; the other forms are
    resolved into one here, once."""
    if isinstance(model, Setting):
        setting = model
        strategy = strategy or (setting.strategy.name if setting.strategy else None)
    else:
        setting = resolve(None, model, mesh, precision, hw, recompute=recompute)
    expect(
        isinstance(setting.model, TransformerSpec) and setting.mesh is not None,
        "price_configuration prices a TransformerSpec on a mesh (e.g. data=8,tensor=8), got "
        f"model {type(setting.model).__name__} on mesh {setting.mesh}",
    )
    expect(
        overlap in OVERLAPS,
        f"unknown overlap model {shown(overlap)}; accepted: {', '.join(OVERLAPS)}",
    )
    built = configured(
        setting,
        strategy or "dp",
        global_batch,
        sequence_parallel or names.sequence_parallel(strategy or ""),  # zero1×tp+sp, as plan names
        schedule,
    ).with_(context_attention=context_attention, balanced_stages=balanced_stages)
    hw = scaled(setting.hardware, efficiency)
    return priced_step(setting, built, global_batch, overlap, hw, peak_of)


def configured(
    setting: Setting, strategy: str, global_batch: int, sequence_parallel: bool, schedule: str
) -> Strategy:
    """The strategy ``price_configuration`` prices: ``strategy`` composed on the setting's mesh
    (``configured_strategy``) with m = global_batch / (r·d·b) micro-batches, each rule checked."""
    model, mesh, recompute = setting.model, setting.mesh, setting.recompute
    assert isinstance(model, TransformerSpec) and mesh is not None
    expect(
        recompute in RECOMPUTES or max(mesh.degree("tensor"), mesh.degree("context")) == 1,
        f"recompute {recompute} is priced on data, replica and pipeline axes; a checkpointed "
        f"layer's replay of the tensor and context collectives is not: {mesh} has one",
    )
    expect(
        not sequence_parallel or mesh.degree("tensor") > 1,
        "sequence parallelism splits sequences over the tensor axis; the mesh has none "
        "(e.g. tensor=8)",
    )
    tensor_divides_heads(model, mesh.degree("tensor"))
    replicas = mesh.degree("replica") * mesh.degree("data")
    b = model.micro_batch
    if global_batch <= 0 or global_batch % (replicas * b):
        raise PlacementError(
            f"a global batch of {global_batch} sequences does not split into {replicas} data "
            f"replicas × micro-batches of {b}; expected a multiple of {replicas * b}"
        )
    m = global_batch // (replicas * b)
    built = configured_strategy(strategy, mesh, m, sequence_parallel, schedule)
    chunks = built.virtual_stages * mesh.degree("pipeline")
    expect(
        built.virtual_stages == 1 or model.layers % chunks == 0,
        f"interleaved 1F1B over {mesh.degree('pipeline')} stages × {built.virtual_stages} chunks "
        f"splits the layers into {chunks} equal chunks: {model.layers} layers do not; give "
        f"--layers a multiple of {chunks}",
    )
    return built


def priced_step(
    setting: Setting,
    built: Strategy,
    global_batch: int,
    overlap: str,
    hw: Hardware,
    peak_of: PeakOf | None = None,
) -> Priced:
    """``built``'s step priced (``price``) on ``hw``, with its FLOPs and collectives."""
    model, mesh, recompute = setting.model, setting.mesh, setting.recompute
    assert isinstance(model, TransformerSpec) and mesh is not None
    precision, sp = setting.precision, built.sequence_parallel
    choice = price(built, model, mesh, recompute, hw, precision, overlap, peak_of=peak_of)
    tokens = Fraction(global_batch * model.seq, mesh.world_size)
    shaped = replace(model, recompute=recompute, sequence_parallel=sp)
    replays = recompute == "full" and max(mesh.degree("tensor"), mesh.degree("context")) > 1
    comm_model = replace(model, recompute="full" if replays else "none", sequence_parallel=sp)
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
