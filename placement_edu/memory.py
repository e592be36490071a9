"""Per-device memory derived from the placement (SPEC §2, §3).

Persistent bytes: each model state's size divided by the degree of every axis it is split on
(S, SG, OFF), on the device unless offloaded. Transient bytes are named terms per phase -- the
gather window, the gradient reduce bucket, offload staging, activations -- never folded silently
into the model-state figure the ZeRO tables print. Peak = persistent + the largest phase.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any

from placement_edu.experts import check_expert_axis
from placement_edu.mesh import Mesh
from placement_edu.models import Model, Number, TransformerSpec, UnitRun, prefetched_window
from placement_edu.models.ideal import IdealSlices
from placement_edu.logits import logits_and_loss
from placement_edu.placement import (
    GATHERED,
    HOST_MODES,
    MODEL_STATES,
    PHASES,
    SPLIT_MODES,
    Mode,
    Placement,
    State,
)
from placement_edu.precision import Precision
from placement_edu.axes import layers_on_stage, model_axis_degree, split_axes, validate
from placement_edu.shown import Shown
from placement_edu.strategies import LOOPED_SCHEDULES, PipelineSchedule, Strategy
from placement_edu.units import exact, fmt_bytes, plain, total
from placement_edu.schedule.context import context_applies, context_buffer_bytes
from placement_edu.schedule.pipeline import looped_in_flight

# --- the transient terms, by name (SPEC §3) -----------------------------------------------------
#: SG parameters gathered for use: the unit computing and the next, prefetched (two units at a
#: time), or all of them when kept through backward.
GATHER_WINDOW = "gather_window"
#: A whole, unreduced (partial) gradient before it is reduce-scattered to its owners.
REDUCE_BUCKET = "reduce_bucket"
#: The padded copy the all-gather after an owner-only step fills (a whole state is stored unpadded).
GATHER_BUFFER = "gather_buffer"
#: One unit of offloaded state on its way over the host link (SPEC §7).
OFFLOAD_STAGING = "offload_staging"
#: Activations kept from forward for backward: the state's own name.
ACTIVATIONS = State.ACTIVATIONS.value
#: The head's and the loss's tensors on the last pipeline stage (``peak.logits_and_loss``).
LOGITS_AND_LOSS = "logits_and_loss"
#: Under full recomputation, the layer being recomputed: its full activations, live during its
#: backward (``TransformerSpec.recompute_working_set``).
RECOMPUTE_WORKING_SET = "recompute_working_set"
#: On a context axis, the attention inputs in flight: ring attention's K/V chunks (and dK/dV in
#: backward), Ulysses' head-split Q, K, V (``schedule.context.context_buffer_bytes``).
CONTEXT_BUFFERS = "context_buffers"
#: The named buffers, in the order a run's table prints them (activations apart).
TRANSIENT_BUFFERS: tuple[str, ...] = (GATHER_WINDOW, REDUCE_BUCKET, GATHER_BUFFER, OFFLOAD_STAGING)


@dataclass(frozen=True)
class Memory(Shown):
    """Bytes on one device. ``device``/``host``: persistent bytes per state. ``transient``: per
    phase, named terms in bytes. ``padding``: elements of padding the sharding rule adds."""

    device: dict[State, Number]
    host: dict[State, Number]
    transient: dict[str, dict[str, Number]]
    padding: int = 0

    @property
    def model_state(self) -> Number:
        """Persistent P + G + O on the device: the figure ZeRO's Table 1 prints."""
        return total(self.device[s] for s in MODEL_STATES)

    @property
    def host_total(self) -> Number:
        return total(self.host.values())

    def phase_total(self, phase: str) -> Number:
        return total(self.transient.get(phase, {}).values())

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=self.phase_total)

    @property
    def peak(self) -> Number:
        """Persistent device bytes plus the largest phase's transient bytes."""
        return total((self.model_state, max(self.phase_total(p) for p in PHASES)))

    def transient_peak(self, term: str) -> Number:
        return max((self.transient.get(p, {}).get(term, 0) for p in PHASES), default=0)

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) rows: persistent bytes per state, transient terms, the peak."""
        rows = [(f"{s.value} (persistent, device)", fmt_bytes(self.device[s])) for s in self.device]
        rows += [(f"{s.value} (host)", fmt_bytes(v)) for s, v in self.host.items() if v]
        rows.append(("model state (P+G+O)", fmt_bytes(self.model_state)))
        for phase, terms in self.transient.items():
            rows += [(f"{phase}: {term} (transient)", fmt_bytes(v)) for term, v in terms.items()]
        rows.append((f"peak (in {self.peak_phase})", fmt_bytes(self.peak)))
        if self.padding:
            rows.append(("padding added by sharding", f"{self.padding:,} elements"))
        return rows

    def __str__(self) -> str:
        width = max(len(label) for label, _ in self.lines())
        return "\n".join(f"{label.ljust(width)}  {value}" for label, value in self.lines())

    def to_dict(self) -> dict[str, Any]:
        """Bytes, exact: persistent per state, each phase's transient terms, the peak."""
        return {
            "params": plain(self.device[State.PARAMS]),
            "grads": plain(self.device[State.GRADS]),
            "optimizer": plain(self.device[State.OPTIMIZER]),
            "model_state": plain(self.model_state),
            "transient": {
                ph: {k: plain(v) for k, v in terms.items()} for ph, terms in self.transient.items()
            },
            "peak": plain(self.peak),
            "peak_phase": self.peak_phase,
            "host": plain(self.host_total),
            "host_by_state": {s.value: plain(v) for s, v in self.host.items()},
            "padding_elements": self.padding,
        }

    def differences(self, other: "Memory", terms: tuple[str, ...] = ()) -> list[str]:
        """What differs between this and ``other`` (e.g. predicted and measured), one sentence
        each: persistent bytes of each state on the device and on the host, and the peak of each
        transient term in ``terms``. Empty when they agree to the byte."""
        out = []
        for where, mine, theirs in (
            ("device", self.device, other.device),
            ("host", self.host, other.host),
        ):
            for state in MODEL_STATES:
                if mine.get(state, 0) != theirs.get(state, 0):
                    out.append(
                        f"{state} ({where}): {plain_bytes(mine.get(state, 0))} vs "
                        f"{plain_bytes(theirs.get(state, 0))}"
                    )
        for term in terms:
            if self.transient_peak(term) != other.transient_peak(term):
                out.append(
                    f"{term} (transient peak): {plain_bytes(self.transient_peak(term))} vs "
                    f"{plain_bytes(other.transient_peak(term))}"
                )
        return out


def plain_bytes(n: Number) -> str:
    return f"{n} B" if Fraction(n).denominator == 1 else f"{float(n):.6g} B"


def derive_memory(
    strategy: Strategy, model: Model, mesh: Mesh, precision: Precision, rank: int = 0
) -> Memory:
    """Bytes that ``rank`` of ``mesh`` holds under ``strategy`` (SPEC §3): the persistent model
    states, then the transient terms of each phase, step by step."""
    validate(strategy, mesh)
    check_expert_axis(model, mesh, strategy)
    pl, reshard = strategy.placement, strategy.reshard_after_forward
    device, host, terms, padding = model_state_terms(pl, reshard, model, mesh, precision, rank)
    terms += activation_terms(strategy, model, mesh, precision, mesh.coords(rank)["pipeline"])
    transient: dict[str, dict[str, Number]] = {phase: {} for phase in PHASES}
    for phase, name, size in terms:
        transient[phase][name] = size
    return Memory(device, host, transient, padding)


#: Transient terms as they are found: (phase, term, bytes).
Terms = list[tuple[str, str, Number]]
#: A device's model states: persistent bytes on the device and on the host, the transient terms
#: sharding and offloading add, and the padding elements sharding adds.
StateTerms = tuple[dict[State, Number], dict[State, Number], Terms, int]


def model_state_terms(
    pl: Placement,
    reshard_after_forward: bool,
    model: Model,
    mesh: Mesh,
    precision: Precision,
    rank: int = 0,
) -> StateTerms:
    """What the model states hold on ``rank``: persistent bytes, the sharding and offloading
    terms, the padding. They read the placement, resharding and the model's parameters, never
    its activations: a transformer's recomputation and sequence parallelism change none of them
    (``states_view``), so the planner's candidates that differ only there, or only in their
    micro-batches or context attention, share one derivation (cached for the Ψ-level models,
    which hash cheaply)."""
    view = states_view(model)
    if isinstance(view, IdealSlices):
        found = _cached_state_terms(pl, reshard_after_forward, view, mesh, precision, rank)
    else:
        found = model_state_terms_afresh(pl, reshard_after_forward, view, mesh, precision, rank)
    device, host, terms, padding = found
    return dict(device), dict(host), list(terms), padding


def states_view(model: Model) -> Model:
    """``model`` as its model states see it: a transformer without recomputation or sequence
    parallelism (both shape activations only; ``tests/test_memory_cache.py`` checks the states'
    terms are equal under every choice); any other model as it is."""
    if isinstance(model, TransformerSpec) and (
        model.recompute != "none" or model.sequence_parallel
    ):
        return _without_activation_choices(model)
    return model


@lru_cache(maxsize=64)
def _without_activation_choices(model: TransformerSpec) -> TransformerSpec:
    return replace(model, recompute="none", sequence_parallel=False)


def model_state_terms_afresh(
    pl: Placement,
    reshard_after_forward: bool,
    model: Model,
    mesh: Mesh,
    precision: Precision,
    rank: int,
) -> tuple[dict[State, Number], dict[State, Number], tuple[tuple[str, str, Number], ...], int]:
    """``model_state_terms``, derived every time: ``_cached_state_terms`` keeps it once for each
    of its inputs (the caller copies it)."""
    coords = mesh.coords(rank)
    device, host = persistent_bytes(pl, model, mesh, precision, coords)
    group = DataGroup(pl, model, mesh, coords)
    terms = sharding_terms(pl, reshard_after_forward, group, precision)
    terms += offload_staging(group, precision, host)
    split = any(pl.mode(s, "data") in SPLIT_MODES for s in MODEL_STATES)
    return device, host, tuple(terms), model.padding(group.d) if split else 0


_cached_state_terms = lru_cache(maxsize=4096)(model_state_terms_afresh)


def persistent_bytes(
    pl: Placement, model: Model, mesh: Mesh, precision: Precision, coords: dict[str, int]
) -> tuple[dict[State, Number], dict[State, Number]]:
    """Each model state's bytes on this device, divided by every axis it is split on: on the
    device, or in host memory when an axis offloads it."""
    device: dict[State, Number] = {}
    host: dict[State, Number] = {}
    for state in MODEL_STATES:
        size = model.local_elements(split_axes(pl, state, mesh), coords) * precision.bytes_per(
            state
        )
        offloaded = (
            any(pl.mode(state, axis) in HOST_MODES for axis, _ in mesh)
            or pl.mode(state, "data") in HOST_MODES
        )
        device[state], host[state] = (0, size) if offloaded else (size, 0)
    return device, host


@dataclass(frozen=True)
class DataGroup:
    """This device's data group: what a state's collectives on the data axis move."""

    pl: Placement
    model: Model
    mesh: Mesh
    coords: dict[str, int]

    @property
    def d(self) -> int:
        return self.mesh.degree("data")

    def local(self, state: State) -> Number:
        """The state's elements stored on this device (unpadded)."""
        return self.model.local_elements(split_axes(self.pl, state, self.mesh), self.coords)

    def full_local(self, state: State) -> Number:
        """The state's size on this device's data group, padded as its collectives move it."""
        axes = split_axes(self.pl, state, self.mesh, exclude="data")
        return self.model.traffic_elements(axes, self.d, self.coords)

    def runs(self, state: State) -> list[UnitRun]:
        """The state's gather units on this device's data group (padded, whole), in runs."""
        axes = split_axes(self.pl, state, self.mesh, exclude="data")
        return self.model.unit_runs(axes, self.d, self.coords)

    def largest_unit(self, state: State) -> Number:
        """The largest gather unit of the state on this device's data group (padded, whole)."""
        return max(size for size, _ in self.runs(state))


def sharding_terms(
    pl: Placement, reshard_after_forward: bool, group: DataGroup, precision: Precision
) -> Terms:
    """What sharding on the data axis holds for a while: the gather window of SG params, the
    reduce bucket of split grads, and the padded copies ZeRO's rule reads and fills."""
    d, terms = group.d, []
    if d > 1 and pl.mode(State.PARAMS, "data") in GATHERED:
        # gathered in the gather dtype (float8: converted weights at 1 B, the rest at 2)
        tensor = split_axes(pl, State.PARAMS, group.mesh, exclude="data").get("tensor", 1)
        gathered = precision.gather_bytes(group.model, tensor)
        # Resharded after forward: the unit computing and the next one, prefetched, are live
        # (``prefetched_window``). Kept (SHARD_GRAD_OP): all units by the end of forward and
        # through backward.
        window = (
            prefetched_window(group.runs(State.PARAMS)) * gathered
            if reshard_after_forward
            else group.full_local(State.PARAMS) * gathered
        )
        terms += [("forward", GATHER_WINDOW, window), ("backward", GATHER_WINDOW, window)]
    if d > 1 and pl.mode(State.GRADS, "data") in SPLIT_MODES:
        # Backward produces each unit's whole, unreduced (partial) gradient before it is
        # reduce-scattered to its owners: one unit's bucket is live. (A concrete model whose
        # parameters are not gathered by unit reduces its whole gradient at once.)
        by_unit = pl.mode(State.PARAMS, "data") in GATHERED or not group.model.reduces_per_unit
        bucket = group.largest_unit(State.GRADS) if by_unit else group.full_local(State.GRADS)
        terms.append(("backward", REDUCE_BUCKET, bucket * precision.wire_bytes(State.GRADS)))
    if d > 1 and pl.mode(State.OPTIMIZER, "data") in SPLIT_MODES:
        # ZeRO's rule moves equal, padded chunks. A whole (R) state is stored unpadded, so when the
        # rule pads, the reduce-scatter reads (and the all-gather after the step fills) a padded
        # copy: a transient the size of the padded buffer. None for the ideal Ψ/N formula.
        for state, phase, term in (
            (State.GRADS, "backward", REDUCE_BUCKET),
            (State.PARAMS, "step", GATHER_BUFFER),
        ):
            padded = group.full_local(state)
            if pl.mode(state, "data") is Mode.R and padded > group.local(state):
                terms.append((phase, term, padded * precision.bytes_per(state)))
    return terms


def offload_staging(group: DataGroup, precision: Precision, host: dict[State, Number]) -> Terms:
    """SPEC §7: a staging buffer is one unit on its way up (params) or down (grads), not the whole
    offloaded slice."""
    return [
        (
            "forward" if state is State.PARAMS else "backward",
            OFFLOAD_STAGING,
            Fraction(group.largest_unit(state) * precision.bytes_per(state), group.d),  # a slice
        )
        for state in MODEL_STATES
        if host[state] and state is not State.OPTIMIZER
    ]


def in_flight(strategy: Strategy, p: int, stage: int) -> int | Fraction:
    """The micro-batches whose activations ``stage`` of ``p`` holds at once under the strategy's
    pipeline schedule (1 without a pipeline)."""
    m = strategy.micro_batches
    if p > 1 and strategy.pipeline_schedule in LOOPED_SCHEDULES:
        return looped_in_flight(
            p,
            stage,
            m,
            strategy.virtual_stages,
            strategy.pipeline_schedule == PipelineSchedule.ZERO_BUBBLE,
        )
    if p > 1:
        return m if strategy.pipeline_schedule == PipelineSchedule.GPIPE else min(p - stage, m)
    return 1


def activation_terms(
    strategy: Strategy, model: Model, mesh: Mesh, precision: Precision, stage: int
) -> Terms:
    """What the forward pass leaves for backward on this pipeline stage: the activations of the
    micro-batches in flight, a context rank's key/value buffers, and the head's logits or a
    recomputed layer's working set."""
    t, p = (
        model_axis_degree(strategy, mesh, "tensor"),
        model_axis_degree(strategy, mesh, "pipeline"),
    )
    flight = in_flight(strategy, p, stage)
    attention = strategy.context_attention
    if isinstance(model, IdealSlices):
        return list(
            _cached_activation_terms(model, mesh, precision, stage, t, p, flight, attention)
        )
    return list(activation_terms_afresh(model, mesh, precision, stage, t, p, flight, attention))


def activation_terms_afresh(
    model: Model,
    mesh: Mesh,
    precision: Precision,
    stage: int,
    t: int,
    p: int,
    flight: int | Fraction,
    attention: str,
) -> tuple[tuple[str, str, Number], ...]:
    """``activation_terms`` from what they read of the strategy: the tensor and pipeline degrees
    that split the model, the micro-batches in flight and the context attention; derived every
    time (``_cached_activation_terms`` keeps them once for each: the planner's data placements
    share them)."""
    # A context rank keeps its chunk's activations: every term of Korthikanti's formula is linear
    # in the tokens it holds (attention's scores too: s/c queries × s keys under ring attention,
    # s × s for a/c heads under Ulysses), so 1/c of them.
    c = mesh.degree("context")
    context_applies(attention, model, mesh, t)
    activations = (
        model.activation_bytes_per_microbatch(t, Fraction(layers_on_stage(model, p, stage)))
        * flight
    )
    if c > 1:
        activations = exact(activations, c)
    terms: Terms = []
    if activations:
        terms += [("forward", ACTIVATIONS, activations), ("backward", ACTIVATIONS, activations)]
    in_flight_kv = context_buffer_bytes(attention, model, mesh, t, precision.activations)
    terms += [(phase, CONTEXT_BUFFERS, size) for phase, size in in_flight_kv.items()]
    if isinstance(model, TransformerSpec):
        terms += head_and_recompute(model, precision, t, c, last=stage == p - 1)
    return tuple(terms)


_cached_activation_terms = lru_cache(maxsize=4096)(activation_terms_afresh)


def head_and_recompute(
    model: TransformerSpec, precision: Precision, t: int, c: int, last: bool
) -> Terms:
    """The head's logits and loss (on the last stage), and the working set of a layer recomputed
    in backward: backward's two moments never overlap, so that phase holds the larger."""
    logits: dict[str, Number] = {"forward": 0, "backward": 0}
    if last:
        # One micro-batch's logits at a time, its vocabulary split over the tensor ranks
        # (Megatron's vocab-parallel head and cross-entropy): b·s·V/t per rank; a context
        # rank's head sees its s/c tokens.
        tokens = exact(model.micro_batch * model.seq, t * c)
        for phase, terms in logits_and_loss(tokens, model.vocab, precision.activations).items():
            logits[phase] = sum(terms.values())
    found: Terms = []
    if logits["forward"]:
        found.append(("forward", LOGITS_AND_LOSS, logits["forward"]))
    # The logits' gradient is freed once the head's backward has run, before any layer is
    # recomputed.
    working_set = model.recompute_working_set(t) / c  # the layer's, on s/c tokens
    if working_set > logits["backward"]:
        found.append(("backward", RECOMPUTE_WORKING_SET, working_set))
    elif logits["backward"]:
        found.append(("backward", LOGITS_AND_LOSS, logits["backward"]))
    return found
