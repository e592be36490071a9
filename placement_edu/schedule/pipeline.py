"""Pipeline schedules (SPEC §4): the order of a stage's forward and backward passes under GPipe
and 1F1B, held compactly (``pipeline_runs``) or listed (``pipeline_order``), the bubble, and a
timeline of every stage; past 1F1B, interleaved 1F1B (v model chunks per rank) and a zero-bubble
schedule (backward split into input- and weight-gradient passes), as ``looped_order`` lists them
and ``looped_timeline`` lays them out."""

from __future__ import annotations

from fractions import Fraction
from typing import Callable

from placement_edu.errors import expect, positive_int
from placement_edu.schedule.ops import MAX_LISTED_OPS
from placement_edu.strategies import PipelineSchedule


def pipeline_runs(
    schedule: str, stages: int, stage: int, micro_batches: int
) -> list[tuple[tuple[tuple[str, int], ...], int]]:
    """``pipeline_order`` held compactly: (pattern, times) runs, in order. Repetition i of a run
    runs the pattern's passes, each ("F" | "B", k) with micro-batch k + i.

    GPipe: [F 0] × m, then [B 0] × m. 1F1B, with w = min(p - stage - 1, m) warm-up forwards:
    [F 0] × w, then [F w, B 0] × (m - w), then [B m-w] × w. A few runs, whatever m is."""
    m = micro_batches
    runs: list[tuple[tuple[tuple[str, int], ...], int]]
    if schedule == PipelineSchedule.GPIPE or stages == 1:
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


def bubble_divisor(schedule: str, virtual_stages: int = 1) -> int:
    """How many times smaller than 1F1B's the bubble of ``schedule`` is: v for interleaved 1F1B
    (each of the p - 1 warm-up slots is one chunk, 1/v of a stage's work: Narayanan et al. 2021
    §2.2.2), 3 for zero bubble's ZB-H1 under equal F, B (input gradient) and W (weight gradient)
    times (Qi et al. 2024 §2.1: (p-1)(T_F + T_B - T_W) against 1F1B's (p-1)(T_F + T_B + T_W)),
    1 for GPipe and 1F1B."""
    divisors: dict[str, int] = {
        PipelineSchedule.INTERLEAVED: virtual_stages,
        PipelineSchedule.ZERO_BUBBLE: 3,
    }
    return divisors.get(schedule, 1)


def pipeline_bubble(
    stages: int, micro_batches: int, schedule: str = "1f1b", virtual_stages: int = 1
) -> dict[str, Fraction]:
    """The idle fraction of a pipeline of p stages and m micro-batches: GPipe and 1F1B alike,
    ``bubble_divisor`` d times smaller under interleaved 1F1B (d = v) and zero bubble (d = 3).

    Two conventions, both exact -- say which one you quote:
    ``of_ideal``: bubble time over ideal (bubble-free) time, (p-1)/(d·m) (Narayanan et al. 2021,
    §2.2: (p-1)/m; §2.2.2: (p-1)/(v·m) interleaved; Qi et al. 2024: (p-1)/(3m), ZB-H1);
    ``of_total``: bubble time over total time, (p-1)/(d·m+p-1) (Huang et al. 2019, GPipe).
    """
    p, m = stages, micro_batches
    dm = bubble_divisor(schedule, virtual_stages) * m
    return {"of_ideal": Fraction(p - 1, dm), "of_total": Fraction(p - 1, dm + p - 1)}


def looped_warmup(
    stages: int, rank: int, micro_batches: int, virtual_stages: int, zero_bubble: bool = False
) -> int:
    """Forward chunks ``rank`` runs before its first backward, as torch's ``_get_warmup_ops``
    counts them (m a multiple of p, so each round holds p micro-batches): (v-1)·p + 2·(p-1-rank)
    for interleaved 1F1B -- Megatron's ``get_num_warmup_microbatches``, (p - rank - 1)·2 +
    (v - 1)·p -- and (v-1)·p + (p-1-rank) for zero bubble; at most all v·m of them."""
    p, v = stages, virtual_stages
    hops = (1 if zero_bubble else 2) * (p - 1 - rank)
    return min((v - 1) * p + hops, v * micro_batches)


def looped_order(
    stages: int, rank: int, micro_batches: int, virtual_stages: int = 1, zero_bubble: bool = False
) -> list[tuple[str, int, int]]:
    """The passes ``rank`` runs, in order, as (pass, stage, micro-batch): its v chunks are the
    stages rank, rank + p, ..., rank + (v-1)·p of the v·p (torch's and Megatron's loop). Passes:
    "F" forward; "B" the whole backward, or with ``zero_bubble`` "I" its input gradient and "W"
    its weight gradient (Qi et al. 2024).

    ``torch.distributed.pipelining``'s ``_get_1f1b_rank_ops``: w = ``looped_warmup`` forwards,
    then v·m - w steps of one forward and one backward, then w backwards. Forward step j runs
    chunk (j // p) mod v; backward step j, counted from the first backward, chunk
    v - 1 - (j // p) mod v: p micro-batches through one chunk, then the next (depth first).
    Zero bubble: rank r runs r F-I pairs before its first W, then each step's W follows its I
    (the oldest W first), the rest at the end; with v = 1 this is ZB-H1's order (Qi et al. 2024
    §2.1), which holds min(p, m) micro-batches on every rank."""
    p, v, m = stages, virtual_stages, micro_batches
    expect(
        m % p == 0 or v == 1,
        f"interleaved 1F1B needs the micro-batches to be a multiple of the stages: m = {m} "
        f"micro-batches over p = {p} stages (Megatron's rule; torch's rounds then hold p each)",
    )
    w = looped_warmup(p, rank, m, v, zero_bubble)
    expect(
        4 * v * m <= MAX_LISTED_OPS,
        f"listing the passes of v·m = {v * m:,} chunks one by one stops at {MAX_LISTED_OPS:,}",
    )
    done: dict[tuple[str, int], int] = {}
    order: list[tuple[str, int, int]] = []
    backwards: list[int] = []  # the stage of each backward so far, in order: the Ws follow it

    def run(kind: str, stage: int) -> None:
        k = done.get((kind, stage), 0)
        done[(kind, stage)] = k + 1
        order.append((kind, stage, k))

    for j in range(v * m + w):
        if j < v * m:
            run("F", (j // p) % v * p + rank)
        if j >= w:
            backwards.append((v - 1 - (j - w) // p % v) * p + rank)
            run("I" if zero_bubble else "B", backwards[-1])
            if zero_bubble and j - w >= rank:
                run("W", backwards[j - w - rank])
    if zero_bubble:
        for stage in backwards[max(v * m - rank, 0) :]:
            run("W", stage)
    return order


def looped_in_flight(
    stages: int, rank: int, micro_batches: int, virtual_stages: int, zero_bubble: bool = False
) -> Fraction:
    """Micro-batches whose activations ``rank`` holds at its peak under ``looped_order``, in whole
    stages' worth (a chunk holds 1/v of the stage's layers). Interleaved: w + 1 chunks (its warm-up
    and the first steady forward), (v·p + p - 1)/v = p + (p-1)/v on the first rank when m >= p --
    Korthikanti et al. 2022 §4.2.3's p·(1 + (p-1)/(p·v)) -- more than 1F1B's p. Zero bubble
    (ZB-H1): min(p, m) on every rank, 1F1B's first-stage peak (Qi et al. 2024 §2.1)."""
    p, v, m = stages, virtual_stages, micro_batches
    if zero_bubble:
        return Fraction(min(p, m))
    return Fraction(min(looped_warmup(p, rank, m, v) + 1, v * m), v)


#: A pass as a timeline keys it: (kind, stage, micro-batch).
Pass = tuple[str, int, int]


def _lay_out(
    orders: list[list[Pass]],
    needs: Callable[[str, int, int], Pass | None],
    units: dict[str, int],
    stuck: str,
) -> list[list[tuple[str, int, int, int, int]]]:
    """Each rank's passes (``orders[rank]``, in its order) in time: per rank, (kind, stage,
    micro-batch, start, end). A pass starts once its rank is free and the pass it ``needs`` (its
    input: None for the first stage's forward) has ended; sends take no time; it takes
    ``units[kind]``. ``stuck``: the message where no rank can start its next pass."""
    p = len(orders)
    done: dict[Pass, int] = {}  # pass -> end time
    rows: list[list[tuple[str, int, int, int, int]]] = [[] for _ in range(p)]
    free, nxt = [0] * p, [0] * p
    while any(nxt[r] < len(orders[r]) for r in range(p)):
        moved = False
        for r in range(p):
            if nxt[r] == len(orders[r]):
                continue
            kind, s, k = orders[r][nxt[r]]
            need = needs(kind, s, k)
            if need is not None and need not in done:
                continue
            start = max(free[r], done[need] if need is not None else 0)
            end = start + units[kind]
            rows[r].append((kind, s, k, start, end))
            done[(kind, s, k)], free[r], nxt[r], moved = end, end, nxt[r] + 1, True
        expect(moved, stuck)
    return rows


def looped_timeline(
    stages: int,
    micro_batches: int,
    virtual_stages: int = 1,
    zero_bubble: bool = False,
    times: dict[str, int] | None = None,
) -> list[list[tuple[str, int, int, int, int]]]:
    """``looped_order`` laid out in time, as ``pipeline_timeline`` lays out GPipe and 1F1B: per
    rank, (pass, stage, micro-batch, start, end). A forward of stage s waits for stage s - 1's; a
    backward (B or I) for stage s + 1's (the last stage: for its own forward); W for its own I.
    ``times``: units per chunk pass, default F 1, B 2, I 1, W 1 (backward twice forward's FLOPs,
    split evenly: Qi et al.'s T_F = T_B = T_W)."""
    p, m, v = stages, micro_batches, virtual_stages
    times = times or {"F": 1, "B": 2, "I": 1, "W": 1}
    orders = [looped_order(p, r, m, v, zero_bubble) for r in range(p)]
    last = v * p - 1

    def needs(kind: str, s: int, k: int) -> Pass | None:
        if kind == "F":
            return ("F", s - 1, k) if s > 0 else None
        if kind == "W":
            return ("I", s, k)
        return (kind, s + 1, k) if s < last else ("F", s, k)

    return _lay_out(
        orders, needs, times, f"the looped schedule deadlocks at p = {p}, m = {m}, v = {v}"
    )


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
    orders = [[(kind, s, k) for kind, k in pipeline_order(schedule, p, s, m)] for s in range(p)]

    def needs(kind: str, s: int, k: int) -> Pass | None:
        if kind == "F":
            return ("F", s - 1, k) if s > 0 else None
        return ("B", s + 1, k) if s < p - 1 else ("F", s, k)

    units = {"F": forward, "B": backward}
    rows = _lay_out(
        orders, needs, units, f"pipeline schedule {schedule!r} deadlocks at p = {p}, m = {m}"
    )
    return [[(kind, k, start, end) for kind, _, k, start, end in row] for row in rows]
