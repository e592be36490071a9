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
