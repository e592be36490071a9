"""What the package accepts, and how it refuses the rest: precision presets and custom P/G/O
strings, the recomputation modes of the activation formula (SPEC §3), numbers read exactly with
named limits, Python errors in Python's vocabulary, and the transformer flags of ``table``.

Every refusal on the command line is exit status 2 and exactly one line on stderr."""

from __future__ import annotations

import ast
import json
import os
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from placement_edu import (
    Mesh,
    ModelSpec,
    Placement,
    PlacementError,
    Precision,
    Strategy,
    TransformerSpec,
    analyze,
    get_precision,
)
from placement_edu.cli import main
from placement_edu.errors import (
    MAX_DEVICES,
    MAX_LOCAL_WORLD_SIZE,
    MAX_MICRO_BATCHES,
    MAX_PARAMS,
    MAX_TIMEOUT_S,
    positive_int,
    read_int,
    read_seconds,
    show_limit,
)
from placement_edu.precision import PRESETS
from placement_edu.implementations import TorchRefConfig
from placement_edu.strategies import get_strategy

pytestmark = pytest.mark.fast

PACKAGE = Path(__file__).resolve().parents[1] / "placement_edu"


def one_line_error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """Run the CLI, expect exit 2 and exactly one line on stderr, return that line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and captured.err.endswith("\n"), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


# --- A. precision ---------------------------------------------------------------------------
def test_mixed_adam_fp32_accum_is_20_bytes_per_parameter() -> None:
    # Ultra-Scale Playbook: bf16 params (2) + bf16 grads (2) + fp32 grad accumulation (4) + fp32
    # master, m, v (12) = 20 B/param; DeepSpeed's estimators count the same 2 + 4 gradient bytes.
    accum = PRESETS["mixed_adam_fp32_accum"]
    assert accum == Precision("mixed_adam_fp32_accum", 2, 6, 12, 2)
    assert accum.model_state == 20


def test_fp32_accum_prices_dp_at_150_gb_for_7_5b() -> None:
    # 7.5e9 x 20 B = 150 GB (GB = 1e9); zero1 keeps P + G whole (8 B) and shards O: 8Ψ + 12Ψ/64.
    assert analyze("dp", 7.5e9, 64, "mixed_adam_fp32_accum").memory.model_state == 150 * 10**9
    assert analyze(
        "zero1", 7.5e9, 64, "mixed_adam_fp32_accum"
    ).memory.model_state == 8 * 7_500_000_000 + Fraction(12 * 7_500_000_000, 64)


def test_a_custom_triple_is_a_precision_named_after_the_text() -> None:
    assert get_precision("2/6/12") == Precision("2/6/12", 2, 6, 12, 2)  # activations default to 2
    assert get_precision("4/4/8/4") == Precision("4/4/8/4", 4, 4, 8, 4)
    assert get_precision(" 2 / 6 / 12 ").name == "2/6/12"
    # the same bytes as the preset, so the same memory
    assert (
        analyze("zero2", 7.5e9, 64, "2/6/12").memory.model_state
        == analyze("zero2", 7.5e9, 64, "mixed_adam_fp32_accum").memory.model_state
    )


@pytest.mark.parametrize(
    "bad",
    ["fp8", "2/6", "2/6/12/2/1", "2/x/12", "2//12", "-2/6/12", "2.5/6/12", "", "1" * 50 + "/1/1"],
)
def test_bad_precision_text_names_the_value_the_presets_and_the_triple_form(bad: str) -> None:
    with pytest.raises(PlacementError) as error:
        get_precision(bad)
    message = str(error.value)
    assert repr(bad) in message and "mixed_adam_fp32_accum" in message and "P/G/O" in message


def test_a_zero_byte_state_in_a_triple_is_refused_by_name() -> None:
    with pytest.raises(
        PlacementError,
        match=r"precision '2/0/12': bytes per grads must be a whole number >= 1, got 0",
    ):
        get_precision("2/0/12")


def test_table_takes_a_custom_triple(capsys: pytest.CaptureFixture) -> None:
    assert (
        main(["table", "--params", "7.5e9", "--devices", "64", "--precision", "2/6/12", "--json"])
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["precision"] == "2/6/12"
    assert Fraction(rows[0]["memory"]["model_state"]) == 150 * 10**9  # dp: 20 B x 7.5e9
    assert Fraction(rows[3]["memory"]["model_state"]) == Fraction(150 * 10**9, 64)  # zero3: 20Ψ/N


def test_table_refuses_a_bad_precision_in_one_line(capsys: pytest.CaptureFixture) -> None:
    line = one_line_error(
        capsys, ["table", "--params", "1e9", "--devices", "8", "--precision", "2/6"]
    )
    assert "unknown precision '2/6'" in line and "P/G/O" in line


# --- B. recomputation and the activation formula (Korthikanti et al. 2022, Table 2) ----------
S, B, H, A = 2048, 1, 1024, 16
SBH = S * B * H  # 2,097,152
ATTENTION = Fraction(5 * A * S, H)  # 5as/h = 160


def layer(recompute: str = "none", sequence_parallel: bool = False) -> TransformerSpec:
    return TransformerSpec(
        layers=1,
        hidden=H,
        heads=A,
        seq=S,
        vocab=1000,
        micro_batch=B,
        recompute=recompute,
        sequence_parallel=sequence_parallel,
    )


@pytest.mark.parametrize(
    "recompute, sp, t, expected",
    [
        # Korthikanti et al. 2022 (arXiv 2205.05198), Table 2, per layer, 16-bit, bytes:
        ("none", False, 1, SBH * (34 + 160)),  # sbh(34 + 5as/h) = 406,847,488
        ("none", False, 8, SBH * (10 + 3 + 20)),  # sbh(10 + 24/t + 5as/(ht))
        ("none", True, 8, SBH * Fraction(34, 8) + SBH * 20),  # sbh(34/t + 5as/(ht))
        ("selective", False, 1, SBH * 34),  # sbh·34
        ("selective", False, 8, SBH * 13),  # sbh(10 + 24/t)
        ("selective", True, 8, SBH * Fraction(34, 8)),  # sbh·34/t
        ("full", False, 1, 2 * SBH),  # 2sbh: the layer input
        ("full", False, 8, 2 * SBH),  # TP without SP keeps it whole
        ("full", True, 8, Fraction(2 * SBH, 8)),  # 2sbh/t with SP
    ],
)
def test_activation_bytes_per_layer_follow_korthikanti_table_2(
    recompute: str, sp: bool, t: int, expected
) -> None:
    got = layer(recompute, sp).activation_bytes_per_layer(t)
    assert isinstance(got, Fraction) and got == expected


def test_activation_bytes_are_exact_fractions_when_t_does_not_divide() -> None:
    # t = 3: sbh(10 + 8 + 160/3) = sbh·214/3, not a whole number of bytes; kept exact.
    assert layer().activation_bytes_per_layer(3) == Fraction(SBH * 214, 3)
    assert layer("none", True).activation_bytes_per_layer(3) == Fraction(SBH * (34 + 160), 3)


def test_figures_with_the_worked_numbers() -> None:
    # s = 2048, b = 1, h = 1024, a = 16: the numbers spelled out once.
    assert layer().activation_bytes_per_layer() == 406_847_488
    assert layer("selective").activation_bytes_per_layer() == 71_303_168
    assert layer("full").activation_bytes_per_layer() == 4_194_304


@pytest.mark.parametrize(
    "given, stored",
    [
        (True, "full"),
        (False, "none"),
        ("none", "none"),
        ("selective", "selective"),
        ("full", "full"),
    ],
)
def test_recompute_stores_the_mode_name_and_reads_the_old_bools(given, stored) -> None:
    assert layer(given).recompute == stored


@pytest.mark.parametrize("bad", ["partial", "Full", 1, None, 0.0])
def test_an_unknown_recompute_mode_is_refused_with_the_accepted_ones(bad) -> None:
    with pytest.raises(PlacementError) as error:
        layer(bad)
    assert repr(bad) in str(error.value) and "none, selective, full" in str(error.value)


# --- D. numbers: exact, finite, whole, within named limits -------------------------------------
def test_numbers_are_read_exactly_never_through_a_float() -> None:
    assert read_int("7.5e9", "parameters", MAX_PARAMS) == 7_500_000_000
    assert (
        read_int("123456789012345678901", "things", 10**21) == 123456789012345678901
    )  # float: ...8680
    assert read_int("1_000", "things", 10**6) == 1000
    with pytest.raises(PlacementError, match="not a whole number"):
        read_int("1.00000000000000001", "things", 10**6)  # float() would say 1.0


def test_the_limits_are_named_and_shown_as_a_reader_knows_them() -> None:
    assert (MAX_PARAMS, MAX_DEVICES) == (10**15, 2**40)
    assert (show_limit(MAX_PARAMS), show_limit(MAX_DEVICES), show_limit(MAX_TIMEOUT_S)) == (
        "10^15",
        "2^40",
        "86,400",
    )
    assert (
        read_int(str(MAX_PARAMS), "parameters", MAX_PARAMS) == MAX_PARAMS
    )  # the limit itself is in
    with pytest.raises(PlacementError, match="is more than 10\\^15"):
        read_int(str(MAX_PARAMS + 1), "parameters", MAX_PARAMS)


BAD_NUMBERS = ["nan", "inf", "-inf", "1e400", "1" * 100, "0", "-5", "1.5", "lots"]
WHY = {
    "nan": "is not a finite number",
    "inf": "is not a finite number",
    "-inf": "is not a finite number",
    "1e400": "is more than",
    "1" * 100: "is more than",
    "0": "is less than 1",
    "-5": "is less than 1",
    "1.5": "is not a whole number",
    "lots": "is not a number",
}


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize("flag, limit", [("--params", "10^15"), ("--devices", "2^40")])
def test_a_bad_size_exits_2_with_one_line_naming_it(
    capsys, flag: str, value: str, limit: str
) -> None:
    argv = {"--params": "1e9", "--devices": "8"}
    argv[flag] = value
    line = one_line_error(
        capsys, ["table", "--params", argv["--params"], "--devices", argv["--devices"]]
    )
    shown = repr(value) if len(value) <= 40 else repr(value[:40])
    assert line.startswith(f"placement-edu: error: argument {flag}: {shown}")
    assert WHY[value] in line and f"at least 1 and at most {limit}" in line


def test_a_negative_value_glued_with_equals_reads_the_same(capsys) -> None:
    assert "'-inf' is not a finite number" in one_line_error(
        capsys, ["table", "--params=-inf", "--devices", "8"]
    )


@pytest.mark.parametrize(
    "flag",
    [
        "--layers",
        "--hidden",
        "--heads",
        "--seq",
        "--vocab",
        "--ffn",
        "--micro-batch",
        "--micro-batches",
    ],
)
@pytest.mark.parametrize("value", ["nan", "0", "-5", "1.5", "1e400"])
def test_every_integer_flag_of_table_refuses_bad_numbers(capsys, flag: str, value: str) -> None:
    shape = {"--layers": "8", "--hidden": "64", "--heads": "4", "--seq": "16", "--vocab": "100"}
    shape[flag] = value
    argv = [
        "table",
        *[x for kv in shape.items() for x in kv],
        "--devices",
        "4",
        "--strategies",
        "pp",
    ]
    assert f"argument {flag}: {value!r}" in one_line_error(capsys, argv)


def test_micro_batches_stop_at_their_named_limit(capsys) -> None:
    # A derivation holds repeated micro-batch passes once: its limit is 2^40, like the other counts;
    # a measured run computes every micro-batch: 4096.
    line = one_line_error(
        capsys,
        [
            "table",
            "--params",
            "1e9",
            "--devices",
            "8",
            "--micro-batches",
            str(MAX_MICRO_BATCHES + 1),
        ],
    )
    assert "is more than 2^40" in line
    line = one_line_error(capsys, ["run", "pp", "--world-size", "2", "--micro-batches", "4097"])
    assert "is more than 4,096" in line


def test_a_transformer_over_the_parameter_limit_is_refused(capsys) -> None:
    line = one_line_error(
        capsys,
        [
            "table",
            "--layers",
            "100000",
            "--hidden",
            "65536",
            "--heads",
            "64",
            "--seq",
            "16",
            "--vocab",
            "100",
            "--devices",
            "8",
        ],
    )
    assert "more than 10^15" in line and "parameters" in line


@pytest.mark.parametrize(
    "value, why",
    [
        ("nan", "not a finite number"),
        ("inf", "not a finite number"),
        ("-inf", "not a finite number"),
        ("0", "is not > 0"),
        ("-5", "is not > 0"),
        ("1e9", "is more than 86,400 seconds"),
        ("soon", "is not a number"),
    ],
)
def test_a_bad_timeout_exits_2_with_one_line(capsys, value: str, why: str) -> None:
    line = one_line_error(capsys, ["run", "dp", "--world-size", "2", "--timeout", value])
    assert f"argument --timeout: {value!r}" in line and why in line


def test_read_seconds_keeps_fractions_of_a_second() -> None:
    assert read_seconds("0.5") == 0.5 and read_seconds("1e3") == 1000.0
    with pytest.raises(PlacementError, match="is not > 0"):
        read_seconds("1e-400")  # > 0 as a decimal, 0.0 as a float


@pytest.mark.parametrize(
    "argv, says",
    [
        (
            ["run", "dp", "--world-size", "nan"],
            "argument --world-size: 'nan' is not a finite number",
        ),
        (["run", "dp", "--world-size", "1"], "'1' is less than 2"),
        (["run", "dp", "--world-size", str(MAX_LOCAL_WORLD_SIZE + 1)], "is more than 256"),
        (
            ["run", "dp", "--world-size", "2", "--steps", "0"],
            "argument --steps: '0' is less than 1",
        ),
        (
            ["run", "dp", "--world-size", "2", "--steps", "2.5"],
            "argument --steps: '2.5' is not a whole number",
        ),
        (
            ["run", "pp", "--world-size", "2", "--micro-batches", "inf"],
            "argument --micro-batches: 'inf'",
        ),
        (
            ["run", "dp", "--world-size", "2", "--dtype", "float16"],
            "argument --dtype: invalid choice: 'float16'",
        ),
    ],
)
def test_run_refuses_bad_numbers_before_importing_the_runtime(capsys, argv, says) -> None:
    assert says in one_line_error(capsys, argv)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ModelSpec(psi=float("nan")),
        lambda: ModelSpec(psi=float("inf")),
        lambda: ModelSpec(psi="7"),
        lambda: ModelSpec(psi=True),
        lambda: ModelSpec(psi=2.5),
        lambda: ModelSpec(psi=0),
        lambda: ModelSpec(psi=2.0**60),
        lambda: Mesh.of(data=float("inf")),
        lambda: Mesh.of(data=float("nan")),
        lambda: Mesh.of(data=-2),
        lambda: TransformerSpec(layers=2, hidden=float("nan"), heads=4, seq=16, vocab=100),
        lambda: TransformerSpec(layers=2, hidden=64, heads=4, seq=16, vocab=100, ffn=float("inf")),
        lambda: TransformerSpec(layers=2, hidden=64, heads=4, seq=16, vocab=100, micro_batch="1"),
    ],
)
def test_the_python_api_refuses_bad_numbers_with_a_placement_error(make) -> None:
    with pytest.raises(PlacementError):  # not ValueError from int(nan), OverflowError, TypeError
        make()


@pytest.mark.parametrize(
    "make, says",
    [
        (
            lambda: ModelSpec(psi=10**6, boundary_elements="x"),
            "boundary_elements must be a whole number >= 0",
        ),
        (
            lambda: ModelSpec(psi=10**6, activation_bytes=-1),
            "activation_bytes must be a whole number >= 0",
        ),
        (lambda: analyze("zero3", 10**6, mesh=5), "mesh must be a Mesh"),
        (lambda: Mesh.parse(None), "a mesh is text like"),
        (lambda: Strategy("x", "P=R"), "placement must be a Placement"),
        (lambda: Strategy("", Placement()), "a strategy's name is non-empty text"),
    ],
)
def test_the_python_api_names_the_argument_of_a_wrong_type(make, says) -> None:
    with pytest.raises(PlacementError, match=re.escape(says)):  # not a TypeError from deep inside
        make()


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"global_batch": "x"}, "global_batch must be a whole number >= 1"),
        ({"width": 0}, "width must be a whole number >= 1"),
        ({"width": 10**6}, "the toy MLP is small by design"),
        ({"seed": "x"}, "seed must be an int"),
    ],
)
def test_a_run_config_is_checked_before_any_process_starts(changes, says) -> None:
    from placement_edu.runtime import RunConfig

    with pytest.raises(PlacementError, match=re.escape(says)):
        RunConfig("zero3", 2, **changes).validate()


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, 0, "60", 10**6])
def test_the_python_run_refuses_a_bad_timeout_before_starting_processes(timeout) -> None:
    # Once: nan reached every rank and each died in int(nan); -1 waited for a socket for -1000 ms.
    from placement_edu.runtime import RunConfig, run

    with pytest.raises(PlacementError, match="timeout_s must be a number of seconds > 0"):
        run(RunConfig("zero3", 2, steps=1), timeout_s=timeout)


def test_positive_int_names_the_argument_and_the_value() -> None:
    with pytest.raises(PlacementError, match=r"^devices must be a whole number >= 1, got nan$"):
        positive_int("devices", float("nan"))
    with pytest.raises(PlacementError, match=r"above 2\^53 a float is not exact; give an int"):
        positive_int("psi", 2.0**53 + 2)
    with pytest.raises(PlacementError, match=r"got True of type bool"):
        positive_int("devices", True)


def test_positive_int_takes_whole_numbers_of_any_exact_kind() -> None:
    assert positive_int("n", 7.5e9) == 7_500_000_000
    assert positive_int("n", 2.0**53) == 2**53
    assert positive_int("n", np.int64(8)) == 8 and type(positive_int("n", np.int64(8))) is int
    assert positive_int("n", Fraction(16, 2)) == 8
    assert positive_int("n", 10**30) == 10**30
    assert ModelSpec(psi=np.float64(7.5e9)).psi == 7_500_000_000


# --- E. the Python API speaks Python ------------------------------------------------------------
FLAGS = (
    "--mesh",
    "--world-size",
    "--steps",
    "--micro-batches",
    "--dtype",
    "--timeout",
    "--params",
    "--devices",
)
RAISERS = {
    "PlacementError",
    "expect",
    "one_of",
    "positive_int",
    "ValueError",
    "RuntimeError",
    "TypeError",
}


def _messages(path: Path) -> list[str]:
    """Every string literal inside a call that raises or checks (PlacementError(...), expect(...),
    ...)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name in RAISERS:
                out += [
                    c.value
                    for arg in node.args
                    for c in ast.walk(arg)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                ]
    return out


def test_the_message_finder_sees_messages() -> None:
    assert any(
        "world_size must be at least 2" in m for m in _messages(PACKAGE / "runtime" / "config.py")
    )


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_error_messages_outside_the_cli_name_no_cli_flags(path: Path) -> None:
    assert [m for m in _messages(path) if any(flag in m for flag in FLAGS)] == []


@pytest.mark.parametrize(
    "refused, line",
    [
        (
            lambda: Strategy("s", Placement(), pipeline_schedule="1fb1"),
            "unknown pipeline schedule '1fb1'; known: 1f1b, gpipe, interleaved, zero_bubble",
        ),
        (
            lambda: get_strategy("dp").with_(context_attention="rings"),
            "unknown context attention 'rings'; known: ring, ulysses",
        ),
        # a list was TypeError: unhashable type: 'list', from `in` on the implementations' mapping
        (
            lambda: TorchRefConfig(["ddp"], 2).validate(),
            "unknown implementation ['ddp']; known: ddp, zero_redundancy, fsdp2, fsdp2_grad_op, ",
        ),
    ],
)
def test_a_value_outside_its_names_is_refused_in_the_line_they_share(refused, line) -> None:
    """errors.one_of: every choice among names refuses a value with one line, the value and the
    names accepted."""
    with pytest.raises(PlacementError) as error:
        refused()
    assert str(error.value).startswith(line)


def test_a_multi_axis_strategy_asks_for_a_mesh_in_python_words() -> None:
    with pytest.raises(PlacementError) as error:
        get_strategy("dp×tp").default_mesh(4)
    assert 'mesh="data=...,tensor=..."' in str(error.value) and "--mesh" not in str(error.value)


def test_run_config_errors_name_its_fields() -> None:
    from placement_edu.runtime import RunConfig  # (imports torch)

    with pytest.raises(PlacementError, match="^world_size must be at least 2"):
        RunConfig("dp", 1).resolved_mesh()
    with pytest.raises(PlacementError, match="but world_size = 8"):
        RunConfig("dp", 8, mesh="data=4").resolved_mesh()
    with pytest.raises(PlacementError, match="^unknown dtype 'float16'"):
        RunConfig("dp", 2, dtype="float16").precision
    with pytest.raises(PlacementError, match="^steps must be a whole number >= 1, got 0"):
        RunConfig("dp", 2, steps=0).validate()
    with pytest.raises(PlacementError, match="^micro_batches must be"):
        RunConfig("pp", 2, micro_batches=0).resolved_strategy()


def test_the_run_dtype_names_match_the_torch_mapping() -> None:
    from placement_edu.runtime.args import DTYPE_NAMES
    from placement_edu.runtime.config import DTYPES

    assert tuple(DTYPES) == DTYPE_NAMES


# --- F. the transformer flags of table ------------------------------------------------------------
TRANSFORMER = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "16", "--vocab", "100"]
SBH_SMALL = 16 * 1 * 64  # s·b·h of TRANSFORMER


def _table(capsys, *extra: str) -> dict:
    assert (
        main(["table", *TRANSFORMER, "--devices", "4", "--strategies", "tp", "--json", *extra]) == 0
    )
    return json.loads(capsys.readouterr().out)[0]


def test_table_help_lists_the_presets_and_the_triple_form(capsys) -> None:
    assert main(["table", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "mixed_adam_fp32_accum" in out and "P/G/O" in out and "--sequence-parallel" in out
    assert "{none,selective,full}" in out


@pytest.mark.parametrize("command", ["table", "plan", "time"])
def test_model_help_names_every_reference_model(capsys, command: str) -> None:
    # one --model flag (cli/shape.add_model_flag): table and plan named gpt2 and llama-8b only
    assert main([command, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "a real model (gpt2, llama-1b, llama-8b, or PATH/config.json) instead of" in out


@pytest.mark.parametrize("command, example", [("table", "7.5e9"), ("plan", "70e9")])
def test_a_transformer_in_part_names_the_missing_flags(capsys, command: str, example: str) -> None:
    # one check (cli/shape.require_shape) for table's and plan's shape flags
    assert one_line_error(capsys, [command, "--devices", "8"]) == (
        f"placement-edu: error: give --params (e.g. {example}) or a transformer "
        "(--layers --hidden --heads --seq --vocab)"
    )
    assert one_line_error(capsys, [command, "--hidden", "64", "--devices", "8"]) == (
        "placement-edu: error: a transformer needs --layers, --heads, --seq, --vocab too"
    )


def test_sequence_parallel_sets_the_model_and_the_strategy(capsys) -> None:
    plain, sp = _table(capsys), _table(capsys, "--sequence-parallel")
    t, per_layer_attention = 4, Fraction(5 * 4 * 16, 64 * 4)  # 5as/(ht) = 5/4
    # the model: Korthikanti's sbh(10 + 24/t + 5as/(ht)) becomes sbh(34/t + 5as/(ht)), 2 layers
    assert plain["memory"]["transient"]["forward"]["activations"] == 2 * SBH_SMALL * (
        10 + Fraction(24, t) + per_layer_attention
    )
    assert sp["memory"]["transient"]["forward"]["activations"] == 2 * SBH_SMALL * (
        Fraction(34, t) + per_layer_attention
    )
    # the strategy: every activation all-reduce becomes all-gather + reduce-scatter, backward
    # gathers each block's input once more (SPEC §9: Megatron re-gathers it for the weight
    # gradient), and the norms' gradients (replicated across tensor ranks, 6h per layer + 2h) are
    # all-reduced (SPEC §6 rule 3)
    ops = lambda row: [(o["op"], o["state"]) for o in row["comm"]["schedule"]]
    assert ("all_reduce", "activations") in ops(plain) and ("all_reduce", "activations") not in ops(
        sp
    )
    blocks = ops(plain).count(("all_reduce", "activations"))  # 2 layers × 2 blocks × 2 passes
    assert ops(sp).count(("reduce_scatter", "activations")) == blocks == 8
    assert ops(sp).count(("all_gather", "activations")) == blocks + blocks // 2
    norm = [o for o in sp["comm"]["schedule"] if (o["op"], o["state"]) == ("all_reduce", "grads")]
    assert [o["payload_bytes"] for o in norm] == [(6 * 64 * 2 + 2 * 64) * 2]


@pytest.mark.parametrize(
    "recompute, per_layer",
    [
        ("none", SBH_SMALL * (10 + Fraction(24, 4) + Fraction(5 * 4 * 16, 64 * 4))),
        ("selective", SBH_SMALL * (10 + Fraction(24, 4))),
        ("full", 2 * SBH_SMALL),
    ],
)
def test_recompute_flag_reaches_the_activation_term(capsys, recompute: str, per_layer) -> None:
    row = _table(capsys, "--recompute", recompute)
    assert row["memory"]["transient"]["forward"]["activations"] == 2 * per_layer


def test_ffn_flag_sets_the_mlp_width(capsys) -> None:
    # per layer 4h² + 4h + 2hf + f + h + 4h; f = 128 instead of 4h = 256: 2·(2·64·128 + 128) fewer
    wide, narrow = _table(capsys)["psi"], _table(capsys, "--ffn", "128")["psi"]
    assert wide - narrow == 2 * (2 * 64 * 128 + 128)


@pytest.mark.parametrize(
    "flag", [["--recompute", "full"], ["--sequence-parallel"], ["--ffn", "128"], ["--layers", "2"]]
)
def test_transformer_flags_with_params_are_refused_in_one_line(capsys, flag: list[str]) -> None:
    line = one_line_error(capsys, ["table", "--params", "1e9", "--devices", "8", *flag])
    assert "give either --params or the transformer flags, not both" in line and flag[0] in line


def test_an_unknown_recompute_flag_value_is_one_line(capsys) -> None:
    line = one_line_error(capsys, ["table", *TRANSFORMER, "--devices", "4", "--recompute", "some"])
    assert "argument --recompute: invalid choice: 'some'" in line


# --- bounded answers ------------------------------------------------------------------------
# The peak is VmHWM, this process's own high-water mark (ru_maxrss would carry over the pytest
# process it was forked from).
BOUNDED = """
import re, sys, time
from placement_edu.cli import main
start = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - start
peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read())[1]) * 1024
print(code, seconds, peak, file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv",
    [
        # 10^8 micro-batches used to grow one op per micro-batch (killed by the OOM killer at
        # 23.6 GB); the repeated passes are now held once, with their count
        [
            "table",
            "--layers",
            "64",
            "--hidden",
            "8192",
            "--heads",
            "64",
            "--seq",
            "4096",
            "--vocab",
            "50000",
            "--devices",
            "64",
            "--strategies",
            "pp",
            "--mesh",
            "pipeline=64",
            "--micro-batches",
            "100000000",
        ],
        # 2^62 ranks used to be listed one by one (never finished); 2^40, the device limit, is
        # the most a mesh may now have (2^62 is refused at the door: tests/test_door.py)
        ["check", "zero3", "--mesh", "data=1099511627776"],
    ],
)
def test_an_extreme_input_answers_in_under_2_s_and_300_mb(argv):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", BOUNDED, *argv], capture_output=True, text=True, timeout=60
    )
    code, seconds, peak = done.stderr.split()[-3:]
    assert int(code) == 0, done.stderr
    assert float(seconds) < 2 and int(peak) < 300 * 10**6, (
        seconds,
        peak,
    )  # the interpreter included
    if argv[0] == "table":
        # stage 0 sends each micro-batch's boundary activation on: 10^8 × 4096·8192 × 2 B, exactly
        assert "6710886.4 GB" in done.stdout, done.stdout


def test_a_reader_that_leaves_early_gets_no_traceback():
    """``placement-edu table ... | head -1``: the pipe closes before the output is written."""
    import subprocess
    import sys

    command = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "placement_edu.cli",
            "table",
            "--params",
            "7.5e9",
            "--devices",
            "64",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    command.stdout.close()
    _, err = command.communicate(timeout=60)
    assert command.returncode == 141 and b"Traceback" not in err, err.decode()[-2000:]


# --- issue 43, item 6: every number range-checked before it is converted --------------------
MOE = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "16", "--vocab", "100"]
MOE += ["--experts", "4", "--devices", "4", "--mesh", "data=2,expert=2", "--strategies", "dp"]


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--routing-skew", "1e-100000000", "more than 30 decimal places"),  # never answered
        ("--routing-skew", "1/0", "divides by zero"),
        ("--routing-skew", "1/2/3", "is not a number"),
        ("--routing-skew", "1.5", "out of range"),
        ("--capacity-factor", "1e5000", "out of range"),  # a ValueError traceback before
        ("--capacity-factor", "10001", "out of range"),
        ("--capacity-factor", "0", "out of range"),
        ("--capacity-factor", "nan", "not a finite number"),
    ],
)
def test_a_fraction_flag_is_refused_in_one_line_before_it_is_converted(
    capsys: pytest.CaptureFixture, flag: str, value: str, says: str
) -> None:
    line = one_line_error(capsys, ["table", *MOE, flag, value])
    assert says in line and value[:20] in line


def test_a_fraction_flag_reads_decimals_and_ratios_exactly(capsys: pytest.CaptureFixture) -> None:
    from placement_edu.cli.table import read_capacity_factor, read_share

    assert read_share("1/2") == read_share("0.5") == Fraction(1, 2)
    assert read_share("0." + "3" * 30) == Fraction(int("3" * 30), 10**30)
    assert read_capacity_factor("1.25") == Fraction(5, 4) and read_capacity_factor("1e4") == 10**4


# --- issue 43, item 5: a config file read by one validating reader --------------------------
# openai-community/gpt2's config.json, the fields the reader takes
GPT2_CONFIG = {
    "model_type": "gpt2",
    "n_layer": 12,
    "n_embd": 768,
    "n_head": 12,
    "n_inner": None,
    "n_positions": 1024,
    "vocab_size": 50257,
    "resid_pdrop": 0.1,
}


def _config(tmp_path: Path, value: object = None, text: str | None = None) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(value) if text is None else text)
    return str(path)


def test_a_published_config_reads_as_the_preset(tmp_path: Path) -> None:
    from placement_edu.architectures import PRESETS, read_hf_config

    arch = read_hf_config(_config(tmp_path, GPT2_CONFIG))
    assert arch.with_(name="gpt2", config="") == PRESETS["gpt2"]
    assert arch.psi == 124_439_808  # GPT-2 small, tied head (HF's num_parameters())


@pytest.mark.parametrize(
    "change, says",
    [
        ([], "expected a JSON object (an HF config.json), got list"),
        (3, "expected a JSON object (an HF config.json), got int"),
        (None, "expected a JSON object (an HF config.json), got NoneType"),
        ({"n_head": 0}, "n_head is 0; expected a whole number from 1"),
        ({"n_embd": "768"}, "n_embd is '768'; expected a whole number"),
        ({"n_positions": 0}, "n_positions is 0; expected a whole number from 1"),
        ({"n_layer": 1}, "n_layer is 1; expected a whole number from 2"),
        ({"n_layer": 10**7}, "n_layer is 10000000; expected a whole number from 2 to 10,000"),
        ({"vocab_size": 10**12, "n_embd": 10**4, "n_head": 10}, "parameters; at most"),
        ({"n_layer": True}, "n_layer is True"),
        ({"resid_pdrop": 2}, "resid_pdrop is 2; expected a probability"),
        ({"model_type": "bert"}, "model_type 'bert' is not one of"),
    ],
)
def test_a_malformed_config_is_refused_in_one_line_before_any_profile(
    capsys: pytest.CaptureFixture, tmp_path: Path, change: object, says: str
) -> None:
    value = {**GPT2_CONFIG, **change} if isinstance(change, dict) else change
    line = one_line_error(capsys, ["fit", "--model", _config(tmp_path, value)])
    assert says in line, line


def test_a_deep_a_huge_or_a_fifo_config_is_refused_at_once(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    deep = _config(tmp_path, text="[" * 100_000 + "]" * 100_000)  # a RecursionError traceback
    assert "nested too deep" in one_line_error(capsys, ["fit", "--model", deep])
    huge = _config(tmp_path, text=" " * (2 << 20))
    assert "an HF config.json is about 1 kB" in one_line_error(capsys, ["fit", "--model", huge])
    fifo = tmp_path / "fifo" / "config.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # opening it would block until a writer came: forever
    assert "is not a regular file" in one_line_error(capsys, ["fit", "--model", str(fifo)])
