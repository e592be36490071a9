"""Issue 43 items 7 and 8: an option a command cannot honour is refused in one line (exit 2),
never ignored; a refusal names what the user can change. No rank starts here."""

from __future__ import annotations

import pytest

from placement_edu.cli import main

pytestmark = pytest.mark.fast

TRANSFORMER = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "16", "--vocab", "100"]


def one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--experts", "8"], "--experts shapes"),
        (["--experts", "8", "--top-k", "2"], "--experts, --top-k shape"),
        (["--capacity-factor", "2"], "--capacity-factor shapes"),
    ],
)
def test_table_refuses_expert_flags_on_params_alone(capsys, extra: list[str], named: str) -> None:
    """``table --params 7e9 --experts 8`` printed the dense table, --experts ignored."""
    err = one_line(capsys, ["table", "--params", "7e9", "--devices", "8", *extra])
    assert named in err and "give the transformer flags instead" in err


def test_table_with_the_transformer_flags_prices_the_experts(capsys) -> None:
    """Beside the refusal: the same flag on a transformer is honoured (Ψ grows with E)."""
    argv = ["table", *TRANSFORMER, "--devices", "4", "--strategies", "dp", "--json"]
    assert main([*argv, "--experts", "8"]) == 0
    assert '"psi": 833344' in capsys.readouterr().out  # 8 SwiGLU experts of width 4h per layer
    assert main(argv) == 0
    assert '"psi": 107520' in capsys.readouterr().out  # the dense model


@pytest.mark.parametrize(
    "argv, flags",
    [
        (["dp×cp", "--world-size", "4", "--mesh", "data=1,context=4", "--steps", "5"], "--steps"),
        (
            [
                "dp×cp_ulysses",
                "--world-size",
                "2",
                "--mesh",
                "data=1,context=2",
                "--dtype",
                "float32",
            ],
            "--dtype",
        ),
        (
            ["zero1×cp", "--world-size", "2", "--mesh", "data=1,context=2", "--schedule", "gpipe"],
            "--schedule",
        ),
        (
            ["dp", "--world-size", "4", "--mesh", "data=2,expert=2", "--micro-batches", "2"],
            "--micro-batches",
        ),
        (
            [
                "dp",
                "--world-size",
                "4",
                "--mesh",
                "data=2,expert=2",
                "--steps",
                "2",
                "--dtype",
                "float32",
            ],
            "--steps, --dtype",
        ),
    ],
)
def test_a_layer_run_refuses_the_step_options_it_cannot_honour(capsys, argv, flags) -> None:
    err = one_line(capsys, ["run", *argv])
    assert f"it cannot honour {flags}: leave" in err and "one forward and backward" in err


def test_a_context_run_of_a_strategy_without_a_context_axis_is_refused(capsys) -> None:
    """``run zero3 --mesh data=1,context=4`` ran dp×cp's layer and did not name zero3."""
    err = one_line(capsys, ["run", "zero3", "--world-size", "4", "--mesh", "data=1,context=4"])
    assert "(dp×cp, dp×cp_ulysses, zero1×cp); zero3 has none" in err


def test_a_world_the_batch_does_not_split_into_names_what_to_change(capsys) -> None:
    """``run --world-size 3`` blamed a global batch no flag sets; it now names the flags and the
    degrees that divide the toy's 16 rows (runtime.config.RunConfig.global_batch)."""
    err = one_line(capsys, ["run", "dp", "--world-size", "3"])
    assert "does not split into 3 data ranks x 1 micro-batches; change the world size" in err
    assert err.rstrip().endswith("with 1 micro-batch the data degree must be one of 1, 2, 4, 8, 16")
    err = one_line(capsys, ["run", "pp", "--world-size", "2", "--micro-batches", "32"])
    assert err.rstrip().endswith("32 micro-batches do not fit 16 rows, give fewer")


def test_a_step_run_still_takes_its_steps_and_dtype() -> None:
    """The options now parse to None when not typed (so a layer run can tell); a step run gets
    RunConfig's defaults (3 steps, float64) or what was typed."""
    from placement_edu.runtime.args import config_from_args, parser

    config = config_from_args(parser().parse_args(["zero3"]), 4)
    assert (config.steps, config.dtype) == (3, "float64")
    config = config_from_args(
        parser().parse_args(["zero3", "--steps", "5", "--dtype", "float32"]), 4
    )
    assert (config.steps, config.dtype) == (5, "float32")
