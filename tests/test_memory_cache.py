"""The memory derivation's shared parts (issue 43, plan's bound): what the planner's candidates
share is derived once -- the model states' terms for every recomputation and sequence-parallel
choice (``memory.states_view``), the activations for every data placement, ``compose``'s
placement for every mesh with the same axes -- ``exact`` keeps whole sizes as ints and ``total``
sums Fractions over one denominator. Each sharing rests on a claim these tests check."""

from __future__ import annotations

from fractions import Fraction
from itertools import product

import pytest

from placement_edu.memory import (
    activation_terms_afresh,
    model_state_terms_afresh,
    derive_memory,
    model_state_terms,
    states_view,
)
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.precision import get_precision
from placement_edu.pricing import compose
from placement_edu.strategies import STRATEGIES
from placement_edu.placement import Mode, State
from placement_edu.units import exact, total, weighted_total

pytestmark = pytest.mark.fast

GPT = TransformerSpec(layers=4, hidden=64, heads=8, seq=32, vocab=100, micro_batch=2)
LLAMA = TransformerSpec(
    layers=4, hidden=64, heads=8, seq=32, vocab=100, kv_heads=2, block="llama", gather_units=2
)
MESHES = [
    Mesh.of(data=4),
    Mesh.of(data=2, tensor=2),
    Mesh.of(data=2, tensor=2, pipeline=2),
    Mesh.of(data=2, context=2, tensor=2),
    Mesh.of(replica=2, data=2, pipeline=2),
]
PRECISION = get_precision("mixed_adam")


def choices(model: TransformerSpec) -> list[TransformerSpec]:
    recomputes = (*TransformerSpec.RECOMPUTE, "layer:2")
    return [
        TransformerSpec(**{**vars(model), "recompute": r, "sequence_parallel": sp})
        for r, sp in product(recomputes, (False, True))
    ]


@pytest.mark.parametrize("model", [GPT, LLAMA], ids=["gpt", "llama"])
@pytest.mark.parametrize("mesh", MESHES, ids=str)
def test_model_states_are_the_same_under_every_recompute_and_sequence_parallel_choice(
    model: TransformerSpec, mesh: Mesh
) -> None:
    # derived without the cache and without states_view, for each choice: one answer
    for name in ("dp", "zero1", "zero2", "zero3", "fsdp_grad_op", "zero3_offload"):
        strategy = STRATEGIES[name]
        pl, reshard = strategy.placement, strategy.reshard_after_forward
        answers = {
            repr(model_state_terms_afresh(pl, reshard, variant, mesh, PRECISION, 0))
            for variant in choices(model)
        }
        assert len(answers) == 1, name
        assert states_view(choices(model)[-1]) == model  # the view drops exactly those choices


def test_the_cached_derivation_equals_the_uncached_one_term_for_term() -> None:
    # every data placement × sequence parallelism × recompute on a tensor × context × pipeline
    # mesh, derived through the caches, against the parts derived afresh
    mesh = Mesh.of(data=2, context=2, tensor=2, pipeline=2)
    checked = 0
    for data, sp, attention, variant in product(
        ("dp", "zero1", "zero2", "zero3", "fsdp_grad_op"), (False, True), ("ring",), choices(GPT)
    ):
        strategy = compose(data, mesh, 4, sp, attention)
        memory = derive_memory(strategy, variant, mesh, PRECISION)
        pl, reshard = strategy.placement, strategy.reshard_after_forward
        device, host, terms, padding = model_state_terms_afresh(
            pl, reshard, variant, mesh, PRECISION, 0
        )
        terms += activation_terms_afresh(variant, mesh, PRECISION, 0, 2, 2, 2, attention)
        assert memory.device == device and memory.host == host and memory.padding == padding
        assert sorted((p, n, v) for p, t in memory.transient.items() for n, v in t.items()) == (
            sorted(terms)
        )
        checked += 1
    assert checked == 5 * 2 * 8


def test_a_caller_cannot_change_what_the_cache_holds() -> None:
    strategy = STRATEGIES["zero3"]
    pl, mesh = strategy.placement, Mesh.of(data=4)
    device, _, terms, _ = model_state_terms(pl, True, GPT, mesh, PRECISION)
    before = repr(model_state_terms(pl, True, GPT, mesh, PRECISION))
    device.clear()
    terms.clear()
    assert repr(model_state_terms(pl, True, GPT, mesh, PRECISION)) == before


def test_exact_is_an_int_when_whole_and_the_same_fraction_otherwise() -> None:
    assert exact(12, 4) == 3 and type(exact(12, 4)) is int
    assert exact(10, 4) == Fraction(5, 2) and type(exact(10, 4)) is Fraction
    assert exact(Fraction(9, 2), 3) == Fraction(3, 2)
    assert exact(Fraction(9, 3)) == 3 and type(exact(Fraction(9, 3))) is int
    assert exact(2**80, 2**40) == 2**40  # no float anywhere


def test_total_is_sum_with_the_same_value_and_type() -> None:
    # rank 0's persistent bytes of zero3×cp×tp×pp for 70e9 on 2^40 devices (a plan's terms), a
    # Fraction that is whole, ints alone, and a float (summed by sum itself)
    terms = [Fraction(1211625411, 8589934592), Fraction(1211625411, 8589934592)]
    terms += [Fraction(3634876233, 4294967296)]
    assert 3634876233 == 3 * 1211625411  # (optimizer 12 B a parameter, params and grads 2 B)
    assert total(terms) == Fraction(8 * 1211625411, 2**33) == sum(terms, 0)
    for values in (terms, [Fraction(524288, 1), 89128960], [7, 5], [], [Fraction(1, 3), 0.5]):
        assert repr(total(values)) == repr(sum(values, 0))  # (Fraction(524288, 1): a Fraction)
    assert type(total([Fraction(1, 2), Fraction(1, 2)])) is Fraction and type(total([3])) is int


def test_the_memory_peak_sums_its_terms_exactly() -> None:
    mesh = Mesh.of(data=3, tensor=2)  # (Ψ/3: Fractions)
    memory = derive_memory(compose("zero3", mesh, 2, True), GPT, mesh, PRECISION)
    state = sum(memory.device.values(), 0)
    phases = [sum(t.values(), 0) for t in memory.transient.values()]
    assert repr(memory.model_state) == repr(state) and type(state) is Fraction
    assert repr(memory.peak) == repr(state + max(phases))


def test_compose_shares_one_strategy_for_the_same_axes_and_one_placement_for_every_m() -> None:
    # a composition reads which axes the mesh has, not their degrees
    small, large = (compose("zero3", Mesh.of(data=d, tensor=2), 1, True) for d in (2, 2**20))
    assert small is large and small.name == "zero3×tp+sp"
    assert compose("zero3", Mesh.of(data=4, tensor=2), 8, True).placement is small.placement
    assert small.placement.mode(State.PARAMS, "data") is Mode.SG
    assert small.placement.mode(State.GRADS, "tensor") is Mode.S
    unsharded = compose("zero3", Mesh.of(data=4, context=2), 4, no_sync=True)
    assert unsharded.name == "zero3+no_sync×cp"
    assert [unsharded.placement.mode(State.GRADS, a) for a in ("data", "context")] == [Mode.R] * 2


def test_a_mesh_gives_a_fresh_coordinate_table_each_time() -> None:
    mesh = Mesh.of(data=2, context=2, tensor=2, pipeline=2)
    coords = mesh.coords(13)  # 13 = ((1·2 + 1)·2 + 0)·2 + 1: pipeline 1, data 1, context 0, t 1
    assert coords == {"data": 1, "context": 0, "tensor": 1, "pipeline": 1}
    coords.clear()
    assert mesh.coords(13)["pipeline"] == 1


def test_weighted_total_is_the_sum_of_the_products_with_the_same_type() -> None:
    # rule 5's bytes: Σ times × bytes an element × elements, an element count a Fraction or not
    pairs = [(3 * 2, Fraction(1211625411, 8192)), (2, 7), (4, Fraction(5, 2))]
    assert weighted_total(pairs) == 6 * Fraction(1211625411, 8192) + 14 + 10
    assert repr(weighted_total(pairs)) == repr(sum((k * v for k, v in pairs), 0))
    assert weighted_total([(3, 4), (2, 5)]) == 22 and type(weighted_total([(3, 4)])) is int
    assert repr(weighted_total([(2, Fraction(1, 2))])) == "Fraction(1, 1)"  # (a Fraction, whole)
