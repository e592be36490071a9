"""The activation explorers: moving a control moves the bars, and every bar is the core's number
(Korthikanti et al. 2022, arXiv 2205.05198, Table 2; SPEC §3 and §4's pipeline live sets)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from placement_edu import Mesh, get_precision, get_strategy
from placement_edu.memory import derive_memory
from placement_edu.models import TransformerSpec
from placement_edu.presentation.activation_explorer import (
    CONFIGS,
    ActivationExplorer,
    TERM_STYLE,
    LiveSetExplorer,
    korthikanti_model,
)
from placement_edu.units import GB

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    "recompute, sp, t", list(itertools.product(TransformerSpec.RECOMPUTE, (False, True), (1, 3, 8)))
)
def test_the_named_terms_sum_to_the_activation_bytes_per_layer(
    recompute: str, sp: bool, t: int
) -> None:
    spec = TransformerSpec(
        layers=2,
        hidden=96,
        heads=8,
        seq=64,
        vocab=100,
        micro_batch=3,
        recompute=recompute,
        sequence_parallel=sp,
    )
    terms = spec.activation_terms_per_layer(t)
    assert tuple(terms) == TransformerSpec.ACTIVATION_TERMS
    assert sum(terms.values()) == spec.activation_bytes_per_layer(t)


def test_gpt3_175b_terms_at_t8_are_korthikantis() -> None:
    # Korthikanti et al. 2022, Table 2 at t = 8 for GPT-3 175B (s = 2048, b = 1, h = 12288, a = 96):
    # sbh(10 + 24/8 + 5as/(8h)) = sbh(10 + 3 + 10) = 23 sbh.
    sbh = 2048 * 12288
    terms = korthikanti_model("GPT-3 175B").activation_terms_per_layer(8)
    assert terms == {
        "outside_tp": 10 * sbh,
        "inside_tp": 3 * sbh,
        "attention_scores": 10 * sbh,
        "layer_input": 0,
    }


def test_the_5as2b_label_names_korthikantis_three_tensors() -> None:
    # Korthikanti et al. 2022, §4.1: softmax output (2as²b), dropout mask (as²b), dropout output
    # (2as²b) -- not the softmax and the mask alone (3as²b)
    label = TERM_STYLE["attention_scores"]["label"]
    assert "softmax output + dropout mask + dropout output" in label


def _widths(explorer: ActivationExplorer, config) -> dict[str, float]:
    return {term: bar.get_width() for term, bar in explorer.bars[config].items()}


def test_moving_recompute_tensor_and_sp_moves_the_bars_to_the_core_numbers() -> None:
    explorer = ActivationExplorer(model="GPT-3 175B", tensor=8)
    first = bytes(explorer.image.value)
    spec = korthikanti_model("GPT-3 175B")
    assert explorer.update() == spec.activation_terms_per_layer(8)
    explorer.recompute.value = "selective"
    explorer.sequence_parallel.value = True
    chosen = explorer.terms[("selective", True)]
    assert sum(chosen.values()) == 2048 * 12288 * Fraction(34, 8)  # sbh·34/t
    assert chosen["attention_scores"] == 0
    assert "0.106955 GB" in explorer.readout.value
    assert bytes(explorer.image.value) != first
    before = _widths(explorer, ("none", False))
    explorer.tensor.value = 2
    after = _widths(explorer, ("none", False))
    assert after["inside_tp"] == pytest.approx(4 * before["inside_tp"])  # 24sbh/t: t 8 -> 2
    assert after["outside_tp"] == pytest.approx(before["outside_tp"])  # 10sbh: not split by TP
    for config in CONFIGS:
        expected = korthikanti_model(
            "GPT-3 175B", recompute=config[0], sequence_parallel=config[1]
        ).activation_bytes_per_layer(2)
        assert sum(_widths(explorer, config).values()) == pytest.approx(float(expected) / GB)
    explorer.micro_batch.value = 4
    assert sum(explorer.terms[("full", False)].values()) == 2 * 2048 * 4 * 12288  # 2sbh, b = 4


def test_live_set_explorer_counts_micro_batches_as_derive_memory_does() -> None:
    explorer = LiveSetExplorer(schedule="1f1b", stages=4, micro_batches=8)
    assert explorer.blocks == [4, 3, 2, 1]  # 1F1B: at most p - stage
    one = explorer.live_bytes[3]
    explorer.schedule.value = "gpipe"
    assert explorer.blocks == [8, 8, 8, 8]  # GPipe: all m in flight
    assert explorer.live_bytes == [8 * one] * 4
    strategy = get_strategy("pp").with_(micro_batches=8, pipeline_schedule="gpipe")
    assert explorer.live_bytes[0] == derive_memory(
        strategy, explorer.model, Mesh.of(pipeline=4), get_precision("mixed_adam"), 0
    ).transient_peak("activations")
    explorer.schedule.value = "no pipeline"
    assert explorer.blocks == [1, 1, 1, 1]  # accumulation: one micro-batch at a time
    assert explorer.live_bytes[0] == 4 * one  # all layers on one device: 4x a stage's
