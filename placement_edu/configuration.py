"""A configuration's price: ``Choice`` (one candidate's peak bytes and, when it fits, its step
time, as ``plan`` ranks them), ``Priced`` (one configuration's step as ``placement-edu time``
shows it: where the time goes, its FLOP/s and MFU, its peak memory) and ``Plan`` (the ranked
choices, the ties and the one chosen, ``TIE_BAND`` and ``simplicity``). ``pricing`` computes the
first two and ``planner`` the plan; this module holds and shows them.

Units: seconds, FLOPs, FLOP/s, bytes. FLOPs are counted as ``timing.FLOP_CONVENTION`` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any, Callable, Optional

from placement_edu.experts import MoESpec
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.precision import Precision
from placement_edu.strategies import Strategy
from placement_edu.timing import (
    FLOP_CONVENTION,
    Hardware,
    Overlapped,
    StepTime,
    bucketed_by_pass,
)
from placement_edu.shown import Shown
from placement_edu.units import GB, plain, wrapped

#: A peak other than the formula's for a candidate (strategy, mesh, recompute), or None where it
#: has none: ``cli.one_peak.planner_peaks``, a real module's.
PeakOf = Callable[[Strategy, Mesh, str], Optional[int]]


@dataclass(frozen=True)
class DataTraffic:
    """SPEC §4 rule 5 on one candidate: how often rank 0's states cross the batch axes (data,
    replica, context) in one optimizer step, and the ring bytes they send, beside plain data
    parallelism's on the same mesh (``traffic.data_traffic``). ``reductions`` and ``gathers``:
    the runs per step of the gradient reductions and parameter all-gathers -- 1 (once a step,
    the gradient accumulated first), ``m`` (once per micro-batch) or 0 (none).
    ``pipeline_bytes``: the pipeline's sends a step. ``nic_bytes``: what leaves rank 0's NIC, the
    bytes of every axis whose groups span nodes; ``shared_nic``: a batch axis and the pipeline
    both do, so their collectives contend for that NIC (``nic_bandwidth``, bytes/s). The time
    model prices a pass's collectives off the critical path as one stream
    (``timing.exposed``): contending, they add."""

    reductions: int
    gathers: int
    bytes: Fraction
    dp_bytes: Fraction
    pipeline_bytes: Fraction = Fraction(0)
    nic_bytes: Fraction = Fraction(0)
    shared_nic: bool = False
    nic_bandwidth: float | None = None

    @property
    def times_dp(self) -> Fraction | None:
        """The bytes as a multiple of plain dp's (None where dp sends none: no batch axis)."""
        return self.bytes / self.dp_bytes if self.dp_bytes else None

    @property
    def nic_s(self) -> float | None:
        """Seconds the NIC needs for ``nic_bytes`` at its bandwidth (latency aside)."""
        return None if self.nic_bandwidth is None else float(self.nic_bytes) / self.nic_bandwidth

    def words(self) -> str:
        """e.g. "grads reduced ×128, params gathered ×1 a step: 64.5× dp's data-axis bytes"."""
        ratio = self.times_dp
        versus = "" if ratio is None else f": {float(ratio):.4g}× dp's data-axis bytes"
        shared = (
            f"; data and pipeline share the NIC: {float(self.nic_bytes) / GB:,.1f} GB a step, "
            f"{self.nic_s:.3g} s at {self.nic_bandwidth / 1e9:g} GB/s"
            if self.shared_nic and self.nic_s is not None and self.nic_bandwidth
            else ""
        )
        return (
            f"grads reduced ×{self.reductions}, params gathered ×{self.gathers} a step{versus}"
            f"{shared}"
        )

    def to_dict(self) -> dict[str, Any]:
        ratio = self.times_dp
        return {
            "grad_reductions_per_step": self.reductions,
            "param_gathers_per_step": self.gathers,
            "bytes_per_step": plain(self.bytes),
            "dp_bytes_per_step": plain(self.dp_bytes),
            "times_dp": None if ratio is None else float(ratio),
            "pipeline_bytes_per_step": plain(self.pipeline_bytes),
            "nic_bytes_per_step": plain(self.nic_bytes),
            "shared_nic": self.shared_nic,
        }


@dataclass(frozen=True)
class Choice(Shown):
    """One placement on one mesh: its peak bytes on rank 0 and, when it fits, its step time."""

    strategy: Strategy
    mesh: Mesh
    recompute: str
    peak_bytes: int
    budget_bytes: int
    time: StepTime | None = None
    #: Korthikanti's formula's peak where ``peak_bytes`` is the module's (``plan(peak_of=...)``).
    formula_peak_bytes: int | None = None
    #: What gives rule 5's count of the batch axes' reductions and gathers where it fits
    #: (``traffic.data_traffic``), asked once, when shown: ``data_axis``.
    traffic: Callable[[], DataTraffic] | None = field(default=None, compare=False, repr=False)

    @cached_property
    def data_axis(self) -> DataTraffic | None:
        """``DataTraffic`` of this choice where it fits (None over the budget)."""
        return None if self.traffic is None else self.traffic()

    @property
    def over_bytes(self) -> int:
        """Bytes above the budget (<= 0 when it fits)."""
        return self.peak_bytes - self.budget_bytes

    def label(self) -> str:
        s = self.strategy
        looped = f", interleaved:{s.virtual_stages}" if s.virtual_stages > 1 else ""
        return f"{s.name} on {self.mesh}, recompute {self.recompute}, m = {s.micro_batches}{looped}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "strategy": self.strategy.name,
            "placement": str(self.strategy.placement),
            "mesh": dict(self.mesh.degrees),
            "recompute": self.recompute,
            "micro_batches": self.strategy.micro_batches,
            "peak_bytes": self.peak_bytes,
        }
        if self.strategy.virtual_stages > 1:
            out["pipeline_schedule"] = f"interleaved:{self.strategy.virtual_stages}"
        if self.formula_peak_bytes is not None:
            out["formula_peak_bytes"] = self.formula_peak_bytes
        if self.data_axis is not None:
            out["data_axis"] = self.data_axis.to_dict()
        if self.time is None:
            out["over_bytes"] = self.over_bytes
            return out
        t = self.time
        return {
            **out,
            "step_time_s": t.total_s,
            "compute_time_s": t.compute_s,
            "comm_time_s": t.comm_s,
            "exposed_comm_s": t.exposed_comm_s,
            "bubble_s": t.bubble_s,
        }


@dataclass(frozen=True)
class Priced(Shown):
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
        # the step phase's compute (the optimizer's, on the roofline) runs before its
        # collectives, which need its result: nothing hides under it
        compute = 0.0 if phase == "step" else {p: c for p, c, _ in t.by_pass}.get(phase, 0.0)
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


# --- a plan: the ranked choices ---------------------------------------------------------------
def group_links(mesh: Mesh, hw: Hardware) -> str:
    """Which link each axis' groups use on ``hw`` (``Hardware.axis_link``: decided by where the
    ranks sit, ``mesh.LAYOUT``), e.g. "data groups of 8 across nodes on InfiniBand NDR (50 GB/s),
    tensor groups of 8 inside a node on NVLink 4 (450 GB/s)"."""
    parts = []
    for axis, n in mesh:
        if n > 1:
            link = hw.axis_link(mesh, axis)
            where = "across nodes" if hw.spans_nodes(mesh, axis) else "inside a node"
            parts.append(
                f"{axis} groups of {n} {where} on {link.name or 'its link'} "
                f"({link.bandwidth / 1e9:g} GB/s)"
            )
    return ", ".join(parts) or "no communication between devices"


# --- the plan ------------------------------------------------------------------------------------
#: Plans whose step time is within this fraction of the fastest are ties (2 %): the time model's
#: own error is larger -- issue 27 asks only that a calibrated step be predicted within 15 % of a
#: published run -- so a 1 % lead is no reason to run a deeper pipeline or one more parallel axis.
TIE_BAND = 0.02
#: What ``simplicity`` compares, in order (said in the plan's reason).
SIMPLER = "the shallowest pipeline, then the fewest parallel axes, then the narrowest tensor axis"


def simplicity(choice: "Choice") -> tuple[int, int, int]:
    """How complex a plan is to run, smaller first: its pipeline depth (more stages: a bigger
    bubble to fill, more micro-batches in flight, stages to balance), the mesh axes it uses (each
    one more kind of group to set up and debug), its tensor-parallel degree (collectives on the
    critical path)."""
    mesh = choice.mesh
    return mesh.degree("pipeline"), sum(1 for _, n in mesh if n > 1), mesh.degree("tensor")


def _axes(n: int) -> str:
    return f"{n} parallel {'axis' if n == 1 else 'axes'}"


@dataclass(frozen=True)
class Plan(Shown):
    """The ranked placements (fastest first), those over the budget, and what the plan assumed."""

    model: TransformerSpec | MoESpec
    devices: int
    hardware: Hardware
    precision: Precision
    budget_bytes: int
    global_batch: int
    overlap: str
    ranked: tuple[Choice, ...]
    infeasible: tuple[Choice, ...]
    skipped: tuple[str, ...] = ()
    assumption: str = ""
    tie_band: float = TIE_BAND

    @property
    def tokens_per_device(self) -> Fraction:
        return Fraction(self.global_batch * self.model.seq, self.devices)

    @property
    def ties(self) -> tuple[int, ...]:
        """Indices into ``ranked`` of the plans within ``tie_band`` of the fastest: step time <=
        (1 + tie_band) × the fastest's (the fastest included; none when nothing fits)."""
        if not self.ranked:
            return ()
        fastest = self.ranked[0].time
        assert fastest is not None
        limit = fastest.total_s * (1 + self.tie_band)
        return tuple(
            i for i, c in enumerate(self.ranked) if c.time is not None and c.time.total_s <= limit
        )

    @property
    def chosen(self) -> int | None:
        """Index into ``ranked`` of the plan recommended: of the ties, the simplest
        (``simplicity``), then the faster; None when nothing fits."""
        ties = self.ties
        if not ties:
            return None
        return min(ties, key=lambda i: (simplicity(self.ranked[i]), i))

    def reason(self) -> str:
        """Why ``chosen`` is recommended, in one sentence with its numbers."""
        i = self.chosen
        if i is None:
            return "no placement fits the budget"
        c, fastest = self.ranked[i], self.ranked[0]
        assert c.time is not None and fastest.time is not None
        p, axes, t = simplicity(c)
        band = (
            f"{len(self.ties)} plans within {self.tie_band:.0%} of the fastest "
            f"({fastest.time.total_s:.4g} s) are ties"
        )
        shape = f"pipeline {p}, {_axes(axes)}, tensor {t}"
        if i == 0:
            return f"#1 {c.label()}: the fastest; {band}, and none is simpler ({shape})"
        slower = c.time.total_s / fastest.time.total_s - 1
        return (
            f"#{i + 1} {c.label()}: {c.time.total_s:.4g} s, {slower:.2%} slower than #1 but "
            f"inside the tie band; {band}, and this is the simplest of them "
            f"({SIMPLER}: {shape}, against #1's pipeline {simplicity(fastest)[0]}, "
            f"{_axes(simplicity(fastest)[1])}, tensor {simplicity(fastest)[2]})"
        )

    def explain(self, i: int) -> str:
        """One sentence on why choice ``i`` (0 = fastest) ranks where it does."""
        c = self.ranked[i]
        t = c.time
        assert t is not None
        parts = [f"compute {t.compute_s:.3g} s"]
        if t.exposed_comm_s:
            parts.append(f"exposed communication {t.exposed_comm_s:.3g} s of {t.comm_s:.3g} s")
        elif t.comm_s:
            parts.append(f"all {t.comm_s:.3g} s of communication hidden")
        if t.bubble_s:
            parts.append(f"pipeline bubble {t.bubble_s:.3g} s")
        head = f"#{i + 1} {c.label()}: {t.total_s:.3g} s per step = " + " + ".join(parts)
        room = (
            f"; peak {c.peak_bytes / GB:.1f} GB leaves {-c.over_bytes / GB:.1f} GB of the "
            f"{self.budget_bytes / GB:g} GB"
        )
        where = f"; {group_links(c.mesh, self.hardware)}"
        if i == 0:
            why = "; the fastest that fits"
        else:
            prev = self.ranked[i - 1].time
            assert prev is not None
            why = (
                f"; {t.total_s - prev.total_s:.3g} s ({t.total_s / prev.total_s - 1:.2%}) "
                f"slower than #{i}"
            )
        return head + room + where + why + "."

    def to_dict(self) -> dict[str, Any]:
        ties, chosen = set(self.ties), self.chosen  # (found once, not once a row)
        return {
            "assumption": self.assumption,
            "model": self.model.description,
            "psi": self.model.psi,
            "devices": self.devices,
            "hardware": self.hardware.name,
            "hardware_source": self.hardware.source,
            "precision": self.precision.name,
            "budget_bytes": self.budget_bytes,
            "global_batch_sequences": self.global_batch,
            "tokens_per_device": plain(self.tokens_per_device),
            "overlap": self.overlap,
            "units": "bytes (GB = 1e9 bytes), seconds per optimizer step on rank 0",
            "tie_band": self.tie_band,
            "chosen": {
                "rank": None if chosen is None else chosen + 1,
                "rule": f"of the plans within the tie band of the fastest, the simplest: {SIMPLER}",
                "reason": self.reason(),
            },
            "ranked": [
                {"rank": i + 1, **c.to_dict(), "tie": i in ties, "chosen": i == chosen}
                for i, c in enumerate(self.ranked)
            ],
            "explanations": [self.explain(i) for i in range(min(3, len(self.ranked)))],
            "infeasible": [c.to_dict() for c in self.infeasible],
            "skipped": list(self.skipped),
        }

    def lines(self, top: int = 10) -> list[str]:
        out = [self.assumption] if self.assumption else []
        out.append(
            f"{self.model.description} on {self.devices} × {self.hardware.name}, budget "
            f"{self.budget_bytes / GB:g} GB per device, {self.global_batch} sequences per step "
            f"({float(self.tokens_per_device):g} tokens per device), overlap {self.overlap}"
        )
        out.append(
            f"{len(self.ranked)} placements fit, {len(self.infeasible)} do not. Fastest first:"
        )
        ties, chosen = set(self.ties), self.chosen
        shown = list(range(min(top, len(self.ranked))))
        if chosen is not None and chosen >= top:  # the chosen row, even below the top
            shown.append(chosen)
        for i in shown:  # what it is, its time and peak, then rule 5's count on the batch axes
            c = self.ranked[i]
            t = c.time
            assert t is not None
            mark = ", tie, chosen" if i == chosen else ", tie" if i in ties else ""
            out.append(f"  {i + 1:>3}. {c.label()}")
            out.append(
                f"       {t.total_s:.3f} s (compute {t.compute_s:.3f}, comm {t.comm_s:.3f}, "
                f"exposed {t.exposed_comm_s:.3f}, bubble {t.bubble_s:.3f}), "
                f"peak {c.peak_bytes / GB:.1f} GB{mark}"
            )
            if c.data_axis is not None:
                out.append(f"       {c.data_axis.words()}")
        out.append(
            f"Tie band {self.tie_band:.0%}: the plans within it of the fastest are ties. "
            f"Chosen: {self.reason()}."
        )
        out += ["Why:"] + [f"  {self.explain(i)}" for i in range(min(3, len(self.ranked)))]
        out.append("Over the budget (smallest excess first):")
        for c in sorted(self.infeasible, key=lambda c: c.over_bytes)[:top]:
            out.append(
                f"  {c.label()}: peak {c.peak_bytes / GB:.1f} GB, {c.over_bytes / GB:.1f} GB over"
            )
        plain_dp = [c for c in self.infeasible if c.strategy.name == "dp"]
        if plain_dp:
            c = min(plain_dp, key=lambda c: c.over_bytes)
            out.append(
                f"  plain {c.label()}: peak {c.peak_bytes / GB:.1f} GB, {c.over_bytes / GB:.1f} GB "
                "over"
            )
        return [wrapped(line) for line in out]

    def __str__(self) -> str:
        return "\n".join(self.lines())
