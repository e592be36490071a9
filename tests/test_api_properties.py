"""Property-based tests of the Python API's boundary (hypothesis): whatever a learner passes to a
constructor or an entry point -- right values, wrong types, None, negative, non-finite or huge
numbers, stray text -- the answer is a result or the package's one error, ``PlacementError``,
naming the argument; never another exception from deep inside."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_edu import (
    Mesh,
    ModelSpec,
    Placement,
    PlacementError,
    Strategy,
    TransformerSpec,
    analyze,
    check,
    compare,
    get_precision,
    get_strategy,
)
from placement_edu.strategies import COMPOSITIONS, STRATEGIES
from placement_edu.faults import FAULTS
from placement_edu.precision import PRESETS
from placement_edu.runtime import RunConfig

pytestmark = pytest.mark.fast

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Values of every kind a learner might type.
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(min_value=-3, max_value=9), max_size=3),
    st.tuples(st.text(max_size=6), st.integers(min_value=-3, max_value=9)),
    st.just(object()),
)
SMALL = st.integers(min_value=-2, max_value=70)
NAMES = st.sampled_from([*STRATEGIES, *COMPOSITIONS])
MESHES = st.sampled_from(
    [
        "data=4",
        "data=2,tensor=2",
        "tensor=4",
        "pipeline=4",
        "data=2,pipeline=2",
        "replica=2,data=2",
        "data=0",
        "data=-1",
        "data=x",
        "bogus=2",
        "data=4611686018427387904",
        "data=2,data=2",
        "",
    ]
)
MODES = st.sampled_from(["R", "S", "SG", "M", "OFF", "X", "", "r"])
MODEL = st.one_of(
    st.integers(min_value=-10, max_value=10**13),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([7.5e9, 1e30, 1.5, "7.5e9", "70B"]),
)


def _either(valid):
    return st.one_of(valid, ANYTHING)


def answers(call, *args, **kwargs):
    """The call returns, or raises PlacementError with a message; nothing else escapes."""
    try:
        return call(*args, **kwargs)
    except PlacementError as error:
        assert str(error).strip(), "an empty error message"
        return error


@SETTINGS
@given(
    psi=_either(st.integers(min_value=1, max_value=10**12)),
    layers=_either(SMALL),
    units=_either(SMALL),
    boundary=_either(SMALL),
)
def test_model_spec(psi, layers, units, boundary):
    answers(ModelSpec, psi=psi, layers=layers, gather_units=units, boundary_elements=boundary)


@SETTINGS
@given(
    degrees=_either(
        st.lists(
            st.tuples(
                st.sampled_from(["data", "tensor", "pipeline", "replica", "x"]), _either(SMALL)
            ),
            max_size=4,
        )
    )
)
def test_mesh(degrees):
    answers(Mesh, tuple(degrees) if isinstance(degrees, list) else degrees)


@SETTINGS
@given(
    params=_either(MODES),
    grads=_either(MODES),
    optimizer=_either(MODES),
    activations=_either(MODES),
)
def test_placement(params, grads, optimizer, activations):
    answers(Placement, params=params, grads=grads, optimizer=optimizer, activations=activations)


@SETTINGS
@given(
    name=_either(st.text(min_size=1, max_size=8)),
    micro=_either(SMALL),
    schedule=_either(st.sampled_from(["1f1b", "gpipe", "zb"])),
    reshard=_either(st.booleans()),
)
def test_strategy(name, micro, schedule, reshard):
    answers(
        Strategy,
        name,
        Placement(grads="S", optimizer="S"),
        reshard_after_forward=reshard,
        micro_batches=micro,
        pipeline_schedule=schedule,
    )


@SETTINGS
@given(
    layers=_either(SMALL),
    hidden=_either(st.sampled_from([64, 128, 8192])),
    heads=_either(SMALL),
    seq=_either(SMALL),
    vocab=_either(SMALL),
    recompute=_either(st.sampled_from(["none", "selective", "full"])),
)
def test_transformer_spec(layers, hidden, heads, seq, vocab, recompute):
    answers(
        TransformerSpec,
        layers=layers,
        hidden=hidden,
        heads=heads,
        seq=seq,
        vocab=vocab,
        recompute=recompute,
    )


@SETTINGS
@given(
    strategy=_either(NAMES),
    model=_either(MODEL),
    devices=_either(SMALL),
    precision=_either(st.sampled_from([*PRESETS, "2/6/12", "2/6", "x/y/z"])),
    mesh=_either(MESHES),
)
def test_analyze(strategy, model, devices, precision, mesh):
    result = answers(analyze, strategy, model, devices, precision, mesh)
    if not isinstance(result, PlacementError):  # a derivation: exact and non-negative
        assert result.memory.model_state >= 0 and math.isfinite(float(result.ring_bytes))


@SETTINGS
@given(
    strategies=_either(st.lists(NAMES, min_size=1, max_size=3)),
    model=_either(MODEL),
    devices=_either(SMALL),
)
def test_compare(strategies, model, devices):
    answers(compare, strategies, model, devices)


@SETTINGS
@given(
    strategy=_either(NAMES), mesh=_either(MESHES), fault=_either(st.sampled_from([*FAULTS, "nope"]))
)
def test_check(strategy, mesh, fault):
    answers(check, strategy, mesh, fault)


@SETTINGS
@given(value=ANYTHING)
def test_lookups(value):
    answers(get_strategy, value)
    answers(get_precision, value)


@SETTINGS
@given(
    strategy=_either(NAMES),
    world=_either(SMALL),
    steps=_either(SMALL),
    fault=_either(st.sampled_from([*FAULTS])),
    mesh=_either(MESHES),
    dtype=_either(st.sampled_from(["float64", "float32", "int8"])),
    micro=_either(SMALL),
    width=_either(SMALL),
    layers=_either(SMALL),
    seed=_either(SMALL),
)
def test_run_config_is_refused_before_any_process_starts(
    strategy, world, steps, fault, mesh, dtype, micro, width, layers, seed
):
    def build_and_validate():
        config = RunConfig(
            strategy,
            world,
            steps=steps,
            fault=fault,
            mesh=mesh or None,
            dtype=dtype,
            micro_batches=micro,
            width=width,
            layers=layers,
            seed=seed,
        )
        config.validate()
        return config

    answers(build_and_validate)


def test_the_refusals_name_the_argument_and_what_is_accepted():
    with pytest.raises(PlacementError, match="devices"):
        analyze("zero3", 7.5e9, float("nan"))
    with pytest.raises(PlacementError, match="psi"):
        ModelSpec(psi=-1)
