"""Every rule checked once, at the door (issue 24, items 7, 8, 12 and 13): what each entry point --
the command line, ``analyze``, ``check``, ``RunConfig``, the exercise checker -- refuses, and the
exact line it refuses it with. The command line answers with that one line and exit status 2; the
Python API raises ``PlacementError`` with the same words."""

from __future__ import annotations

import pytest

from placement_edu.cli import main
from placement_edu.errors import PlacementError

pytestmark = pytest.mark.fast


def one_line_error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """Run the CLI, expect exit 2 and exactly one line on stderr, return that line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and captured.err.endswith("\n"), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def refused(make: object) -> str:
    """The message of the PlacementError ``make()`` raises."""
    with pytest.raises(PlacementError) as error:
        make()  # type: ignore[operator]
    return str(error.value)


# --- item 12: a run's counts are ints ----------------------------------------------------------
@pytest.mark.parametrize(
    "changes, says",
    [
        (
            {"world_size": 4.0},
            "world_size must be an int, got 4.0 of type float, because torch takes only ints "
            "there; give 4",
        ),
        (
            {"steps": 2.0},
            "steps must be an int, got 2.0 of type float, because torch takes only ints there; "
            "give 2",
        ),
        ({"seed": True}, "seed must be an int, got True of type bool"),
    ],
)
def test_a_run_config_refuses_a_float_count_before_torch_sees_it(changes, says) -> None:
    # Once RunConfig("zero3", 4.0) passed validate() and failed later, inside torch.
    from placement_edu.runtime import RunConfig

    config = RunConfig(**{"strategy": "zero3", "world_size": 4, **changes})
    assert refused(config.validate) == says


def test_a_run_config_takes_numpy_ints() -> None:
    import numpy as np

    from placement_edu.runtime import RunConfig

    RunConfig("zero3", np.int64(4), steps=np.int32(2)).validate()


# --- item 7: a repeated mesh axis is refused by name, everywhere --------------------------------
REPEATED = (
    "mesh 'data=4,data=2' names axis 'data' twice; expected each axis at most once, because an "
    "axis has one degree (e.g. data=8)"
)


@pytest.mark.parametrize(
    "argv",
    [
        ["table", "--params", "1e9", "--devices", "8", "--mesh", "data=4,data=2"],
        ["check", "zero3", "--mesh", "data=4,data=2"],
        # once ran on data=2: the last degree won
        ["run", "zero3", "--world-size", "2", "--mesh", "data=4,data=2", "--steps", "1"],
    ],
)
def test_a_repeated_mesh_axis_is_refused_by_name_on_the_command_line(capsys, argv) -> None:
    assert one_line_error(capsys, argv) == f"placement-edu: error: {REPEATED}"


def test_a_repeated_mesh_axis_is_refused_by_name_in_the_api() -> None:
    from placement_edu import Mesh, analyze
    from placement_edu.runtime import RunConfig

    assert refused(lambda: Mesh.parse("data=4,data=2")) == REPEATED
    assert refused(lambda: analyze("zero3", 10**6, mesh="data=4,data=2")) == REPEATED
    assert refused(RunConfig("zero3", 2, mesh="data=4,data=2").validate) == REPEATED


# --- item 13: devices are limited at the door -------------------------------------------------
def test_check_refuses_a_mesh_above_the_device_limit(capsys) -> None:
    # once checked data=2^62 and data=2^80 and answered "holds"
    line = one_line_error(capsys, ["check", "zero3", "--mesh", "data=1099511627776,tensor=2"])
    assert line == (
        "placement-edu: error: mesh data=1099511627776,tensor=2 counts 2,199,023,255,552 "
        "devices; expected at most 2^40, because no cluster comes near that many (the limit "
        "catches a typo)"
    )
    line = one_line_error(capsys, ["check", "zero3", "--mesh", f"data={2**80}"])
    assert line == (
        "placement-edu: error: axis 'data' of the mesh counts 1,208,925,819,614,629,174,706,176 "
        "devices; expected at most 2^40, because no cluster comes near that many (the limit "
        "catches a typo)"
    )


def test_a_mesh_degree_of_thousands_of_digits_is_shown_by_its_start() -> None:
    from placement_edu import Mesh

    assert refused(lambda: Mesh.parse("data=" + "9" * 5000)) == (
        "mesh degree '9999999999999999999999999999999999999999'... (5,000 characters) for axis "
        "'data' is more than 2^40 devices"
    )


def test_estimate_refuses_more_gpus_than_the_device_limit(capsys) -> None:
    # once took 2^80 GPUs and said the sides "differ by 1.4889e-14 B"
    argv = ["estimate", "--convention", "deepspeed", "--params", "1e9"]
    argv += ["--gpus-per-node", "1099511627776", "--nodes", "1099511627776"]
    line = one_line_error(capsys, argv)
    assert line == (
        "placement-edu: error: --gpus-per-node 1,099,511,627,776 × --nodes 1,099,511,627,776 "
        "counts 1,208,925,819,614,629,174,706,176 devices; expected at most 2^40, because no "
        "cluster comes near that many (the limit catches a typo)"
    )


def test_deepspeed_table_refuses_more_gpus_than_the_device_limit() -> None:
    from placement_edu.estimators import deepspeed_table

    assert refused(lambda: deepspeed_table(10**9, 2**40, 2)) == (
        "gpus_per_node = 1,099,511,627,776 × nodes = 2 counts 2,199,023,255,552 devices; "
        "expected at most 2^40, because no cluster comes near that many (the limit catches a "
        "typo)"
    )
