"""Pipeline schedules (SPEC §4): the order of a stage's forward and backward passes under GPipe
and 1F1B, held compactly (``pipeline_runs``) or listed (``pipeline_order``), the bubble, and a
timeline of every stage."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.errors import expect, positive_int
from placement_edu.schedule.ops import MAX_LISTED_OPS


def pipeline_runs(
    schedule: str, stages: int, stage: int, micro_batches: int
) -> list[tuple[tuple[tuple[str, int], ...], int]]:
    """``pipeline_order`` held compactly: (pattern, times) runs, in order. Repetition i of a run
    runs the pattern's passes, each ("F" | "B", k) with micro-batch k + i.

    GPipe: [F 0] × m, then [B 0] × m. 1F1B, with w = min(p - stage - 1, m) warm-up forwards:
    [F 0] × w, then [F w, B 0] × (m - w), then [B m-w] × w. A few runs, whatever m is."""
    m = micro_batches
    runs: list[tuple[tuple[tuple[str, int], ...], int]]
    if schedule == "gpipe" or stages == 1:
        runs = [((("F", 0),), m), ((("B", 0),), m)]
    else:
        w = min(stages - stage - 1, m)
        runs = [((("F", 0),), w), ((("F", w), ("B", 0)), m - w), ((("B", m - w),), w)]
    return [(pattern, times) for pattern, times in runs if times > 0]


def stage_kinds(stages: int, layers: int) -> list[tuple[int, int]]:
    """The kinds of stage a pipeline of ``stages`` over ``layers`` equal layers has, each as
    (its first stage, how many stages it stands for): the first (it receives nothing in forward),
    the middle stages holding base + 1 layers (the first ``layers % stages`` stages take one
    extra), those holding base layers, and the last (it sends nothing on). Stages of one kind run
    the same ops; only 1F1B's warm-up count, min(p - stage - 1, m), differs between them, and it
    orders their passes without changing an op. So one stage of each kind is derived and stands
    for the rest: four at most, whatever p is."""
    p, extra = stages, layers % stages
    middle = range(1, p - 1)
    cut = max(extra - 1, 0)  # middle stages 1 .. extra - 1 hold an extra layer
    kinds = [range(0, 1), middle[:cut], middle[cut:], range(p - 1, p) if p > 1 else range(0)]
    return [(kind[0], len(kind)) for kind in kinds if len(kind)]


def pipeline_order(
    schedule: str, stages: int, stage: int, micro_batches: int
) -> list[tuple[str, int]]:
    """The order in which pipeline ``stage`` runs forward ("F", k) and backward ("B", k) passes.

    GPipe: all m forwards, then all m backwards. 1F1B: min(p - stage - 1, m) warm-up forwards,
    then one forward / one backward alternating, then the remaining backwards. A list of 2m
    passes: refused above ``MAX_LISTED_OPS`` (``pipeline_runs`` holds any m in a few runs).
    """
    expect(
        2 * micro_batches <= MAX_LISTED_OPS,
        f"listing the {2 * micro_batches:,} passes of m = {micro_batches:,} micro-batches one by "
        f"one stops at {MAX_LISTED_OPS:,}; pipeline_runs holds them in a few runs",
    )
    return [
        (kind, k + i)
        for pattern, times in pipeline_runs(schedule, stages, stage, micro_batches)
        for i in range(times)
        for kind, k in pattern
    ]


def pipeline_bubble(stages: int, micro_batches: int) -> dict[str, Fraction]:
    """The idle fraction of a pipeline of p stages and m micro-batches (GPipe and 1F1B alike).

    Two conventions, both exact -- say which one you quote:
    ``of_ideal``: bubble time over ideal (bubble-free) time, (p-1)/m (Narayanan et al. 2021, §2.2);
    ``of_total``: bubble time over total time, (p-1)/(m+p-1) (Huang et al. 2019, GPipe).
    """
    p, m = stages, micro_batches
    return {"of_ideal": Fraction(p - 1, m), "of_total": Fraction(p - 1, m + p - 1)}


def pipeline_timeline(
    schedule: str, stages: int, micro_batches: int, forward: int = 1, backward: int = 2
) -> list[list[tuple[str, int, int, int]]]:
    """When each stage runs each pass: per stage, (pass "F" | "B", micro-batch, start, end) in time
    units, in ``pipeline_order``'s order. A pass starts once its stage is free and its input has
    arrived: forward k after forward k on the stage before; backward k after backward k on the
    stage after (on the last stage, after its own forward k). Sends take no time; a forward takes
    ``forward`` units, a backward ``backward`` (2: twice the FLOPs). The idle share of the picture
    is ``pipeline_bubble``'s ``of_total``, (p-1)/(m+p-1), for GPipe and 1F1B alike."""
    p, m = positive_int("stages", stages), positive_int("micro_batches", micro_batches)
    expect(
        2 * p * m <= MAX_LISTED_OPS,
        f"a timeline of p = {p:,} stages and m = {m:,} micro-batches has "
        f"{2 * p * m:,} passes; it draws at most {MAX_LISTED_OPS:,}",
    )
    orders = [pipeline_order(schedule, p, s, m) for s in range(p)]
    done: dict[tuple[str, int, int], int] = {}  # (pass, micro-batch, stage) -> end time
    rows: list[list[tuple[str, int, int, int]]] = [[] for _ in range(p)]
    free, nxt = [0] * p, [0] * p
    while any(nxt[s] < len(orders[s]) for s in range(p)):
        moved = False
        for s in range(p):
            if nxt[s] == len(orders[s]):
                continue
            kind, k = orders[s][nxt[s]]
            needs = (
                (("F", k, s - 1) if s > 0 else None)
                if kind == "F"
                else (("B", k, s + 1) if s < p - 1 else ("F", k, s))
            )
            if needs is not None and needs not in done:
                continue
            start = max(free[s], done[needs] if needs is not None else 0)
            end = start + (forward if kind == "F" else backward)
            rows[s].append((kind, k, start, end))
            done[(kind, k, s)], free[s], nxt[s], moved = end, end, nxt[s] + 1, True
        expect(moved, f"pipeline schedule {schedule!r} deadlocks at p = {p}, m = {m}")
    return rows
