"""Calibrating this machine (SPEC §9): time the collectives and the compute the engines use, on
ranks the launcher starts, and fit the α–β model to *this* machine.

- ``probes.py``: what each rank times (a ``Calibration`` job, run by ``launcher.launch`` like a run)
- here: one launch per world size, each rank's times gathered into the core's ``Sample`` values
  (each repeat counts its slowest rank), and the core's fit (``placement_edu.timing.fit``)

    >>> from placement_edu.runtime.calibration.calibrate import calibrate
    >>> result = calibrate((2, 4))
    >>> result.fit.pooled.alpha_s, result.fit.pooled.bandwidth
"""

from __future__ import annotations

from dataclasses import dataclass

from placement_edu.errors import expect
from placement_edu.runtime.processes.launcher import launch
from placement_edu.runtime.calibration.probes import DEFAULT_SIZES, Calibration
from placement_edu.timing.fit import (
    CalibrationFit,
    ComputeSample,
    Sample,
    fit_calibration,
    sample_from,
)


# --- in the process that asked -----------------------------------------------------------------
@dataclass(frozen=True)
class CalibrationResult:
    """Every measured point, and the core's fit of them (``placement_edu.timing.fit``)."""

    samples: tuple[Sample, ...]
    compute: tuple[ComputeSample, ...]
    repeats: int
    world_sizes: tuple[int, ...] = ()

    @property
    def fit(self) -> CalibrationFit:
        """Per op and pooled, over every world size."""
        return fit_calibration(self.samples)

    def fit_at(self, n: int) -> CalibrationFit:
        """Per op and pooled, at one world size only."""
        return fit_calibration([s for s in self.samples if s.group == n])

    def flops(self) -> ComputeSample:
        """The matmul probe at the smallest world size (one rank per core on a 2-core machine)."""
        return min(
            (c for c in self.compute if c.what.startswith("float64 matmul")), key=lambda c: c.group
        )

    @classmethod
    def build(cls, per_world: dict[int, list[dict]], repeats: int) -> "CalibrationResult":
        """From each world size's per-rank results (``run_rank``)."""
        samples, compute = [], []
        for n, per_rank in per_world.items():
            ranks = [r for r in per_rank if r is not None]
            for k, (op, payload, _) in enumerate(ranks[0]["ops"]):
                samples.append(sample_from(op, n, payload, [r["ops"][k][2] for r in ranks]))
            for k, (what, flops, _) in enumerate(ranks[0]["compute"]):
                slowest = tuple(max(ts) for ts in zip(*(r["compute"][k][2] for r in ranks)))
                compute.append(ComputeSample(what, n, float(flops), slowest))
        return cls(tuple(samples), tuple(compute), repeats, tuple(per_world))


def calibrate(
    world_sizes: tuple[int, ...] = (2, 4),
    sizes: tuple[int, ...] = DEFAULT_SIZES,
    repeats: int = 10,
    warmup: int = 3,
    timeout_s: float = 60.0,
    progress: bool = True,
) -> CalibrationResult:
    """Time the collectives and compute at each world size (one launch each, so N ranks run on
    N processes, as a run of N does) and return the measurements with their fit. ``progress``:
    show on stderr, as a run does, which probe rank 0 has reached."""
    jobs = [Calibration(n, tuple(sizes), repeats, warmup) for n in world_sizes]
    expect(len(jobs) > 0, "give at least one world size")
    expect(  # (refused before any rank starts: the fit would fail after all the timing)
        len(set(sizes)) >= 2,
        f"the fit of α and W needs at least two payload sizes, got {sorted(set(sizes))}",
    )
    for job in jobs:
        job.validate()
    per_world = {
        job.world_size: launch([job], job.world_size, timeout_s, progress)[0] for job in jobs
    }
    return CalibrationResult.build(per_world, repeats)
