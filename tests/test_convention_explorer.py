"""The ConventionExplorer (notebook 12): another tool's printed figure beside ours, reconciled term
by term; every number it shows is the estimators' and the core's."""

from __future__ import annotations

from fractions import Fraction

import pytest

pytestmark = pytest.mark.fast

pytest.importorskip("ipywidgets")

from placement_edu.estimators import accelerate_training, deepspeed_zero2, ours, reconcile  # noqa: E402
from placement_edu.models import ModelSpec  # noqa: E402
from placement_edu.presentation.convention_explorer import (  # noqa: E402
    CONVENTIONS,
    ConventionExplorer,
    reconciliation,
)
from placement_edu.report import analyze  # noqa: E402

T5_3B = 2851 * 10**6


def test_the_default_shows_deepspeeds_11_28_and_agrees_with_ours_to_the_byte() -> None:
    # DeepSpeed's estimate_zero2 today (PR #5099) for t5-3b on 8 GPUs prints 11.28GB (GiB, in fact).
    explorer = ConventionExplorer()
    result = explorer.update()
    assert result.theirs.printed.strip() == "11.28GB"
    assert (
        result.theirs.total_bytes
        == deepspeed_zero2(T5_3B, 8, 1, offload_optimizer=False).gpu.total_bytes
    )
    assert result.agrees and "agree to the byte" in explorer.readout.value and explorer.image.value


def test_changing_a_control_changes_the_figure_and_the_values_equal_the_cores() -> None:
    explorer = ConventionExplorer()
    before_png, before_html = explorer.image.value, explorer.readout.value
    explorer.precision.value = "mixed_adam"  # ours: fp16 gradients only -> differs by 4Ψ/N
    assert explorer.image.value != before_png and explorer.readout.value != before_html
    result = explorer.current()
    mine = ours(analyze("zero2", ModelSpec(T5_3B), 8, "mixed_adam"))
    assert result.ours.total_bytes == mine.total_bytes
    grads = next(line for line in result.lines if line.kind == "grads")
    assert grads.theirs - grads.ours == 4 * T5_3B // 8 and not result.agrees

    explorer.convention.value = "accelerate-float16"  # the largest phase (8Ψ), not the 16Ψ sum
    explorer.precision.value = "(the tool's own)"
    result = explorer.current()
    expected = reconcile(
        accelerate_training(T5_3B, "float16"),
        ours(analyze("dp", ModelSpec(T5_3B), 1, "mixed_adam")),
    )
    assert result.theirs.total_bytes == expected.theirs.total_bytes == 8 * T5_3B
    assert result.ours.total_bytes == expected.ours.total_bytes == 16 * T5_3B
    assert result.lines[-1].kind == "total" and "largest" in result.lines[-1].why


@pytest.mark.parametrize("convention", list(CONVENTIONS))
def test_every_convention_reconciles_and_draws(convention: str) -> None:
    result = reconciliation(convention, 10**9, 4)
    assert Fraction(result.theirs.total_bytes) > 0 and result.lines
    explorer = ConventionExplorer(convention=convention, psi=1e9, devices=4)
    png = explorer.image.value
    explorer.devices.value = 64
    if convention.startswith("deepspeed-zero2") and convention != "deepspeed-zero2-offload":
        assert explorer.image.value != png  # N divides their figure and ours
