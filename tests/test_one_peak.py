"""One peak (issue 39, item 2): ``time --model NAME`` reads the model's shape, and its peak is the
module's -- the same bytes ``fit`` derives for that placement -- with Korthikanti's formula beside
it; where fit does not derive the placement, the formula prices it and says why."""

from __future__ import annotations

import json

import pytest

from placement_edu.cli import main

pytestmark = pytest.mark.runtime  # (a profile is measured with torch where none is cached)

TORCHTITAN_8 = "--seq 8192 --attention flash --micro-batch 2 --global-batch 16 --mesh data=8"


def _json(capsys: pytest.CaptureFixture[str], argv: str) -> dict:
    capsys.readouterr()
    assert main([*argv.split(), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_times_peak_is_fits_and_the_formula_is_beside_it(capsys) -> None:
    out = _json(capsys, f"time --model llama-8b {TORCHTITAN_8} --strategy zero3 --recompute full")
    fit = _json(
        capsys,
        "fit --model llama-8b --devices 8 --micro-batch 2 --seq 8192 --recompute full",
    )  # (fit's defaults: FSDP2 bf16, SDPA: what time's mixed precision and flash map to)
    assert out["peak_bytes"] == fit["peak_bytes"]
    assert out["peak_from"].startswith("the module's profile") and "full" in out["peak_from"]
    # the formula's figure: what time prints for the same transformer given by its flags
    flags = _json(
        capsys,
        "time --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 "
        f"--block llama {TORCHTITAN_8} --strategy zero3 --recompute full",
    )
    assert out["formula_peak_bytes"] == flags["peak_bytes"] != out["peak_bytes"]
    assert out["step_s"] == flags["step_s"]  # the shape is the same: so is the time
    assert out["fits"] == (out["peak_bytes"] <= out["memory_bytes"])


def test_a_placement_fit_does_not_derive_is_the_formulas_and_says_why(capsys) -> None:
    out = _json(capsys, f"time --model llama-8b {TORCHTITAN_8} --strategy zero1")
    assert out["peak_bytes"] == out["formula_peak_bytes"]
    assert out["peak_from"].startswith("Korthikanti's formula (zero1 is not FSDP2")


@pytest.mark.parametrize(
    "argv, says",
    [
        ("--model gpt2 --layers 3", "--model gpt2 gives the shape; leave out --layers"),
        # GPT-2's table holds 1,024 positions; the formula's holds s rows: + 1,024·768 at 2,048
        ("--model gpt2 --seq 2048", "the formula's gpt block counts 125,226,240 at s = 2048"),
        ("", "give the transformer (--layers, --hidden, --heads, --seq, --vocab missing)"),
    ],
)
def test_model_and_shape_flags_are_one_or_the_other(capsys, argv: str, says: str) -> None:
    assert main(["time", *argv.split(), "--global-batch", "8", "--mesh", "data=8"]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_plan_prices_each_fsdp2_plan_by_the_module_and_the_rest_by_the_formula(capsys) -> None:
    out = _json(capsys, "plan --model llama-8b --devices 64 --memory-gb 80 --attention flash")
    every = out["ranked"] + out["infeasible"]
    module = [c for c in every if "formula_peak_bytes" in c]
    assert module and {c["strategy"].split("×")[0] for c in module} <= {
        "zero3",
        "fsdp",
        "hsdp",
        "fsdp_grad_op",
    }
    # every zero3 plan on data, replica and tensor axes alone; a pipeline's is the formula's
    for c in every:
        if c["strategy"].split("×")[0] == "zero3":
            on_fsdp2_axes = set(c["mesh"]) <= {"data", "replica", "tensor"}
            assert ("formula_peak_bytes" in c) == on_fsdp2_axes, c
    # an FSDP2 plan's peak is what time --model prices for the same configuration
    c = next(c for c in module if set(c["mesh"]) == {"data"})
    mesh = ",".join(f"{a}={d}" for a, d in c["mesh"].items())
    timed = _json(
        capsys,
        f"time --model llama-8b --attention flash --global-batch 1024 --mesh {mesh} "
        f"--strategy {c['strategy']} --recompute {c['recompute']}",
    )
    assert (timed["peak_bytes"], timed["formula_peak_bytes"]) == (
        c["peak_bytes"],
        c["formula_peak_bytes"],
    )
    assert "the module's (fit's profile and derivation)" in out["assumption"]


def test_table_gives_the_fsdp2_rows_the_modules_peak_beside_the_formulas(capsys) -> None:
    argv = "--model llama-8b --seq 8192 --micro-batch 2 --attention flash --recompute full"
    rows = {r["strategy"]: r for r in _json(capsys, f"table {argv} --devices 8")}
    timed = _json(capsys, f"time {argv} --global-batch 16 --mesh data=8 --strategy zero3")
    zero3, zero1 = rows["zero3"], rows["zero1"]
    assert (zero3["peak_bytes"], zero3["peak_from"][:20]) == (
        timed["peak_bytes"],
        "the module's profile",
    )
    assert zero3["formula_peak_bytes"] == zero3["memory"]["peak"]
    assert zero1["peak_bytes"] == zero1["formula_peak_bytes"] == zero1["memory"]["peak"]
    assert zero1["peak_from"].startswith("Korthikanti's formula (zero1 is not FSDP2")
    assert main(["table", "--model", "gpt2", "--params", "7e9", "--devices", "8"]) == 2
    assert "leave out --params" in capsys.readouterr().err


def test_fsdp_grad_op_is_fsdp2_without_resharding(capsys) -> None:
    # FSDP's SHARD_GRAD_OP keeps each block's parameters gathered from its forward to its
    # backward: FSDP2's fully_shard(reshard_after_forward=False), fit's fsdp2_no_reshard
    out = _json(
        capsys, f"time --model llama-8b {TORCHTITAN_8} --strategy fsdp_grad_op --recompute full"
    )
    fit = _json(
        capsys,
        "fit --model llama-8b --devices 8 --micro-batch 2 --seq 8192 --recompute full "
        "--strategy fsdp2_no_reshard",
    )
    zero3 = _json(capsys, f"time --model llama-8b {TORCHTITAN_8} --strategy zero3 --recompute full")
    assert out["peak_bytes"] == fit["peak_bytes"] > zero3["peak_bytes"]
    assert out["peak_from"].startswith("the module's profile")


def test_torchtitans_layer_k_is_priced_by_time_as_fit_derives_it(capsys) -> None:
    # layer:2: every second block checkpointed -- the module's peak is fit's, and the time model
    # replays the forward of the checkpointed half of the layers (L // 2 of L)
    argv = f"time --model llama-8b {TORCHTITAN_8} --strategy zero3"
    two = _json(capsys, f"{argv} --recompute layer:2")
    fit = _json(
        capsys, "fit --model llama-8b --devices 8 --micro-batch 2 --seq 8192 --recompute layer:2"
    )
    assert two["peak_bytes"] == fit["peak_bytes"]
    none, full = (_json(capsys, f"{argv} --recompute {r}") for r in ("none", "full"))
    assert none["step_s"] < two["step_s"] < full["step_s"]
    one = _json(capsys, f"{argv} --recompute layer:1")
    assert (one["step_s"], one["formula_peak_bytes"]) == (
        full["step_s"],
        full["formula_peak_bytes"],
    )
    assert one["peak_bytes"] == full["peak_bytes"]  # (fit's layer:1 is full to the byte)


def test_torchtitans_op_policy_is_priced_by_the_module_and_charged_its_flops(capsys) -> None:
    # issue 39, item 3: the peak is fit's under the same policy; the formula has none; the time
    # model charges k, o and up of every block (TransformerSpec.torchtitan_op_recomputed)
    argv = f"time --model llama-8b {TORCHTITAN_8} --strategy zero3"
    op = _json(capsys, f"{argv} --recompute torchtitan-op")
    fit = _json(
        capsys,
        "fit --model llama-8b --devices 8 --micro-batch 2 --seq 8192 --recompute torchtitan-op",
    )
    assert op["peak_bytes"] == fit["peak_bytes"] and op["formula_peak_bytes"] is None
    assert "torchtitan-op" in op["peak_from"] and op["fits"] == (
        op["peak_bytes"] <= op["memory_bytes"]
    )
    none = _json(capsys, f"{argv} --recompute none")
    # per device: 16 sequences of 8,192 tokens on 8 GPUs; 32 blocks of 2h(K·h/a + h + f) a token
    replayed = 32 * 2 * 4096 * (1024 + 4096 + 14336) * (16 * 8192 // 8)
    flops = {
        r: o["hardware_tflops_per_gpu"] * 1e12 * o["step_s"]
        for r, o in (("op", op), ("none", none))
    }
    assert flops["op"] - flops["none"] == pytest.approx(replayed, rel=1e-9)
    assert op["mfu"] * op["step_s"] == pytest.approx(none["mfu"] * none["step_s"], rel=1e-12)
