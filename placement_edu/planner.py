"""A planner: which placement, on which mesh, trains this model fastest within the memory budget?

It derives nothing new. For every mesh r·d·t·p = devices and every placement the core knows
(dp, zero1/2/3, fsdp_grad_op and hsdp on the data axes, composed with Megatron tensor parallelism,
with and without sequence parallelism, and pipeline parallelism) and every recomputation choice,
it asks ``pricing.price`` -- the price ``placement-edu time`` gives one configuration -- for the
peak bytes (SPEC §3) and the step time (SPEC §9), drops what does not fit, and ranks the rest.
Read top to bottom:

- ``default_transformer``: a documented transformer shape for a bare Ψ (``models.nearest_shape``)
- ``meshes``: every r·d·t·p = devices the planner tries
- ``plan``: enumerate, price, split feasible from infeasible, rank, explain
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterator

from placement_edu.configuration import TIE_BAND, Choice, Plan, PeakOf
from placement_edu.configuration import group_links as group_links  # (re-exported)
from placement_edu.errors import PlacementError, expect, positive_int
from placement_edu.experts import MoESpec, has_experts
from placement_edu.mesh import Mesh
from placement_edu.models import Shape, TransformerSpec, heads_divide, nearest_shape
from placement_edu.models import per_layer_model as per_layer_model  # (re-exported)
from placement_edu.precision import Precision
from placement_edu.pricing import (
    DATA_STRATEGIES,
    NO_SYNC_STRATEGIES,
    RECOMPUTES,
    compose,
    data_replicas,
    peak_bytes,
    price,
)
from placement_edu.setting import Setting, resolve
from placement_edu.strategies import Strategy
from placement_edu.timing import OVERLAPS, Hardware

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["Plan", "default_transformer", "divisors", "group_links", "plan"]

# --- a transformer for a bare Ψ ----------------------------------------------------------------
# SHAPES, nearest_shape and per_layer_model live in models/shapes.py: a bare Ψ means per_layer_model
# everywhere (models.as_model).


def default_transformer(
    psi: int, micro_batch: int = 1, seq: int | None = None
) -> tuple[TransformerSpec, str]:
    """A GPT-style TransformerSpec of about ``psi`` parameters, and the sentence that says so.

    The published shape nearest in Ψ (with f = 4h) gives L, h, a, s and V; the MLP width f is then
    chosen so that Ψ matches ``psi`` as closely as whole units allow. (Llama-2's SwiGLU MLP and
    grouped-query attention are not GPT-style blocks: with L = 80, h = 8192, a GPT-style block
    reaches 70e9 with f = 36,789 ≈ 4.5h instead of Llama's 3 × 28,672.) ``seq``: replaces the
    shape's sequence length."""
    psi = positive_int("number of parameters (psi)", psi)

    def with_ffn(shape: Shape, f: int) -> TransformerSpec:
        name, layers, h, a, s, v, _ = shape
        return TransformerSpec(
            layers=layers, hidden=h, heads=a, seq=s, vocab=v, ffn=f, micro_batch=micro_batch
        )

    name, layers, h, a, s, v, source = nearest_shape(psi)
    s = s if seq is None else positive_int("seq", seq)
    shape = (name, layers, h, a, s, v, source)
    # Ψ = L·(4h² + 9h + (2h + 1)·f) + (V + s)·h + 2h: solve for the whole f nearest to psi.
    fixed = layers * (4 * h * h + 9 * h) + (v + s) * h + 2 * h
    f = round((psi - fixed) / (layers * (2 * h + 1)))
    # the longest s that leaves f >= 1 (round() above: more than half a unit of f left)
    longest = (2 * (psi - (fixed - s * h)) - layers * (2 * h + 1) - 1) // (2 * h)
    expect(
        f >= 1 or seq is None or longest < 1,
        f"seq = {s:,} is too long for Ψ = {psi:,} in {name}'s shape: its position embedding "
        f"alone (s·h) has {s * h:,} parameters; expected seq at most {longest:,}, or give the "
        "transformer flags (--layers --hidden --heads --seq --vocab)",
    )
    expect(
        f >= 1,
        f"Ψ = {psi:,} is too small for any published shape ({name} without its MLP already has "
        f"{fixed:,}); give the transformer flags (--layers --hidden --heads --seq --vocab)",
    )
    model = with_ffn(shape, f)
    words = (
        f"no transformer flags: assumed {name}'s shape ({source}), GPT-style blocks, "
        f"L={layers} h={h} a={a} s={s} V={v} b={micro_batch}, with MLP width f={f:,} chosen so "
        f"that Ψ = {model.psi:,} (asked {psi:,})"
    )
    return model, words


# --- the meshes tried -----------------------------------------------------------------------------
#: Tensor parallelism stays inside one node (Narayanan et al. 2021, takeaway 1: t = GPUs per
#: server): t <= the hardware's gpus_per_node, or 8 (a DGX node) when one node holds every device.
MAX_TENSOR = 8
#: The planner tries a context axis (``schedule.context``) from this sequence length on: Megatron
#: Core's parallelism guide gives context parallelism as "best for long sequences (8K+ tokens)"
#: (docs.nvidia.com/megatron-core/developer-guide/latest/user-guide/parallelism-guide.html).
#: Below it, tensor and sequence parallelism, recomputation and b keep a sequence's activations
#: small beside the model state; the search stays as it was for s <= 4096.
CONTEXT_MIN_SEQ = 8192


def divisors(n: int) -> list[int]:
    """Every divisor of ``n``, ascending, from its prime factors: trial division stops at the
    square root of what is left, so 2^40 devices take 40 divisions (listing k up to √n took 2^20;
    61 of those were 1.3 s of a plan on 2^40 devices), a prime near 2^40 about 10^6."""
    divisors, p, rest = [1], 2, n
    while p * p <= rest:
        k = 0
        while rest % p == 0:
            rest, k = rest // p, k + 1
        divisors = [d * p**i for d in divisors for i in range(k + 1)]
        p += 1
    return sorted(divisors + [d * rest for d in divisors] if rest > 1 else divisors)


def meshes(
    devices: int, model: TransformerSpec | MoESpec, max_tensor: int = MAX_TENSOR
) -> Iterator[Mesh]:
    """Every mesh r·d·t·p = ``devices`` the planner tries: t a divisor of the heads up to
    ``max_tensor`` (one node), p at most the layers, and a replica axis only to split the data
    devices into hybrid-sharding groups of d·t <= ``max_tensor`` devices (one node each: tensor
    is the innermost axis and data the next, ``mesh.LAYOUT``). For a mixture of experts, no
    tensor axis (expert parallelism is derived beside dp and pipeline stages only,
    ``experts.check_expert_axis``) and each expert axis carved from the data devices: e dividing
    d and E, its group inside one node (e <= ``max_tensor``)."""
    if has_experts(model):
        yield from _expert_meshes(devices, model, max_tensor)
        return
    for t in divisors(devices):
        if t > max_tensor or not heads_divide(model, t):
            continue
        for p in divisors(devices // t):
            if p > model.layers:
                continue
            data = devices // (t * p)
            yield (
                Mesh.of(
                    **{a: n for a, n in (("data", data), ("tensor", t), ("pipeline", p)) if n > 1}
                )
                if data * t * p > 1
                else Mesh.of(data=1)
            )
            # a long sequence: a context axis of c > 1 carved from the data devices, c dividing s
            for c in divisors(data) if model.seq >= CONTEXT_MIN_SEQ else []:
                if c > 1 and model.seq % c == 0:
                    shape = (("data", data // c), ("context", c), ("tensor", t), ("pipeline", p))
                    yield Mesh.of(**{a: n for a, n in shape if n > 1 or a == "data"})
            for d in divisors(data):
                if 1 < d < data and d * t <= max_tensor:
                    yield Mesh.of(
                        **{
                            a: n
                            for a, n in (
                                ("replica", data // d),
                                ("data", d),
                                ("tensor", t),
                                ("pipeline", p),
                            )
                            if n > 1
                        }
                    )


def _expert_meshes(devices: int, model: MoESpec, max_node: int) -> Iterator[Mesh]:
    """data·expert·pipeline = ``devices``: every p up to the layers, every e dividing E and the
    data devices, up to a node."""
    for p in divisors(devices):
        if p > model.layers:
            continue
        data = devices // p
        for e in divisors(math.gcd(data, model.experts)):
            if e <= max_node:
                axes = (("data", data // e), ("expert", e), ("pipeline", p))
                yield (
                    Mesh.of(**{a: n for a, n in axes if n > 1}) if devices > 1 else Mesh.of(data=1)
                )


def plan(
    model: TransformerSpec | MoESpec | Setting,
    devices: int,
    memory_bytes: int | None = None,
    hardware: str | Hardware = "h100-nvlink-ib",
    precision: str | Precision = "mixed_adam",
    global_batch: int | None = None,
    overlap: str = "per_pass",
    recomputes: tuple[str, ...] = RECOMPUTES,
    assumption: str = "",
    tie_band: float = TIE_BAND,
    peak_of: PeakOf | None = None,
) -> Plan:
    """Rank every placement of ``model`` on ``devices`` devices that fits ``memory_bytes`` per
    device (default: the hardware's memory) by predicted step time, and choose among the ties:
    of the plans within ``tie_band`` of the fastest (``Plan.ties``), the simplest
    (``simplicity``: ``Plan.chosen``, ``Plan.reason``). ``model`` may be a ``Setting``
    (``setting.resolve``: its model, hardware, precision and memory budget); the other forms are
    resolved into one here, once.

    ``global_batch``: sequences per optimizer step (default 1024: Llama 2's 4M tokens at s = 4096).
    Each data-parallel replica (r·d of them) takes global_batch/(r·d) sequences in micro-batches of
    the model's b: m = global_batch/(r·d·b); a mesh that does not divide the batch is skipped.
    Peak bytes are rank 0's (pipeline stage 0 holds the most activations under 1F1B): the
    formula's, or ``peak_of``'s where it gives one (``cli.one_peak.planner_peaks``: a real
    module's)."""
    setting = (
        model
        if isinstance(model, Setting)
        else resolve(None, model, None, precision, hardware, memory=memory_bytes)
    )
    model = setting.model  # type: ignore[assignment]
    expect(
        isinstance(model, (TransformerSpec, MoESpec)),
        f"the planner needs a TransformerSpec or an MoESpec (to price tp, pp and "
        f"activations), got {type(model).__name__}",
    )
    assert isinstance(model, (TransformerSpec, MoESpec))
    if has_experts(model):
        recomputes = ("none",)  # no recomputation is modelled for an MoE layer
    devices = positive_int("devices", devices)
    batch = positive_int("global batch (sequences)", 1024 if global_batch is None else global_batch)
    expect(overlap in OVERLAPS, f"unknown overlap model {overlap!r}; known: {', '.join(OVERLAPS)}")
    for r in recomputes:
        expect(r in RECOMPUTES, f"unknown recompute choice {r!r}; known: {', '.join(RECOMPUTES)}")
    expect(
        isinstance(tie_band, (int, float)) and 0 <= tie_band < 1,
        f"tie_band is a fraction of the fastest step from 0 to 1 (0.02 = 2 %), got {tie_band!r}",
    )
    search = _Search(model, setting, overlap, peak_of, tie_band)
    runs = search.without_context(devices, batch, recomputes)
    search.with_context(runs)
    search.fits.sort(key=lambda c: (c.time.total_s, c.peak_bytes))  # type: ignore[union-attr]
    search.over.sort(key=lambda c: c.over_bytes)
    return Plan(
        model,
        devices,
        setting.hardware,
        setting.precision,
        setting.budget_bytes,
        batch,
        overlap,
        tuple(search.fits),
        tuple(search.over),
        tuple(search.skipped),
        assumption,
        float(tie_band),
    )


#: A candidate apart from its context degree and attention: (tensor, pipeline, data·context, data
#: strategy, sequence parallel, unsharded accumulation, model chunks per rank, recompute).
Key = tuple[int, int, int, str, bool, bool, int, str]
#: The model chunks per pipeline rank of the interleaved candidates (Narayanan et al. 2021
#: §2.2.2): two, the smallest interleaving, which halves 1F1B's bubble for twice its sends.
INTERLEAVE = 2


def variant_of(key: Key) -> Key | None:
    """The plain candidate a variant (``no_sync`` or interleaved) is tried beside; None for a
    plain one. A variant needs more memory than its plain candidate (+|G| unsharded; p + (p-1)/v
    micro-batches in flight on the first stage instead of p), so it is priced only where that
    one fits."""
    return None if key[5:7] == (False, 1) else (*key[:5], False, 1, key[7])


#: One candidate's meshes that differ only in their context degree, ascending in it, each with its
#: strategy when asked.
Run = list[tuple[Mesh, Callable[[], Strategy]]]


def candidates(
    mesh: Mesh, model: TransformerSpec | MoESpec, batch: int, recomputes: tuple[str, ...]
) -> list[tuple[Key, str, Callable[[], Strategy]]] | str:
    """(key, attention, its strategy when asked) of each candidate on ``mesh``; or why the mesh
    is skipped (its data replicas do not split the batch)."""
    replicas = data_replicas(mesh)
    if batch % (replicas * model.micro_batch):
        return (
            f"{mesh}: {batch} sequences do not split into {replicas} replicas × micro-batches "
            f"of {model.micro_batch}"
        )
    m = batch // (replicas * model.micro_batch)
    p, plain_mesh = mesh.degree("pipeline"), mesh.degree("context") == 1
    # rule 5's other choice where a sharded gradient would be reduced per micro-batch
    no_syncs = (False, True) if m > 1 and mesh.degree("data") > 1 and plain_mesh else (False,)
    # interleaved 1F1B where Megatron's rule allows it: m a multiple of p, v·p equal layer chunks
    chunks = (
        (1, INTERLEAVE)
        if p > 1
        and plain_mesh
        and m % p == 0
        and model.layers % (INTERLEAVE * p) == 0
        and not has_experts(model)
        else (1,)
    )
    datas = (
        ["zero3"]
        if mesh.degree("replica") > 1
        else ["dp"]  # expert parallelism beside a data axis that keeps its states whole
        if mesh.degree("expert") > 1
        else list(DATA_STRATEGIES)
        if mesh.degree("data") > 1
        else ["dp"]
    )
    # Megatron's sequence parallelism with every tensor-parallel plan (SPEC §3, §4)
    parallel_sequences = (False, True) if mesh.degree("tensor") > 1 else (False,)
    # on a context axis the ring always, Ulysses where each rank gets whole key-value heads
    c, t = mesh.degree("context"), mesh.degree("tensor")
    attentions = ("ring", "ulysses") if c > 1 and heads_divide(model, c * t) else ("ring",)
    base = (t, p, c * mesh.degree("data"))
    return [
        (
            (*base, data, sp, no_sync, v, recompute),
            attention,
            partial(_composed, data, mesh, m, sp, attention, no_sync, v),
        )
        for data, sp, attention, no_sync, v in itertools.product(
            datas, parallel_sequences, attentions, no_syncs, chunks
        )
        if not no_sync or data in NO_SYNC_STRATEGIES
        for recompute in recomputes
    ]


def _composed(
    data: str, mesh: Mesh, m: int, sp: bool, attention: str, no_sync: bool, v: int
) -> Strategy:
    """``compose``'s strategy, interleaved over ``v`` chunks a rank where v > 1."""
    strategy = compose(data, mesh, m, sp, attention, no_sync)
    return strategy.with_(pipeline_schedule="interleaved", virtual_stages=v) if v > 1 else strategy


@dataclass
class _Search:
    """One plan's search: what it prices with, and what it found so far."""

    model: TransformerSpec | MoESpec
    setting: Setting
    overlap: str
    peak_of: PeakOf | None
    tie_band: float = TIE_BAND
    fits: list[Choice] = field(default_factory=list)
    over: list[Choice] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: The candidates that fit on a mesh without a context axis (no context degree is listed).
    fitted: dict[Key, Choice] = field(default_factory=dict)

    def priced(self, strategy: Strategy, mesh: Mesh, recompute: str) -> Choice | None:
        """``price``'s choice, filed as fitting or over; None (said in ``skipped``) if refused."""
        s = self.setting
        try:
            choice = price(
                strategy,
                self.model,  # type: ignore[arg-type]
                mesh,
                recompute,
                s.hardware,
                s.precision,
                self.overlap,
                s.budget_bytes,
                self.peak_of,
            )
        except PlacementError as error:
            self.skipped.append(f"{strategy.name} on {mesh}: {error}")
            return None
        (self.over if choice.time is None else self.fits).append(choice)
        return choice

    def without_context(
        self, devices: int, batch: int, recomputes: tuple[str, ...]
    ) -> dict[tuple[Key, str], Run]:
        """Every candidate on a mesh without a context axis priced; those with one gathered into
        runs, by candidate, for ``with_context``."""
        runs: dict[tuple[Key, str], Run] = {}
        variants: list[tuple[Key, Mesh, Callable[[], Strategy]]] = []
        hw = self.setting.hardware
        for mesh in meshes(devices, self.model, hw.gpus_per_node or MAX_TENSOR):
            tried = candidates(mesh, self.model, batch, recomputes)
            if isinstance(tried, str):
                self.skipped.append(tried)
                continue
            refused: set[tuple[int, int, int, str, bool, bool, int]] = set()
            for key, attention, strategy_of in tried:
                if mesh.degree("context") > 1:
                    runs.setdefault((key, attention), []).append((mesh, strategy_of))
                elif variant_of(key) is not None:
                    variants.append((key, mesh, strategy_of))
                elif key[:-1] not in refused:  # (refused once: refused for every recompute)
                    choice = self.priced(strategy_of(), mesh, key[-1])
                    if choice is None:
                        refused.add(key[:-1])
                    elif choice.time is not None:
                        self.fitted[key] = choice
        self.variants(variants)
        return runs

    def variants(self, variants: list[tuple[Key, Mesh, Callable[[], Strategy]]]) -> None:
        """The ``no_sync`` and interleaved variants priced where they could change the choice:
        their plain candidate fits (a variant needs more memory, ``variant_of``) and they could
        save more than the tie band of its step -- interleaved, (1 - 1/v) of its bubble (the same
        collectives, v× the pipeline's sends); ``no_sync``, its exposed communication (it cuts
        only the data axis') -- and the least step they could reach, the plain one's less that
        saving, is inside the tie band of the fastest plain plan. A smaller gain would be a tie
        with the plain plan, on the same mesh, with more memory. The others are counted in
        ``skipped``."""
        fastest = min((c.time.total_s for c in self.fits if c.time), default=0.0)
        unpriced = 0
        for key, mesh, strategy_of in variants:
            plain = self.fitted.get(variant_of(key))  # type: ignore[arg-type]
            t = None if plain is None else plain.time
            no_sync, v = key[5], key[6]
            saving = 0.0 if t is None else t.exposed_comm_s if no_sync else t.bubble_s * (1 - 1 / v)
            if t is None or saving <= self.tie_band * t.total_s:
                unpriced += 1
            elif t.total_s - saving > fastest * (1 + self.tie_band):
                unpriced += 1
            else:
                self.priced(strategy_of(), mesh, key[-1])
        if unpriced:
            self.skipped.append(
                f"{unpriced:,} variants (no_sync, interleaved:{INTERLEAVE}) not priced: their "
                "plain candidate does not fit, or they could save no more than the tie band of "
                "its step, or not reach the tie band of the fastest"
            )

    def fits_at(self, run: Run, i: int, recompute: str) -> bool:
        """Whether the ``i``-th mesh of ``run`` fits the budget (the peak price compares: the
        module's where ``peak_of`` has one)."""
        mesh, strategy = run[i][0], run[i][1]()
        try:
            measured = self.peak_of(strategy, mesh, recompute) if self.peak_of else None
            if measured is None:
                precision = self.setting.precision
                measured = peak_bytes(strategy, self.model, mesh, recompute, precision)  # type: ignore[arg-type]
            return measured <= self.setting.budget_bytes
        except PlacementError:
            return False  # (said in the skipped list if it is the one listed)

    def with_context(self, runs: dict[tuple[Key, str], Run]) -> None:
        """A context axis carved from the data devices shrinks activations as c grows (the other
        states are sharded over data × context alike): of the context degrees of one candidate,
        only the smallest that fits is listed (found by bisection), none where the same
        candidate fits without a context axis, and the largest (the least excess) where none
        fits. The search is then a few pricings per candidate, not one per divisor of the
        devices: 2^40 devices, s = 2^17 answer."""
        pruned = 0
        for (key, _), run in runs.items():
            recompute = key[-1]
            if key in self.fitted:
                pruned += len(run)
                continue
            # the largest c first (most often nothing fits), then a bisection for the first fit
            last = len(run) - 1
            low, high = (0, last) if self.fits_at(run, last, recompute) else (last, last)
            while low < high:
                mid = (low + high) // 2
                low, high = (low, mid) if self.fits_at(run, mid, recompute) else (mid + 1, high)
            mesh, strategy_of = run[low]  # the first that fits, else the largest c
            self.priced(strategy_of(), mesh, recompute)
            pruned += len(run) - 1
        if pruned:
            self.skipped.append(
                f"{pruned:,} context degrees not listed: of each candidate's, the smallest that "
                "fits (none where it fits without a context axis), else the largest"
            )
