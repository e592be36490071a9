"""Other tools' memory estimators reproduced as named conventions (placement_edu.estimators), and
``placement-edu estimate`` printing theirs beside ours. Each published figure is cited beside it."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from placement_edu.cli import main
from placement_edu.errors import PlacementError
from placement_edu.estimators import (
    accelerate_table,
    accelerate_training,
    deepspeed_printout,
    deepspeed_table,
    deepspeed_zero2,
    megatron_theoretical_memory,
    ours,
    reconcile,
)
from placement_edu.models import ModelSpec, TransformerSpec
from placement_edu.report import analyze

pytestmark = pytest.mark.fast

T5_3B = 2851 * 10**6  # DeepSpeed docs: estimate_..._all_cold(total_params=2851e6, ...)


def _rows(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if "| offload" in line]


# --- DeepSpeed ----------------------------------------------------------------------------
def test_deepspeed_zero2_cold_table_for_t5_3b_as_the_docs_print_it(capsys) -> None:
    # DeepSpeed docs, "Memory Requirements" (docs/code-docs/source/memory.rst), ZeRO-2,
    # estimate_zero2_model_states_mem_needs_all_cold(total_params=2851e6, num_gpus_per_node=8,
    # num_nodes=1):
    #   127.45GB |   5.31GB | offload_optimizer=cpu
    #   127.45GB |  15.93GB | offload_optimizer=none
    # The docs were printed by the estimator's first formula (PR #965: 4Ψ + 16Ψ/N).
    assert (
        main(
            [
                "estimate",
                "--convention",
                "deepspeed",
                "--params",
                "2.851e9",
                "--gpus-per-node",
                "8",
                "--nodes",
                "1",
                "--formula",
                "pr965",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert _rows(out) == [
        "  127.45GB |   5.31GB | offload_optimizer=cpu",
        "  127.45GB |  15.93GB | offload_optimizer=none",
    ]
    assert (
        "SW: Model with 2851M total params." in out
        and "HW: Setup with 1 node, 8 GPUs per node." in out
    )
    assert "GiB = 2^30 bytes" in out


def test_deepspeed_zero2_today_prints_11_28_not_the_docs_15_93(capsys) -> None:
    # deepspeed/runtime/zero/stage_1_and_2.py since PR #5099 (April 2024): 2Ψ + int(18Ψ/N)
    # = 5.702e9 + 6.41475e9 = 12,116,750,000 B = 11.28 GiB, printed "11.28GB".
    assert (
        main(
            [
                "estimate",
                "--convention",
                "deepspeed",
                "--params",
                "2.851e9",
                "--gpus-per-node",
                "8",
                "--nodes",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert _rows(out) == [
        "  127.45GB |   5.31GB | offload_optimizer=cpu",
        "  127.45GB |  11.28GB | offload_optimizer=none",
    ]
    row = deepspeed_zero2(T5_3B, 8, 1, offload_optimizer=False)
    assert row.gpu.total_bytes == 2 * T5_3B + 18 * T5_3B // 8 == 12_116_750_000
    assert row.cpu.total_bytes == T5_3B * 4 * 8 * 3 // 2  # the fp32 model each process loads, × 1.5


def test_deepspeed_zero2_agrees_with_ours_to_the_byte_under_mixed_adam_fp32_accum() -> None:
    # SPEC §1: mixed_adam_fp32_accum (2/6/12) counts the 2 + 4 gradient bytes DeepSpeed counts.
    for offload in (False, True):
        row = deepspeed_zero2(T5_3B, 8, 1, offload_optimizer=offload)
        mine = ours(analyze(_strategy(row), ModelSpec(T5_3B), 8, "mixed_adam_fp32_accum"))
        result = reconcile(row.gpu, mine)
        assert result.agrees and all(line.agrees for line in result.lines)
    # Under mixed_adam the gradient line differs by exactly the fp32 gradient copy, 4Ψ/N.
    row = deepspeed_zero2(T5_3B, 8, 1, offload_optimizer=False)
    result = reconcile(row.gpu, ours(analyze(_strategy(row), ModelSpec(T5_3B), 8, "mixed_adam")))
    grads = next(line for line in result.lines if line.kind == "grads")
    assert grads.theirs - grads.ours == 4 * T5_3B // 8 and not result.agrees


def _strategy(row):
    from placement_edu.strategies import Strategy

    return Strategy(f"zero{row.stage}", row.placement)


def test_deepspeed_zero3_cold_table_for_t5_3b_as_the_docs_print_it(capsys) -> None:
    # DeepSpeed docs, "Memory Requirements", ZeRO-3, estimate_zero3_model_states_mem_needs_all_cold(
    #   total_params=2851e6, largest_layer_params=32e6, num_gpus_per_node=8, num_nodes=1):
    published = [
        "   71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1",
        "  127.45GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0",
        "   63.72GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=1",
        "  127.45GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=0",
        "    1.43GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=1",
        "  127.45GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=0",
    ]
    assert (
        main(
            [
                "estimate",
                "--convention",
                "deepspeed",
                "--params",
                "2.851e9",
                "--gpus-per-node",
                "8",
                "--stage",
                "3",
                "--largest-layer",
                "32e6",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert _rows(out) == published
    assert "SW: Model with 2851M total params, 32M largest layer params." in out
    rows = deepspeed_table(T5_3B, 8, 1, stage=3, largest_layer=32 * 10**6)
    assert [r.printed for r in rows] == published
    assert deepspeed_printout(rows, T5_3B, 8, 1, 32 * 10**6).splitlines()[4:] == published


def test_deepspeed_zero3_without_offload_is_18_psi_over_n_plus_4_largest_layer() -> None:
    row = deepspeed_table(T5_3B, 8, 1, stage=3, largest_layer=32 * 10**6)[4]
    assert row.gpu.total_bytes == 4 * 32 * 10**6 + 18 * T5_3B // 8
    # Ours (zero3, 2/6/12) keeps 20Ψ/N persistent: DeepSpeed leaves the fp16 gradient slice (2Ψ/N)
    # out and counts the largest layer (4·LL) instead; each is a named line.
    result = reconcile(
        row.gpu, ours(analyze(_strategy(row), ModelSpec(T5_3B), 8, "mixed_adam_fp32_accum"))
    )
    by_kind = {line.kind: line for line in result.lines}
    assert by_kind["grads"].ours - by_kind["grads"].theirs == 2 * T5_3B // 8
    assert by_kind["window"].theirs == 4 * 32 * 10**6 and by_kind["window"].ours == 0


# --- Megatron-LM --------------------------------------------------------------------------
GPT3_175B = TransformerSpec(
    layers=96,
    hidden=12288,
    heads=96,
    seq=2048,
    vocab=51200,
    micro_batch=1,
    recompute="selective",
    sequence_parallel=True,
)
GPT_22B = TransformerSpec(
    layers=48,
    hidden=6144,
    heads=64,
    seq=2048,
    vocab=51200,
    micro_batch=1,
    recompute="selective",
    sequence_parallel=True,
)


def test_megatron_gpt3_175b_at_t8_p8() -> None:
    # Korthikanti et al. 2022 (arXiv 2205.05198), Table 3: the 175B model (GPT-3: 96 layers,
    # h = 12288, 96 heads, s = 2048, V = 51200) at tensor 8, pipeline 8. Megatron counts
    # L·(12h² + 4h) + 2h + V·h = 174,580,064,256 parameters ("175B").
    est = megatron_theoretical_memory(GPT3_175B, tensor=8, pipeline=8)
    # Table 2, sequence parallel + selective recomputation: 34·s·b·h/t per layer, L/p layers × p
    # micro-batches in flight on stage 0 = 34·sbh·L/t = 10,267,656,192 B -- ours to the byte.
    layers = next(t for t in est.terms if t.name == "transformer layers")
    assert layers.bytes == 34 * 2048 * 12288 * 96 // 8 == 10_267_656_192
    mine = ours(
        analyze(
            _megatron_strategy(8, GPT3_175B),
            GPT3_175B,
            mesh="data=1,tensor=8,pipeline=8",
            precision="mixed_adam_fp32_grads",
        ),
        transient=("activations",),
    )
    assert mine.kind_bytes("activations") == layers.bytes
    # What Megatron's report_theoretical_memory prints for it (18 B/param on the first stage:
    # (173,950,918,656/8 + 629,145,600)/8 = 2,796,626,304 params):
    assert est.printed == (
        "Theoretical memory footprints: weight and optimizer=48007.27 MB, "
        "activation=9816.02 MB, total=57823.29 MB"
    )


def test_megatron_22b_at_t8() -> None:
    # Korthikanti et al. 2022, Table 3: the 22B model (48 layers, h = 6144, 64 heads) at tensor 8,
    # pipeline 1; Megatron counts 22,059,036,672 parameters. b = 1 here.
    est = megatron_theoretical_memory(GPT_22B, tensor=8)
    assert est.printed == (
        "Theoretical memory footprints: weight and optimizer=47333.56 MB, "
        "activation=2505.50 MB, total=49839.06 MB"
    )
    # Without sequence parallelism Megatron takes its other branch: sbh(10 + 24/t) per layer,
    # × 1.05.
    plain = megatron_theoretical_memory(
        TransformerSpec(
            layers=48, hidden=6144, heads=64, seq=2048, vocab=51200, recompute="selective"
        ),
        tensor=8,
    )
    assert plain.printed.endswith("activation=7926.47 MB, total=55260.02 MB")
    assert any(t.kind == "buffer" and t.name == "overhead factor 1.05" for t in plain.terms)


def test_megatron_distributed_optimizer_is_6_plus_12_over_d_bytes_per_parameter() -> None:
    one = megatron_theoretical_memory(GPT_22B, tensor=8)
    sharded = megatron_theoretical_memory(GPT_22B, tensor=8, data=4, distributed_optimizer=True)
    weights = lambda e: sum(t.bytes for t in e.terms if t.kind in ("params", "grads", "optimizer"))  # noqa: E731
    assert weights(sharded) / weights(one) == Fraction(6 + Fraction(12, 4), 18)


def _megatron_strategy(p: int, model: TransformerSpec):
    from placement_edu.placement import Placement
    from placement_edu.strategies import Strategy

    split = {"data": "R", "tensor": "S", "pipeline": "S"}
    return Strategy(
        "megatron",
        Placement(params=split, grads=split, optimizer=split),
        micro_batches=p,
        sequence_parallel=model.sequence_parallel,
    )


# --- Accelerate ---------------------------------------------------------------------------
def test_accelerate_bert_base_cased_as_its_docs_print_it() -> None:
    # Accelerate docs, "Model memory estimator" (docs/source/usage_guides/model_size_estimator.md),
    # `accelerate estimate-memory bert-base-cased --dtypes float32 float16`:
    #   float32 | 84.95 MB | 413.18 MB | 1.61 GB
    #   float16 | 42.47 MB | 206.59 MB | 826.36 MB
    # bert-base-cased: 108,310,272 parameters, plus two int64 buffers of 512 (8,192 B) that
    # calculate_maximum_sizes counts; its largest layer is the 28996 × 768 word embedding.
    rows = accelerate_table(108_310_272, buffer_bytes=8192, largest_layer=28996 * 768)
    assert rows[:2] == (
        ("float32", "84.95 MB", "413.18 MB", "1.61 GB"),
        ("float16", "42.47 MB", "206.59 MB", "826.36 MB"),
    )
    # The same page's int8/int4 rows (413.18 MB, 206.59 MB for training) come from an older
    # version; today's estimate_training_usage returns -1 for them, printed "N/A".
    assert rows[2][3] == rows[3][3] == "N/A"


def test_accelerate_prints_the_largest_phase_not_the_sum() -> None:
    psi = 10**9
    f32 = accelerate_training(psi, "float32")
    assert f32.rule == "max" and f32.total_bytes == 16 * psi  # step: 4 × the fp32 model size
    f16 = accelerate_training(psi, "float16")
    assert f16.total_bytes == 8 * psi  # optimizer: 2 × the fp32 size
    # fp32: their largest phase equals our P + G + O sum under fp32_adam (4/4/8) ...
    assert reconcile(f32, ours(analyze("dp", ModelSpec(psi), 1, "fp32_adam"))).agrees
    # ... mixed precision: 8Ψ printed, 16Ψ alive at once (mixed_adam), the last line says why.
    result = reconcile(f16, ours(analyze("dp", ModelSpec(psi), 1, "mixed_adam")))
    assert (
        not result.agrees and result.lines[-1].kind == "total" and "largest" in result.lines[-1].why
    )


def test_estimate_json_is_exact_bytes(capsys) -> None:
    assert main(["estimate", "--convention", "accelerate", "--params", "1e9", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparisons"][0]["theirs"]["total_bytes"] == 16 * 10**9
    assert data["comparisons"][0]["agree"] is True


# --- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, named",
    [
        (["--convention", "deepspeed", "--params", "-1"], "-1"),
        (["--convention", "deepspeed", "--params", "nan"], "nan"),
        (["--convention", "tensorflow", "--params", "1e9"], "tensorflow"),
        (["--convention", "deepspeed", "--params", "1e9", "--gpus-per-node", "0"], "0"),
        (["--convention", "deepspeed", "--params", "1e9", "--stage", "3"], "--largest-layer"),
        (["--convention", "megatron", "--params", "1e9"], "--layers"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_value(
    capsys, argv: list[str], named: str
) -> None:
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err, err


def test_the_core_refuses_a_largest_layer_above_the_model() -> None:
    with pytest.raises(PlacementError, match="largest_layer"):
        deepspeed_table(1000, stage=3, largest_layer=1001)
