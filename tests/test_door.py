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
    # a Mesh built directly is checked by the same rules, and compared by meaning
    assert refused(lambda: Mesh((("data", 4), ("data", 2)))) == REPEATED
    assert Mesh((("tensor", 2), ("data", 2))) == Mesh.of(data=2, tensor=2)


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


# --- item 8: the tensor degree divides the heads, in the analyses as in the runs ----------------
SHAPE = ["--layers", "2", "--hidden", "64", "--heads", "8", "--seq", "16", "--vocab", "100"]
NOT_DIVIDING = (
    "tensor degree 3 does not divide the 8 attention heads; "
    "expected a divisor of 8 (1, 2, 4 or 8), because each tensor rank computes whole heads "
    "(Megatron splits attention by heads)"
)


@pytest.mark.parametrize(
    "argv",
    [
        # once printed "params": 360789.3333333333 (a third of a head's bytes)
        ["table", *SHAPE, "--devices", "3", "--mesh", "tensor=3", "--strategies", "tp", "--json"],
        ["estimate", "--convention", "megatron", *SHAPE, "--tensor", "3"],
    ],
)
def test_the_analyses_refuse_a_tensor_degree_that_does_not_divide_the_heads(capsys, argv) -> None:
    assert one_line_error(capsys, argv) == f"placement-edu: error: {NOT_DIVIDING}"


def test_a_run_refuses_it_with_the_same_rule(capsys) -> None:
    # the toy transformer has 4 heads; once the run named a weight's dim 0 instead
    assert one_line_error(capsys, ["run", "tp", "--world-size", "3", "--steps", "1"]) == (
        "placement-edu: error: tensor degree 3 does not divide the 4 attention heads; expected a "
        "divisor of 4 (1, 2 or 4), because each tensor rank computes whole heads (Megatron splits "
        "attention by heads)"
    )


def test_the_python_analyses_refuse_it_with_the_same_line() -> None:
    from placement_edu import TransformerSpec, analyze, check
    from placement_edu.estimators import megatron_theoretical_memory
    from placement_edu.timing import step_time

    model = TransformerSpec(layers=2, hidden=64, heads=8, seq=16, vocab=100)
    assert refused(lambda: analyze("tp", model, mesh="tensor=3")) == NOT_DIVIDING
    assert refused(lambda: check("tp", mesh="tensor=3", model=model)) == NOT_DIVIDING
    assert refused(lambda: megatron_theoretical_memory(model, tensor=3)) == NOT_DIVIDING
    step = lambda: step_time("tp", model, "tensor=3", "mixed_adam", "h100-nvlink-ib")  # noqa: E731
    assert refused(step) == NOT_DIVIDING
    assert analyze("tp", model, mesh="tensor=4").memory.model_state > 0  # a divisor runs


# --- item 13: names echoed in messages are shortened like numbers are ---------------------------
LONG = "z" * 100_000
SHORT = "'" + "z" * 40 + "'... (100,000 characters)"


def test_a_strategy_name_100000_characters_long_gives_a_short_line(capsys) -> None:
    # once a 100 KB line
    assert one_line_error(capsys, ["check", LONG]) == (
        f"placement-edu: error: unknown strategy {SHORT}; known strategies: dp, "
        "zero1_allreduce, zero1, zero2, zero3, fsdp, fsdp_grad_op, zero2_offload, zero3_offload, "
        "tp, pp; compositions: dp×tp, dp×pp, zero1×tp×pp, zero3×tp, dp×cp, dp×cp_ulysses, "
        "zero1×cp, hsdp"
    )


def test_a_bad_choice_100000_characters_long_gives_a_short_line(capsys) -> None:
    argv = ["plan", "--params", "1e9", "--devices", "8", "--hardware", LONG]
    assert one_line_error(capsys, argv) == (
        f"placement-edu: error: argument --hardware: invalid choice: {SHORT} (choose from "
        "'a100-nvlink-ib', 'h100-nvlink-ib', 'h200-nvlink-ib', 'a100-nvlink', 'h100-nvlink', "
        "'h200-nvlink', 'h100-grand-teton', 'this_machine')"
    )


def test_the_api_shortens_an_echoed_name_as_it_shortens_a_number() -> None:
    from placement_edu.errors import read_int
    from placement_edu.faults import FAULTS
    from placement_edu import check

    assert refused(lambda: check("zero3", fault=LONG)) == (
        f"unknown fault {SHORT}; known faults: {', '.join(FAULTS)}"
    )
    assert refused(lambda: read_int("9" * 100_000, "devices", 8)).startswith(
        "'" + "9" * 40 + "'... (100,000 characters) is more than 8"
    )
    # a long value in many words: the message is cut, still one readable line
    assert len(refused(lambda: check("zero3", fault="z " * 100_000))) < 2100


def test_plan_blames_a_sequence_too_long_for_the_shape_not_psi(capsys) -> None:
    # once: "Ψ = 70,000,000,000 is too small for any published shape"
    argv = ["plan", "--params", "70e9", "--seq", "1099511627776", "--devices", "8"]
    assert one_line_error(capsys, argv) == (
        "placement-edu: error: seq = 1,099,511,627,776 is too long for Ψ = 70,000,000,000 in "
        "Llama-2-70B's shape: its position embedding alone (s·h) has 9,007,199,254,740,992 "
        "parameters; expected seq at most 5,890,679, or give the transformer flags (--layers "
        "--hidden --heads --seq --vocab)"
    )
    assert main(["plan", "--params", "70e9", "--seq", "5890679", "--devices", "8"]) == 0  # the edge


# --- item 12: the exercise checker takes what a numpy cell produces, and refuses the rest in a line
def test_the_exercise_checker_takes_numpy_scalars_as_the_numbers_they_hold() -> None:
    import numpy as np

    from placement_edu.exercises import check_answer

    # once refused: "takes a number in GB (1e9 bytes), got np.float32(16.640625)"
    assert check_answer("zero2-memory", np.float32(16.640625)).right
    # Ψ/(t·p) = 70e9 / 8 elements (SPEC §6), a literal, not the reference compared with itself
    assert check_answer("composition-data-reduction-elements", np.int64(8_750_000_000)).right
    assert check_answer("activations-zero3-divides", np.bool_(False)).right


def test_the_exercise_checker_answers_a_huge_int_and_a_list_in_one_line() -> None:
    from placement_edu.exercises import check_answer

    # once OverflowError: int too large to convert to float
    assert str(check_answer("zero2-memory", 10**400)).startswith(
        "✘ not yet (zero2-memory): 1000000000000000000000000000000000000000... (401 characters) "
        "GB (1e9 bytes) is not it."
    )
    # once refused with an error; now "not yet", saying what is expected (issue 25, item 3)
    assert str(check_answer("zero2-memory", [16.640625])) == (
        "✘ not yet (zero2-memory): expected a number of GB (1e9 bytes), got [16.640625] (list)"
    )
    # once TypeError: unhashable type: 'list'
    assert refused(lambda: check_answer(["zero2-memory"], 16.640625)).startswith(
        "unknown exercise ['zero2-memory']; expected an exercise's name (text): each exercise "
        "cell names its own; all "
    )
    # issue 43, item 8: a typo named the 63 exercises (3,164 characters); now the nearest name
    assert refused(lambda: check_answer("zero2-memry", 16.640625)) == (
        "unknown exercise 'zero2-memry'; expected an exercise's name (text): "
        "did you mean 'zero2-memory' or 'zero1-comm'?"
    )


def test_run_names_the_strategy_as_typed(capsys) -> None:
    # once: "unknown strategy '×'" for "run x" (the runtime's own copy of the name rule)
    assert one_line_error(capsys, ["run", "x", "--world-size", "2"]) == (
        "placement-edu: error: unknown strategy 'x'; known strategies: dp, zero1_allreduce, "
        "zero1, zero2, zero3, fsdp, fsdp_grad_op, zero2_offload, zero3_offload, tp, pp; "
        "compositions: dp×tp, dp×pp, zero1×tp×pp, zero3×tp, dp×cp, dp×cp_ulysses, zero1×cp, hsdp"
    )


def test_the_planner_searches_by_the_same_heads_rule() -> None:
    from placement_edu import TransformerSpec
    from placement_edu.models import heads_divide
    from placement_edu.planner import meshes

    model = TransformerSpec(layers=4, hidden=96, heads=6, seq=16, vocab=100)
    tried = {mesh.degree("tensor") for mesh in meshes(12, model)}
    assert tried == {t for t in (1, 2, 3, 4, 6, 12) if heads_divide(model, t)} == {1, 2, 3, 6}


# --- item 13: a fault on a one-device axis is refused for the mesh, not for the strategy ---------
def test_a_fault_on_a_one_device_axis_names_the_mesh_not_a_list_that_holds_the_strategy(
    capsys,
) -> None:
    # once: "does not apply to zero3 (P=SG ...) on data=1: it needs params sharded-with-gather
    # (SG) ... on the data axis; it applies to: zero3, fsdp, ..." -- zero3 both refused and listed
    line = one_line_error(capsys, ["check", "zero3", "--mesh", "data=1", "--fault", "stale-gather"])
    assert line == (
        "placement-edu: error: fault 'stale-gather' does not apply to zero3 (P=SG G=S O=S A=M) on "
        "data=1: it needs params sharded-with-gather (SG) or offloaded (OFF) on a data axis of "
        "degree > 1; zero3 has that placement, but on data=1 the axis the fault acts on has one "
        "device, where nothing is reduced, gathered or broadcast for it to spoil: try zero3 on "
        "data=4"
    )
    from placement_edu import check

    assert "applies to: zero3, fsdp" in refused(lambda: check("zero1", fault="stale-gather"))
    assert check("zero3", mesh="data=2", fault="stale-gather").broken == ["state_consistency"]


# --- issue 41 item 1: one door -- what a user passes is resolved once, into one frozen Setting ----
SMALL_GPT = dict(layers=2, hidden=256, heads=4, seq=128, vocab=1000)


def test_resolve_builds_one_frozen_setting_and_passes_a_setting_through() -> None:
    import dataclasses

    from placement_edu.setting import Setting, resolve

    setting = resolve("zero3", 10**9, "data=8", "mixed_adam", "h100-nvlink-ib")
    assert (setting.strategy.name, str(setting.mesh), setting.precision.name) == (
        "zero3",
        "data=8",
        "mixed_adam",
    )
    # the H100 preset's 80 GiB = 85,899,345,920 bytes (no budget given: the hardware's)
    assert setting.budget_bytes == 85_899_345_920 == 80 * 2**30
    assert resolve(setting) is setting
    with pytest.raises(dataclasses.FrozenInstanceError):
        setting.recompute = "full"  # type: ignore[misc]
    # one name for one thing: fit's words are aliases of time's
    assert resolve("fsdp2").strategy == resolve("zero3").strategy
    assert resolve("fsdp2_no_reshard").strategy == resolve("fsdp_grad_op").strategy
    assert resolve(attention="sdpa").attention == "flash"
    assert resolve(recompute="layer:02").recompute == "layer:2"
    assert isinstance(resolve(devices=4, strategy="tp"), Setting)
    assert str(resolve("tp", devices=4).mesh) == "tensor=4"


@pytest.mark.parametrize(
    "kwargs, ends",
    [
        ({"strategy": "zer3"}, "; did you mean 'zero3' or 'zero3×tp'?"),
        ({"hardware": "h100"}, "; did you mean 'h100-nvlink-ib' or 'h100-nvlink'?"),
        ({"precision": "mixed_adm"}, "; did you mean 'mixed_adam' or 'mixed_adam_fp32_grads'?"),
    ],
)
def test_a_near_miss_is_refused_at_the_door_with_the_name_it_was_meant_to_be(kwargs, ends):
    from placement_edu.setting import resolve

    line = refused(lambda: resolve(**kwargs))
    assert line.startswith(f"unknown {next(iter(kwargs))} '{next(iter(kwargs.values()))}'; ")
    assert line.endswith(ends) and "\n" not in line


def test_recompute_and_attention_name_what_is_accepted_and_the_nearest() -> None:
    from placement_edu.setting import resolve

    assert refused(lambda: resolve(recompute="ful")) == (
        "unknown recompute choice 'ful'; accepted: none, selective, full, torchtitan-op, or "
        "layer:K (K from 1 to 10,000); did you mean 'full'?"
    )
    assert refused(lambda: resolve(attention="flsh")) == (
        "unknown attention 'flsh'; accepted: eager, flash (aliases: sdpa = flash); did you mean "
        "'flash'?"
    )


BARE = (
    'mesh must be a Mesh, text like "data=4" or a mapping {axis: degree}, got 4, a bare number '
    "(for N devices on the strategy's own axis: devices=N)"
)


def test_an_int_mesh_is_refused_everywhere_in_the_same_line() -> None:
    # once accepted by one function and refused by the next
    from placement_edu import TransformerSpec, analyze, check, step_time
    from placement_edu.pricing import price_configuration
    from placement_edu.runtime import RunConfig
    from placement_edu.setting import resolve

    model = TransformerSpec(**SMALL_GPT)
    assert refused(lambda: resolve("zero3", 10**6, 4)) == BARE
    assert refused(lambda: analyze("zero3", 10**6, mesh=4)) == BARE
    assert refused(lambda: check("zero3", mesh=4)) == BARE
    assert refused(lambda: step_time("zero3", model, 4, "mixed_adam", "h100-nvlink-ib")) == BARE
    assert refused(lambda: price_configuration(model, 4, "zero3", 8)) == BARE  # type: ignore
    assert refused(RunConfig("zero3", 4, mesh=4).validate) == BARE  # type: ignore[arg-type]


def test_price_configuration_takes_a_hardware_name_and_refuses_an_unknown_one() -> None:
    # once: AttributeError: 'str' object has no attribute 'flops'
    from placement_edu import TransformerSpec
    from placement_edu.pricing import price_configuration
    from placement_edu.timing import HARDWARE

    model = TransformerSpec(**SMALL_GPT)
    by_name = price_configuration(model, "data=2,tensor=2", "zero1", 16, "a100-nvlink-ib")
    by_object = price_configuration(model, "data=2,tensor=2", "zero1", 16, HARDWARE["a100-nvlink"])
    assert by_name.hardware.name == "a100-nvlink-ib" and by_object.hardware.name == "a100-nvlink"
    assert by_name.step_s > 0 and by_name.choice.peak_bytes == by_object.choice.peak_bytes
    line = refused(lambda: price_configuration(model, "data=2", "zero1", 16, "a100"))
    assert line.startswith("unknown hardware 'a100'; known presets: ")
    assert line.endswith("did you mean 'a100-nvlink-ib' or 'a100-nvlink'?")


def test_plan_and_price_configuration_take_a_setting_as_they_take_the_keywords() -> None:
    from placement_edu import TransformerSpec
    from placement_edu.planner import plan
    from placement_edu.pricing import price_configuration
    from placement_edu.setting import resolve

    model = TransformerSpec(**SMALL_GPT)
    setting = resolve("zero1", model, "data=2,tensor=2", "mixed_adam", "a100-nvlink-ib")
    keywords = price_configuration(model, "data=2,tensor=2", "zero1", 16, "a100-nvlink-ib")
    assert price_configuration(setting, global_batch=16).to_dict() == keywords.to_dict()
    budget = resolve(model=model, hardware="a100-nvlink-ib", memory=40 * 10**9)
    planned = plan(budget, 8, global_batch=64)
    assert planned.budget_bytes == 40 * 10**9 and planned.hardware.name == "a100-nvlink-ib"
    keyword_plan = plan(model, 8, 40 * 10**9, "a100-nvlink-ib", global_batch=64)
    assert planned.to_dict() == keyword_plan.to_dict()


def test_the_door_resolves_each_value_once(monkeypatch) -> None:
    # analyze's keyword form resolves the strategy and parses the mesh once; a Setting, never
    import placement_edu.mesh as mesh_module
    import placement_edu.setting as door
    from placement_edu import analyze

    calls: list[str] = []
    for module, name in ((door, "get_strategy"), (door, "get_precision")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda v, real=real, n=name: calls.append(n) or real(v))
    parse = mesh_module.Mesh.parse
    monkeypatch.setattr(mesh_module.Mesh, "parse", lambda t: calls.append("parse") or parse(t))
    report = analyze("zero3", 10**6, mesh="data=4")
    assert sorted(calls) == ["get_precision", "get_strategy", "parse"]
    setting = door.resolve("zero3", 10**6, "data=4")
    calls.clear()
    again = analyze(setting)
    assert calls == [] and again.memory == report.memory
    # zero3 on 4 devices, Ψ = 10^6: 16Ψ/4 = 4,000,000 B of state, + the gather window
    # (333,333.3 B) and the reduce bucket (166,666.7 B) of derive_memory: 4,500,000 B
    assert again.memory.peak == 4_500_000


# --- issue 41 item 1: one flag vocabulary -- one name for one thing, both spellings taken --------
TIME = ["time", "--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128", "--vocab"]
TIME += ["1000", "--global-batch", "8", "--mesh", "data=8", "--json"]


def json_of(capsys: pytest.CaptureFixture, argv: list[str]) -> dict:
    import json

    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_fit_and_time_take_each_others_words_for_one_thing(capsys) -> None:
    # once fit said fsdp2 and sdpa where time said zero3 and flash, and each refused the other's
    fit = ["fit", "--model", "gpt2", "--devices", "8", "--json"]
    fsdp2 = json_of(capsys, [*fit, "--strategy", "fsdp2", "--attention", "sdpa"])
    assert json_of(capsys, [*fit, "--strategy", "zero3", "--attention", "flash"]) == fsdp2
    no_reshard = json_of(capsys, [*fit, "--strategy", "fsdp2_no_reshard"])
    assert json_of(capsys, [*fit, "--strategy", "fsdp_grad_op"]) == no_reshard
    assert no_reshard["peak_bytes"] > fsdp2["peak_bytes"]  # gathered from forward to backward
    zero3 = json_of(capsys, [*TIME, "--strategy", "zero3", "--attention", "flash"])
    assert json_of(capsys, [*TIME, "--strategy", "fsdp2", "--attention", "sdpa"]) == zero3
    assert zero3["strategy"] == "zero3"


def test_fit_takes_the_hardware_presets_memory_as_plan_and_time_do(capsys) -> None:
    # once 80 GB in fit's examples and the preset's 80 GiB = 85,899,345,920 B in time's
    fit = ["fit", "--model", "gpt2", "--devices", "8", "--json", "--hardware", "h100-nvlink-ib"]
    assert json_of(capsys, fit)["memory_bytes"] == 85_899_345_920 == 80 * 2**30
    assert json_of(capsys, [*fit, "--memory-gb", "80"])["memory_bytes"] == 80 * 10**9


@pytest.mark.parametrize(
    "argv, says",
    [
        (  # fit's flags are resolved at the door (setting.resolve), as time's are
            ["fit", "--model", "gpt2", "--devices", "8", "--strategy", "zero4"],
            "unknown strategy 'zero4'; known strategies: dp, zero1_allreduce, zero1, zero2, zero3, "
            "fsdp, fsdp_grad_op, zero2_offload, zero3_offload, tp, pp; compositions: dp×tp, "
            "dp×pp, zero1×tp×pp, zero3×tp, dp×cp, dp×cp_ulysses, zero1×cp, hsdp; did you mean "
            "'zero3' or 'zero2'?",
        ),
        (  # ... and a strategy fit does not place is named as such
            ["fit", "--model", "gpt2", "--devices", "8", "--strategy", "zero1"],
            "fit places zero3 or fsdp_grad_op (FSDP2's fully_shard on every block), got zero1",
        ),
        (
            ["fit", "--model", "gpt2", "--devices", "8", "--attention", "sdp"],
            "unknown attention 'sdp'; accepted: eager, flash (aliases: sdpa = flash); did you "
            "mean 'sdpa'?",
        ),
        (
            ["fit", "--model", "gpt3", "--devices", "8"],
            "unknown model 'gpt3'; known: gpt2, llama-1b, llama-8b, or a path to an HF "
            "config.json; did you mean 'gpt2'?",
        ),
        (
            ["fit", "--model", "gpt2", "--devices", "8", "--precision", "mixed_adam"],
            "fit places FSDP2 steps in fp32_adam, fsdp2_bf16 (fit's fp32, fsdp2_bf16), got "
            "precision mixed_adam",
        ),
        (
            [*TIME, "--strategy", "fsdp3"],
            "unknown data placement 'fsdp3' in strategy 'fsdp3'; accepted: dp, zero1, zero2, "
            "zero3, fsdp_grad_op, hsdp, optionally composed as plan prints it (e.g. zero1×tp×pp); "
            "did you mean 'hsdp'?",
        ),
    ],
)
def test_a_near_miss_on_the_command_line_names_the_word_meant(capsys, argv, says) -> None:
    assert one_line_error(capsys, argv) == f"placement-edu: error: {says}"


def test_help_lists_the_canonical_names_with_their_aliases(capsys) -> None:
    for argv in (["fit", "--help"], ["time", "--help"]):
        try:
            code = main(argv)
        except SystemExit as leaving:
            code = leaving.code
        assert code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "zero3 (alias fsdp2)" in text and "fsdp_grad_op (alias fsdp2_no_reshard)" in text
        assert "flash (alias sdpa)" in text


def test_each_command_resolves_each_typed_value_once_within_twelve_files() -> None:
    # issue 41's walk (benchmarks/walk_arguments.py): run's arguments once crossed 24 files on the
    # way in and were resolved again below the door (fp64_adam three times, the mesh twice)
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks/walk_arguments.py"
    spec = importlib.util.spec_from_file_location("walk_arguments", path)
    assert spec is not None and spec.loader is not None
    walk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(walk)
    small = ["--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128", "--vocab", "1000"]
    for argv in [
        walk.RUN,
        walk.FIT,
        [
            "fit",
            "--model",
            "gpt2",
            "--mesh",
            "pipeline=2",
            "--precision",
            "fp32",
            "--attention",
            "eager",
        ],
        ["time", *small, "--global-batch", "8", "--mesh", "data=8", "--strategy", "fsdp2"],
        ["plan", *small, "--devices", "2", "--global-batch", "2", "--precision", "fp32_adam"],
        ["check", "zero3", "--mesh", "data=4"],
        ["table", "--params", "1e6", "--devices", "8", "--mesh", "data=8"],
    ]:
        _, resolved = walk.walk(argv)
        values = [value for _, _, value, _ in resolved]
        crossed = {frame.split(":")[0] for *_, frames in resolved for frame in frames}
        assert values and len(values) == len(set(values)), (argv[0], values)
        assert len(crossed) <= 12, (argv[0], sorted(crossed))
