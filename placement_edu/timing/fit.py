"""Fitting the α–β model of SPEC §9 to measured collective times: pure functions, no torch.

SPEC §9 prices a collective over N ranks as

    t = α · steps + B / W

with ``steps`` the ring steps (``timing.ring_steps``: N−1 for all-gather and reduce-scatter, 2(N−1)
for all-reduce, 1 for a send or a host copy) and ``B`` the bytes one device sends (SPEC §4's ring
bytes; a host copy's payload, as ``timing.op_time`` counts it). Given measured times of
the same collectives over several sizes, α (seconds per ring step) and W (bytes per second one
device sends) are the least-squares solution of that linear equation in the two unknowns α and
β = 1/W. The runtime measures (``placement_edu.runtime.calibration.calibrate``); this module only
fits:

- ``Sample``          one measured (op, N, payload) point: its repeats (``Repeats``: their
                      median), their spread; ``ComputeSample``, a compute probe, the same way
- ``sample_from``     per-rank, per-repeat seconds -> a ``Sample`` (slowest rank, median repeat)
- ``fit_link``        least squares of seconds against (ring steps, ring bytes) -> ``LinkFit``
- ``fit_calibration`` one fit per op, one pooled over the collectives (the link), the host copy
                      apart
- ``this_machine``    the fit as a ``timing.Hardware`` preset, and ``hardware_line`` to paste it

Why *relative* least squares: the sizes span 2^10..2^22 bytes, so the times span three orders of
magnitude; plain least squares would fit the largest sizes only and leave α (which shows at the
small ones) to chance. Each point is weighted by 1/t², i.e. the fit minimises relative error.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from placement_edu.errors import PlacementError, expect
from placement_edu.schedule import HOST_TRANSFERS, sent_bytes
from placement_edu.timing.communication import ring_steps
from placement_edu.timing.hardware import Hardware, Link

#: The ops a calibration times, in the order the tables print them: four over the link between
#: ranks, and h2d, a host copy (on a CPU-only machine: a memory copy, the offloaded state's "link").
CALIBRATED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "send", "h2d")


class Repeats:
    """What a measured sample's repeats give: ``seconds``, one time per repeat (the slowest rank's
    wall time of that repeat: a collective, or every rank computing at once, ends when its last
    rank does), and their median."""

    seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)


@dataclass(frozen=True)
class Sample(Repeats):
    """One measured point: ``op`` over ``group`` ranks on a payload of ``payload_bytes`` (S in SPEC
    §4's sense: all-gather the full output, reduce-scatter the full input), timed ``seconds``
    (``Repeats``)."""

    op: str
    group: int
    payload_bytes: int
    seconds: tuple[float, ...]

    @property
    def spread(self) -> tuple[float, float, float]:
        """(min, median, max) seconds over the repeats."""
        return min(self.seconds), self.median_s, max(self.seconds)

    @property
    def steps(self) -> int:
        return ring_steps(self.op, self.group)

    @property
    def sent_bytes(self) -> float:
        return float(sent_bytes(self.op, self.group, self.payload_bytes))


def sample_from(
    op: str, group: int, payload_bytes: int, per_rank: Sequence[Sequence[float]]
) -> Sample:
    """A ``Sample`` from ``per_rank[r][k]``, rank r's seconds in repeat k: each repeat counts its
    slowest rank."""
    expect(
        len(per_rank) > 0 and len({len(times) for times in per_rank}) == 1 and len(per_rank[0]) > 0,
        f"need the same number (>= 1) of repeats from every rank, got {[len(t) for t in per_rank]}",
    )
    return Sample(op, group, payload_bytes, tuple(max(times) for times in zip(*per_rank)))


@dataclass(frozen=True)
class LinkFit:
    """α (seconds per ring step) and W (bytes per second one device sends), fitted to ``points``
    measured samples; ``rms_relative_error``: how far the fitted line is from the medians
    (0.1 = 10 % on a typical point)."""

    alpha_s: float
    bandwidth: float
    points: int
    rms_relative_error: float

    def seconds(self, op: str, n: int, payload_bytes: int) -> float:
        """The fitted time of ``op`` over ``n`` ranks on ``payload_bytes``: α·steps + B/W."""
        beta = 0.0 if math.isinf(self.bandwidth) else 1.0 / self.bandwidth
        return self.alpha_s * ring_steps(op, n) + float(sent_bytes(op, n, payload_bytes)) * beta

    def link(self, source: str = "") -> Link:
        """This fit as the core's ``Link`` (refused when the sizes were too small to show a
        bandwidth)."""
        expect(
            math.isfinite(self.bandwidth),
            "the fit found no bandwidth term (W = ∞): the sizes were too "
            "small for bytes/W to show next to α; calibrate with larger payloads",
        )
        return Link(self.alpha_s, self.bandwidth, source)


def _solve(rows: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares of ``a·u + b·v = 1`` over rows (u, v), with a, b >= 0 (a negative α or 1/W
    is noise, not physics: the fit drops that term and refits the other alone)."""
    suu = sum(u * u for u, _ in rows)
    svv = sum(v * v for _, v in rows)
    suv = sum(u * v for u, v in rows)
    su, sv = sum(u for u, _ in rows), sum(v for _, v in rows)
    det = suu * svv - suv * suv
    if det > 1e-12 * suu * svv:
        a, b = (su * svv - sv * suv) / det, (sv * suu - su * suv) / det
        if a >= 0 and b >= 0:
            return a, b
    # One term alone (also when the points cannot separate α from β: a single size).
    only_a, only_b = (su / suu if suu else 0.0, 0.0), (0.0, sv / svv if svv else 0.0)
    residual = lambda ab: sum((ab[0] * u + ab[1] * v - 1) ** 2 for u, v in rows)  # noqa: E731
    return min(only_a, only_b, key=residual)


def fit_link(samples: Iterable[Sample]) -> LinkFit:
    """Fit t = α·steps + B/W to the samples' medians, minimising relative error (see the module
    docstring). Needs at least two distinct sizes so that α and W can be told apart."""
    points = [(s.steps, s.sent_bytes, s.median_s) for s in samples]
    expect(
        len({b for _, b, _ in points}) >= 2,
        f"a fit of α and W needs samples of at least two sizes, got {len(points)} sample(s)",
    )
    expect(all(t > 0 for _, _, t in points), "every measured time must be > 0 seconds")
    alpha, beta = _solve([(steps / t, b / t) for steps, b, t in points])
    errors = [(alpha * steps + beta * b - t) / t for steps, b, t in points]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    return LinkFit(alpha, 1.0 / beta if beta > 0 else math.inf, len(points), rms)


@dataclass(frozen=True)
class CalibrationFit:
    """One ``LinkFit`` per op; ``pooled``: one α and W for the link, fitted to every collective
    together (None when only host copies were timed); ``host``: the host copy's (None if
    untimed)."""

    by_op: dict[str, LinkFit]
    pooled: LinkFit | None
    host: LinkFit | None


def fit_calibration(samples: Sequence[Sample]) -> CalibrationFit:
    """Fit each op on its own, the collectives together, and the host copy apart."""
    ops = [op for op in CALIBRATED_OPS if any(s.op == op for s in samples)]
    ops += sorted({s.op for s in samples} - set(ops))
    by_op = {op: fit_link([s for s in samples if s.op == op]) for op in ops}
    link = [s for s in samples if s.op not in HOST_TRANSFERS]
    return CalibrationFit(by_op, fit_link(link) if link else None, by_op.get("h2d"))


def this_machine(fit: CalibrationFit, flops: float, memory_bytes: int, source: str) -> Hardware:
    """The fit as a ``Hardware`` preset named "this_machine": every rank in one node whose link is
    the pooled fit (on one machine every pair of ranks uses the same loopback), the host copy as
    the host link, ``flops`` achieved FLOP/s per rank, ``memory_bytes`` of memory."""
    if fit.pooled is None:
        raise PlacementError("a preset needs at least one collective timed, not only host copies")
    link = fit.pooled.link()
    return Hardware(
        "this_machine",
        flops,
        memory_bytes,
        link,
        source=source,
        host_link=fit.host.link() if fit.host is not None else None,
        collectives="gloo",  # the runtime's collectives, which the calibration timed
    )


def hardware_line(hw: Hardware) -> str:
    """Python source that rebuilds ``hw`` (every rank in one node, on one link), to paste into
    ``timing.HARDWARE``."""
    expect(
        hw.network_link is None,
        f"hardware_line writes one node on one link; {hw.name!r} has a network link too",
    )
    link = hw.node_link
    host = (
        f", host_link=Link({hw.host_link.alpha_s:.3g}, {hw.host_link.bandwidth:.3g})"
        if hw.host_link is not None
        else ""
    )
    return (
        f'"{hw.name}": Hardware("{hw.name}", {hw.flops:.3g}, {hw.memory_bytes}, '
        f"Link({link.alpha_s:.3g}, {link.bandwidth:.3g}), "
        f"source={hw.source!r}{host}, collectives={hw.collectives!r}),"
    )


@dataclass(frozen=True)
class ComputeSample(Repeats):
    """A compute probe: ``flops`` floating-point operations per repeat, timed ``seconds``
    (``Repeats``: the slowest rank, every rank computing at once); achieved FLOP/s = flops / median
    seconds."""

    what: str
    group: int
    flops: float
    seconds: tuple[float, ...]

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.median_s

    @property
    def spread(self) -> tuple[float, float, float]:
        """(min, median, max) achieved FLOP/s over the repeats."""
        rates = sorted(self.flops / t for t in self.seconds)
        return rates[0], statistics.median(rates), rates[-1]
