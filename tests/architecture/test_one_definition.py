"""Each fact is defined once (issue 21): a unit, the per-op cost table. A second definition is a
place where two figures can drift apart, so the old literals are looked for in the package's
code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from placement_edu import peak
from placement_edu.memory import (
    ACTIVATIONS,
    GATHER_BUFFER,
    GATHER_WINDOW,
    OFFLOAD_STAGING,
    REDUCE_BUCKET,
    TRANSIENT_BUFFERS,
)
from placement_edu.mesh import Mesh
from placement_edu.placement import MODEL_STATES, Mode, State
from placement_edu.pricing import compose
from placement_edu.schedule import (
    COLLECTIVES,
    HOST_TRANSFERS,
    LINK_OPS,
    OP_COSTS,
    PARAM_SYNCS,
    REDUCTIONS,
    RING_FACTOR,
    ZERO_FACTOR,
    ring_bytes,
    ring_factor,
    sent_bytes,
)
from placement_edu.strategies import STRATEGIES
from placement_edu.timing import fit as timing_fit
from placement_edu.timing import ring_steps

pytestmark = pytest.mark.fast

PACKAGE = Path(__file__).resolve().parents[2] / "placement_edu"


def definitions(pattern: str) -> list[str]:
    """The package's files (relative paths) with a line matching ``pattern``."""
    return sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if re.search(pattern, p.read_text(), re.MULTILINE)
    )


def test_the_byte_units_are_defined_in_units_only():
    for unit, value in (
        ("GB", r"10\s*\*\*\s*9"),
        ("GiB", r"2\s*\*\*\s*30"),
        ("MiB", r"2\s*\*\*\s*20"),
    ):
        assert definitions(rf"^\s*{unit}\s*=\s*{value}\s*$") == ["units.py"], unit


def test_the_cost_of_each_op_is_one_row_of_one_table():
    # a dict keyed by op names with numbers for values, outside the table, is a second table
    assert definitions(r'"(all_reduce|all_gather|reduce_scatter)":\s*(\d|lambda)') == []
    # SPEC §4 and §9 at N = 8: all-reduce sends 2·7/8 S in 14 steps and counts 2Ψ in ZeRO's
    # convention
    assert (
        ring_factor("all_reduce", 8)
        == RING_FACTOR["all_reduce"](8)
        == OP_COSTS["all_reduce"].ring(8)
        == 7 / 4
    )
    assert ring_steps("all_reduce", 8) == 14 and ZERO_FACTOR["all_reduce"] == 2
    # a host transfer: no network bytes, one message's latency (over a group of more than one)
    assert ring_factor("h2d", 8) == 0 and ring_steps("h2d", 8) == 1 and "h2d" not in ZERO_FACTOR


def test_the_phases_and_the_model_states_are_named_in_placement_only():
    assert definitions(r"""["']startup["']""") == ["placement.py"]
    assert definitions(r"""^\s*PHASES\s*[:=]""") == ["placement.py"]
    # a tuple of the three phases in code (not a docstring's words) is a second list of them
    phases = r"""(=|\bin|\()\s*\(\s*["']forward["'],\s*["']backward["'],\s*["']step["']"""
    assert definitions(phases) == ["placement.py"]
    assert definitions(r"""^\s*\w*STATES\s*=\s*\(["']params["']""") == []


#: The op names of the cost table and ``recv``: a collection of them is a kind of op.
OP_NAMES = "all_reduce|all_gather|reduce_scatter|all_to_all|send|recv|broadcast|h2d|d2h"
#: One op kind in code: its name in quotes, or its ``OpKind`` member.
AN_OP = rf"""(["']({OP_NAMES})["']|OpKind\.[A-Z_0-9]+)"""


def test_each_set_of_op_names_is_defined_next_to_the_cost_table():
    # a membership test against a literal of op names (``o.op in ("h2d", "d2h")``) ...
    assert definitions(rf"""(?<!for )\bop\s+(not\s+)?in\s*[(\[{{]\s*{AN_OP}""") == []
    # ... or a named collection of two or more op names is a second definition of a kind of op;
    # timing.fit's CALIBRATED_OPS is which ops a calibration times, a choice, not a kind
    named = rf"""^\s*\w+\s*(:[^=]*)?=\s*(frozenset\(\s*)?[(\[{{]\s*{AN_OP}\s*,"""
    assert definitions(named) == ["schedule/costs.py", "timing/fit.py"]
    assert HOST_TRANSFERS == {"h2d", "d2h"} and LINK_OPS == COLLECTIVES | HOST_TRANSFERS
    assert COLLECTIVES == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "send",
        "recv",
        "broadcast",
    }
    assert REDUCTIONS < COLLECTIVES and PARAM_SYNCS < COLLECTIVES


def test_the_bytes_a_device_sends_are_computed_by_one_function():
    # ring factor × payload, a row's ring column, or "the payload for a host transfer, else the
    # ring bytes" outside the cost table is a second copy of SPEC §4's rule
    assert definitions(r"ring_factor\([^()]*\)\s*\*|\.ring\(") == ["schedule/costs.py"]
    assert definitions(r"\bHOST_TRANSFERS\s+else\b") == ["schedule/costs.py"]
    assert timing_fit.sent_bytes is sent_bytes
    # SPEC §4 at N = 8 on S = 100 B: a broadcast is sent by its root alone, (N-1)·S
    assert (
        ring_bytes("broadcast", 8, 100) == 700 and ring_bytes("broadcast", 8, 100, root=False) == 0
    )
    assert ring_bytes("all_reduce", 8, 100) == 175 and ring_bytes("recv", 8, 100) == 0
    # a host transfer: no network bytes, its payload on the host link
    assert ring_bytes("h2d", 8, 100) == 0 and sent_bytes("h2d", 8, 100) == 100


def test_the_transient_terms_are_named_in_memory_only():
    # the derivation, the faults, the runtime's engines and its result all import these names
    names = "|".join(TRANSIENT_BUFFERS)
    assert definitions(rf"""["']({names})["']""") == ["memory.py"]
    assert TRANSIENT_BUFFERS == (GATHER_WINDOW, REDUCE_BUCKET, GATHER_BUFFER, OFFLOAD_STAGING)
    assert ACTIVATIONS == State.ACTIVATIONS.value == "activations"


def test_the_data_axis_placements_are_written_in_strategies_only():
    # a name mapped to a (params, grads, optimizer) row of modes, or a named strategy's placement
    # spelled out, is a second table: the planner and the estimators read ``STRATEGIES``. (The
    # runtime's engine table is keyed by placement, as it should be.) Two explorers still keep
    # their own rows of presets; the set may shrink, never grow.
    mode = r"""["'](R|SG|S|OFF|OFF-R)["']"""
    rows = definitions(rf"""["'][^"'\n]+["']\s*:\s*\(\s*{mode}\s*,\s*{mode}\s*,\s*{mode}""")
    spelled = set()
    for strategy in STRATEGIES.values():
        if strategy.placement.axes() == ("data",):
            p, g, o = (strategy.placement.mode(s, "data").value for s in MODEL_STATES)
            literal = (
                rf"""^(?!\s*>>>).*params=["']{p}["'], grads=["']{g}["'], optimizer=["']{o}["']"""
            )
            spelled |= set(definitions(literal)) - {"strategies.py"}
    assert set(rows) | spelled <= {
        "presentation/mesh_explorer.py",
        "presentation/convention_explorer.py",
    }
    on_data = compose("fsdp_grad_op", Mesh.of(data=4, tensor=2), 1)
    assert on_data.placement.mode(State.PARAMS, "data") is Mode.SG
    assert (
        on_data.reshard_after_forward is STRATEGIES["fsdp_grad_op"].reshard_after_forward is False
    )


def test_the_terms_of_a_real_models_live_set_are_named_in_peak_only():
    # each name once in peak.py, as a constant (not a keyword argument spelled with underscores);
    # everywhere else (the fit chart's styles too) imports the constants
    names = (
        peak.ROOT_GATHERED,
        peak.BLOCK_GATHERED,
        peak.ALL_GATHER_BUFFER,
        peak.REDUCE_SCATTER_BUFFER,
        peak.ACTIVATIONS_AND_TEMPORARIES,
        peak.ROOT_GRADIENTS,
        peak.GRADIENTS_BEING_MADE,
        peak.OPTIMIZER_TEMPORARIES,
        peak.SHARDED_PARAMS,
        peak.SHARDED_GRADS,
    )
    source = (PACKAGE / "peak.py").read_text()
    for name in names:
        assert len(re.findall(rf"""["']{name}["']""", source)) == 1, name
    spelled = rf"""["']({"|".join(names)})["']|{"|".join(names).replace(" ", "_")}"""
    assert definitions(spelled) == ["peak.py"]
    assert peak.ACTIVATIONS_AND_TEMPORARIES not in peak.PERSISTENT_TERMS
