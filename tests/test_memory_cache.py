"""The memory derivation's shared parts (issue 43, plan's bound): what the planner's candidates
share is derived once -- the model states' terms for every recomputation and sequence-parallel
choice (``memory.states_view``), the activations for every data placement -- and ``exact``
keeps whole sizes as ints. Each sharing rests on a claim these tests check."""

from __future__ import annotations

from fractions import Fraction
from itertools import product

import pytest

from placement_edu.memory import (
    _activation_terms,
    _model_state_terms,
    derive_memory,
    model_state_terms,
    states_view,
)
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.precision import get_precision
from placement_edu.pricing import compose
from placement_edu.strategies import STRATEGIES
from placement_edu.units import exact

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
            repr(_model_state_terms(pl, reshard, variant, mesh, PRECISION, 0))
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
        device, host, terms, padding = _model_state_terms(pl, reshard, variant, mesh, PRECISION, 0)
        terms += _activation_terms(variant, mesh, PRECISION, 0, 2, 2, 2, attention)
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
