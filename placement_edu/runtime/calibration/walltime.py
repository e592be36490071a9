"""Time measured against time predicted (SPEC §9), for one run.

Measured: each rank's wall time of every step (``worker.run_job``: ``time.perf_counter`` around the
engine's step), and the part of it spent inside collectives and host copies (``Comm.seconds``);
compute is the rest -- forward, backward and the optimizer step, and also the runtime's own
bookkeeping (the memory ledger, the saved-tensor hooks). A step ends when its slowest rank ends, so
each step counts its slowest rank; the first step is left out when there are others (it opens
gloo's connections); the run's figure is the median of the steps left.

Predicted: the core's ``timing.step_time`` on the same strategy, model, mesh and precision, with
each rank's own predicted schedule (a faulted run: the schedule the fault edits), on the hardware
preset ``this_machine`` (``placement-edu calibrate`` fits it), no overlap (the engines issue every
collective in line), tokens per device = global batch x sequence / ranks. The slowest predicted
rank is compared with the measured step.

Time is a model, not an exact count: the ratio is printed, never asserted equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from placement_edu.errors import PlacementError
from placement_edu.schedule import Schedule
from placement_edu.units import wrapped

if TYPE_CHECKING:  # the config imports torch; the time model is imported when a step is priced
    from placement_edu.runtime.config import RunConfig
    from placement_edu.timing import StepTime

#: The preset the runtime predicts with (``timing.HARDWARE``).
HARDWARE_NAME = "this_machine"


@dataclass(frozen=True)
class StepWall:
    """One rank's measured step: ``step_s`` wall seconds, ``comm_s`` of them inside collectives,
    ``compute_s`` = step_s − comm_s."""

    step_s: float
    comm_s: float

    @property
    def compute_s(self) -> float:
        return self.step_s - self.comm_s

    def to_dict(self) -> dict:
        return {"step_s": self.step_s, "comm_s": self.comm_s, "compute_s": self.compute_s}


def walls(rank_result: dict) -> list[StepWall]:
    """One rank's steps, from what ``worker.run_job`` returned (empty if it timed nothing)."""
    return [
        StepWall(s, c) for s, c in zip(rank_result.get("step_s", []), rank_result.get("comm_s", []))
    ]


def measured_step(per_rank: list[list[StepWall]]) -> tuple[StepWall, list[int]] | None:
    """The run's measured step (the median of the counted steps, each its slowest rank) and which
    steps were counted; None if nothing was timed."""
    steps = min((len(w) for w in per_rank), default=0)
    if steps == 0:
        return None
    counted = list(range(1, steps)) if steps > 1 else [0]
    slowest = sorted(
        (max((w[k] for w in per_rank), key=lambda s: s.step_s) for k in counted),
        key=lambda s: s.step_s,
    )
    return slowest[
        (len(slowest) - 1) // 2
    ], counted  # (the lower middle: a real step, compute + comm)


def predicted_step(config: RunConfig, schedules: list[Schedule]) -> StepTime | str:
    """The core's ``StepTime`` of the slowest rank on ``this_machine``, or a one-line reason why
    there is none (no such preset yet, or a strategy the time model cannot price)."""
    from placement_edu import timing

    if HARDWARE_NAME not in timing.HARDWARE:
        return (
            f"no {HARDWARE_NAME!r} hardware preset: run `placement-edu calibrate` and add its line "
            "to placement_edu.timing.HARDWARE"
        )
    shape = config.shape()  # (torch-free: a kernel that reads results never imports torch)
    tokens = config.global_batch * getattr(shape, "seq", 1) / config.world_size
    try:
        times = [
            timing.step_time(
                config.resolved_strategy(),
                config.concrete_model(),
                config.resolved_mesh(),
                config.precision,
                HARDWARE_NAME,
                tokens,
                "none",
                schedule=s,
            )
            for s in schedules
        ]
    except PlacementError as error:
        return f"no prediction: {error}"
    return max(times, key=lambda t: t.total_s)


def time_view(per_rank: list[list[StepWall]], predicted: StepTime | str) -> dict:
    """The ``time`` entry of a run's JSON: measured and predicted seconds per step, and the ratios
    measured / predicted (> 1: slower than the model)."""
    out: dict = {
        "hardware": HARDWARE_NAME,
        "overlap": "none",
        "units": "seconds per optimizer step",
    }
    found = measured_step(per_rank)
    if found is not None:
        step, counted = found
        out.update(
            measured_step_s=step.step_s,
            measured_comm_s=step.comm_s,
            measured_compute_s=step.compute_s,
            steps_counted=counted,
        )
    if isinstance(predicted, str):
        out.update(predicted_step_s=None, ratio=None, note=predicted)
        return out
    out.update(
        predicted_step_s=predicted.total_s,
        predicted_comm_s=predicted.comm_s,
        predicted_compute_s=predicted.compute_s,
        predicted_bubble_s=predicted.bubble_s,
    )
    if found is not None:
        ratio = lambda m, p: m / p if p > 0 else None  # noqa: E731
        out.update(
            ratio=ratio(step.step_s, predicted.total_s),
            comm_ratio=ratio(step.comm_s, predicted.comm_s),
            compute_ratio=ratio(step.compute_s, predicted.compute_s),
        )
    return out


def time_line(view: dict) -> str:
    """The run report's time: measured, then (on the next line) predicted and the ratio."""
    if "measured_step_s" not in view:
        return "time: not measured"
    ms = lambda s: f"{s * 1e3:.3g} ms"  # noqa: E731
    steps = view["steps_counted"]
    which = f"step {steps[0] + 1}" if len(steps) == 1 else f"steps {steps[0] + 1}-{steps[-1] + 1}"
    line = (
        f"time per step (median of {which}, slowest rank): "
        f"measured {ms(view['measured_step_s'])} = "
        f"compute {ms(view['measured_compute_s'])} + comm {ms(view['measured_comm_s'])}"
    )
    if view.get("predicted_step_s") is None:
        return wrapped(f"{line}; {view.get('note', 'no prediction')}")
    ratio = lambda r: "-" if r is None else f"{r:.3g}"  # noqa: E731
    return (
        line
        + ";\n"
        + wrapped(
            f"  predicted on {view['hardware']} (α–β, no overlap) "
            f"{ms(view['predicted_step_s'])} = "
            f"compute {ms(view['predicted_compute_s'])} + comm {ms(view['predicted_comm_s'])}"
            + (f" + bubble {ms(view['predicted_bubble_s'])}" if view["predicted_bubble_s"] else "")
            + f" -> measured/predicted {ratio(view.get('ratio'))} "
            f"(compute {ratio(view.get('compute_ratio'))}, "
            f"comm {ratio(view.get('comm_ratio'))})"
        )
    )
