"""Issue 43 item 6: what grew with a typed number is held in closed form, and each closed form
equals the enumeration it replaced on small cases (the speed is printed by
``benchmarks/bench_issue43_bounds.py``, never timed here)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.precision import get_precision
from placement_edu.schedule import derive as derive_module
from placement_edu.schedule.derive import derive_schedule
from placement_edu.schedule.ops import Repeat
from placement_edu.schedule.rules import pipeline_boundary
from placement_edu.strategies import get_strategy
from placement_edu.step_case import StepCase

pytestmark = pytest.mark.fast


def enumerated_chunks(dev, op, phase, tag):
    """The enumeration ``derive.chunk_boundaries`` replaced: every chunk's boundary, one by one."""
    v = dev.strategy.virtual_stages
    return [o for c in range(v) for o in pipeline_boundary(dev, op, phase, tag, c)]


@pytest.mark.parametrize(
    "v, p, t, sp",
    [
        (v, p, t, sp)
        for v, p in itertools.product((1, 2, 3, 5), (2, 3, 4))
        for t, sp in ((1, False), (2, False), (2, True))
    ],
)
def test_interleaved_chunks_held_once_equal_every_chunk_listed(monkeypatch, v, p, t, sp) -> None:
    """The v chunks' boundaries of interleaved 1F1B as first, (v - 2) x middle, last: the same
    ops in the same order, and the same counts, as listing all v, on every rank."""
    model = TransformerSpec(layers=v * p, hidden=64, heads=4, seq=16, vocab=100)
    mesh = Mesh.of(data=2, tensor=t, pipeline=p) if t > 1 else Mesh.of(pipeline=p)
    name = "zero1×tp×pp" if t > 1 else "pp"
    strategy = get_strategy(name).with_(micro_batches=2 * p, sequence_parallel=sp)
    if v > 1:
        strategy = strategy.with_(pipeline_schedule="interleaved", virtual_stages=v)
    precision = get_precision("mixed_adam")
    for rank in range(mesh.world_size):
        held = derive_schedule(strategy, model, mesh, precision, rank)
        with monkeypatch.context() as patched:
            patched.setattr(derive_module, "chunk_boundaries", enumerated_chunks)
            listed = derive_schedule(strategy, model, mesh, precision, rank)
        assert held.ops == listed.ops
        assert totals(held) == totals(listed)
        if v > 3:  # the chunks between the first and the last are one entry with its count
            assert any(isinstance(e, Repeat) and e.times == v - 2 for e in _walk(held.entries))


def totals(schedule) -> Counter:
    """How many times each op runs in the step, as ``Schedule.counted`` reckons it."""
    out: Counter = Counter()
    for op, times in schedule.counted():
        out[op] += times
    return out


def _walk(entries):
    for e in entries:
        yield e
        if isinstance(e, Repeat):
            yield from _walk(e.ops)


# --- plan's context search: bisection on the peak, not every divisor ------------------------------
def every_candidate(model, devices: int, budget: int, batch: int):
    """What ``plan`` priced before it was bounded: every candidate on every mesh, context degrees
    and the no_sync and interleaved variants included, each priced (the enumeration the
    bisection and the variants' pruning replaced). The candidates of one mesh are the planner's
    own list (``planner.candidates``); what is under test is which of them the search prices."""
    from placement_edu.planner import candidates, meshes
    from placement_edu.pricing import RECOMPUTES, price
    from placement_edu.timing import get_hardware

    hw, precision = get_hardware("h100-nvlink-ib"), get_precision("mixed_adam")
    out = []
    for mesh in meshes(devices, model):
        listed = candidates(mesh, model, batch, RECOMPUTES)
        if isinstance(listed, str):  # (its replicas do not split the batch)
            continue
        for key, _, strategy in listed:
            recompute = key[-1]
            out.append(price(strategy(), model, mesh, recompute, hw, precision, "per_pass", budget))
    return out


@pytest.mark.parametrize(
    "devices, seq, budget",
    [(32, 32768, 20 * 10**9), (64, 65536, 7 * 10**8)],  # the first: plans fit; the second: none
)
def test_plans_context_search_keeps_the_fastest_and_the_least_excess(devices, seq, budget):
    """The bounded search lists, of each candidate's context degrees, the smallest that fits (or
    the largest, the least over): its fastest plan and its least excess are those of every
    candidate priced, and every candidate listed is one of them, priced alike."""
    from placement_edu.planner import plan

    model = TransformerSpec(layers=8, hidden=1024, heads=16, seq=seq, vocab=32000)
    bounded = plan(model, devices, budget, global_batch=devices)
    everything = every_candidate(model, devices, budget, devices)
    fits = [c for c in everything if c.time is not None]
    assert len(bounded.ranked) + len(bounded.infeasible) < len(everything)
    if fits:
        fastest = min(c.time.total_s for c in fits)
        assert bounded.ranked[0].time.total_s == fastest
    else:  # what the plan explains when nothing fits: the least excess
        assert not bounded.ranked
        least = min(c.over_bytes for c in everything)
        assert bounded.infeasible[0].over_bytes == least
    listed = {c.label(): c for c in everything}
    for c in (*bounded.ranked, *bounded.infeasible):
        assert listed[c.label()].peak_bytes == c.peak_bytes


# --- a model's parameters: one block counted with its count -------------------------------------
@pytest.mark.parametrize("name", ["gpt2", "llama-1b", "llama-8b"])
@pytest.mark.parametrize("layers", [2, 3, 17])
def test_psi_of_one_block_times_l_equals_every_tensor_summed(name: str, layers: int) -> None:
    import math

    from placement_edu.architectures import PRESETS

    arch = PRESETS[name].with_(layers=layers)
    assert arch.psi == sum(math.prod(shape) for _, shape, _ in arch.tensors())
    assert [n for n, _, u in arch.tensors() if u == "root"] == [
        n for n, _ in sum(arch.root_tensors(), [])
    ]


def test_the_presets_parameter_counts_are_the_published_ones() -> None:
    from placement_edu.architectures import PRESETS

    # HF GPT-2 124M: 124,439,808 (tied head); Llama-3.2-1B: 1,235,814,400 (tied);
    # Meta-Llama-3-8B: 8,030,261,248 (untied) -- the models' model.num_parameters()
    assert [PRESETS[n].psi for n in ("gpt2", "llama-1b", "llama-8b")] == [
        124_439_808,
        1_235_814_400,
        8_030_261_248,
    ]


def test_the_planners_divisors_from_prime_factors_equal_every_k_tried() -> None:
    """``planner.divisors`` from the prime factors, against the trial of every k up to √n it
    replaced (2^20 trials at 2^40 devices)."""
    import math

    from placement_edu.planner import divisors

    def every_k(n: int) -> list[int]:
        small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
        return sorted(set(small + [n // k for k in small]))

    assert all(divisors(n) == every_k(n) for n in range(1, 3000))
    for n in (2**40, 3**20 * 7, 10**12, 999_999_999_989):  # the last a prime
        assert divisors(n) == every_k(n)
    assert len(divisors(2**40)) == 41


# --- fit: a step's blocks priced once with their count ------------------------------------------
@pytest.fixture(scope="module")
def gpt2_profile():
    from placement_edu.runtime.measurement.profiles import get_profile

    return get_profile(StepCase.of("gpt2", 1, 1024))[0]  # shipped: no torch


@pytest.mark.parametrize("layers", [66, 67, 100, 131, 200])
@pytest.mark.parametrize("every", [0, 2, 3, 5])
@pytest.mark.parametrize("devices, reshard", [(8, True), (1, True), (4, False)])
def test_fits_blocks_at_the_ends_of_their_runs_give_every_blocks_peak(
    monkeypatch, gpt2_profile, layers: int, every: int, devices: int, reshard: bool
) -> None:
    """Past ``MAX_LISTED_BLOCKS`` blocks ``peak.derive`` lists each run of alike blocks by its ends:
    its peaks (event, total, terms) and states are those of every block listed."""
    from dataclasses import replace

    from placement_edu import peak
    from placement_edu.architectures import PRESETS

    arch = PRESETS["gpt2"].with_(layers=layers)
    full = replace(gpt2_profile, block=gpt2_profile.block // 3)  # a checkpointed block keeps less
    kth = (every, full) if every else None

    def derived():
        return peak.derive(
            arch, gpt2_profile, devices, reshard_after_forward=reshard, every_kth=kth
        )

    ends = derived()
    monkeypatch.setattr(peak, "MAX_LISTED_BLOCKS", 10**9)
    every_block = derived()
    assert len(ends.events) < len(every_block.events)
    for which in ("peak", "forward_backward_peak", "step_peak"):
        a, b = getattr(ends, which), getattr(every_block, which)
        assert (a.name, a.total, dict(a.terms)) == (b.name, b.total, dict(b.terms))
    assert [ends.params, ends.grads, ends.optimizer] == [
        every_block.params,
        every_block.grads,
        every_block.optimizer,
    ]
    # what the blocks keep, in closed form, against the sum block by block
    kept = sum(
        (full if every and (k + 1) % every == 0 else gpt2_profile).block for k in range(layers)
    )
    assert ends.activations == gpt2_profile.outside + kept + gpt2_profile.result


def test_fits_states_in_closed_form_equal_every_unit_summed(gpt2_profile) -> None:
    from placement_edu import peak
    from placement_edu.architectures import PRESETS

    arch = PRESETS["llama-8b"].with_(layers=37)
    for devices, rank in ((1, 0), (7, 6), (1024, 1023)):
        us = peak.units(arch, devices, rank)
        root, block = peak.root_and_block(arch, devices, rank)
        assert [u.name for u in us] == ["root", *map(str, range(37))]
        assert sum(u.stored for u in us) == root.stored + 37 * block.stored
        assert sum(u.held for u in us) == root.held + 37 * block.held
        assert sum(u.tensors for u in us) == len(arch.tensors())
    assert peak.backward_blocks(200, 3) == [199, 198, 197, 196, 3, 2, 1]
    assert peak.backward_blocks(12) == list(range(11, 0, -1))
