"""Exercises of the notebook "Correctness: when does distributed training equal one device?"."""

from __future__ import annotations

from fractions import Fraction

from placement_edu.checker import check
from placement_edu.exercises import Exercise
from placement_edu.faults import FAULTS, FaultName


def adam_first_step_change(grad: Fraction, n: int, eps: Fraction) -> Fraction:
    """Relative change of Adam's first update of one element when its gradient ``grad`` reaches
    the optimizer divided by ``n`` once more (the double-scale fault). On the first step
    m̂ = g and v̂ = g², so the update is lr·g/(|g| + ε); the change is (n − 1)ε/(|g| + nε):
    ≈ 0 for ε ≪ |g| (Adam is almost scale-invariant), 1 − 1/n for ε ≫ |g| (like SGD)."""
    g = abs(Fraction(grad))
    return (n - 1) * Fraction(eps) / (g + n * Fraction(eps))


def _condition(fault: str) -> str:
    return FAULTS[fault].condition.replace("_", " ")


def _equivalent(strategy: str, fault: str) -> bool:
    return not check(strategy, fault=fault).broken


EXERCISES = (
    Exercise(
        "correctness-double-scale-condition",
        "The fault `double-scale` divides the reduced gradient by N a second time. Which "
        'condition does it break: `"gradient integrity"` or `"state consistency"`?',
        lambda: _condition(FaultName.DOUBLE_SCALE),
        "",
        "every rank still takes the same step on the same copy (consistency holds), but the "
        "gradient the optimizer applies is not the whole batch's gradient with the same "
        "normalisation: integrity.",
        mistakes=(
            (
                "state consistency",
                "the copies stay identical: every rank applies the same (wrong) "
                "gradient. What is wrong is the gradient itself.",
            ),
        ),
        hint=(
            "ask: are the copies still identical? is the gradient still the single-device gradient?"
        ),
    ),
    Exercise(
        "correctness-adam-eps-change",
        "First Adam step on one element with gradient g = 0.01, N = 4. Under `double-scale` "
        "Adam sees g/4 instead of g. With ε = 1e-8, by what relative amount does the update "
        "lr·m̂/(√v̂ + ε) change (within 10%)?",
        lambda: adam_first_step_change(Fraction(1, 100), 4, Fraction(1, 10**8)),
        "(relative)",
        "on the first step m̂ = g and √v̂ = |g|, so the update is lr·g/(|g| + ε): the scale "
        "cancels except through ε. (N − 1)ε/(|g| + Nε) = 3e-8/0.01 ≈ 3e-6 — invisible next to real "
        "faults, which is why the runtime uses ε = 1e-3 (and says so).",
        mistakes=(
            (
                Fraction(3, 4),
                "that is SGD's change (the step scales with g): Adam divides by √v̂ ≈ |g|.",
            ),
            (
                adam_first_step_change(Fraction(1, 100), 4, Fraction(1, 1000)),
                "that is at the runtime's ε = 1e-3, not 1e-8.",
            ),
        ),
        tolerance=0.1,
        hint="write the first step's m̂ and v̂ in terms of g; what is left of the scale?",
        devices=4,
    ),
    Exercise(
        "correctness-zero1-skip-param-sync-equivalent",
        "`zero1` with the fault `skip-param-sync`: the owners update their slice, the "
        "all-gather of P is skipped. Does the run still produce the single-device parameter "
        "sequence? (`True` or `False`)",
        lambda: _equivalent("zero1", FaultName.SKIP_PARAM_SYNC),
        "",
        "no: each rank's replicated P gets only its own slice's update, so the copies drift apart "
        "from the first step (state consistency broken) — there is no single "
        "model left to compare.",
        mistakes=(
            (
                True,
                "the gradients are reduced correctly, but only the owner's slice of P moves on "
                "each rank: the copies of a replicated state must get identical updates.",
            ),
        ),
        hint="after the step, does every rank's copy of P hold every slice's update?",
    ),
    Exercise(
        "correctness-zero3-stale-gather-condition",
        "`zero3` with `stale-gather`: an all-gather of P returns the previous step's slices. "
        'Which condition breaks: `"gradient integrity"` or `"state consistency"`?',
        lambda: _condition(FaultName.STALE_GATHER),
        "",
        "a gather must rebuild the current version of an SG state: returning last step's slices "
        "breaks state consistency, even though every gradient is still reduced and "
        "scaled exactly once.",
        mistakes=(
            (
                "gradient integrity",
                "the reduction is intact; the forward pass used an old P, which is "
                "a state-consistency failure (the gather's version).",
            ),
        ),
        hint="SPEC §5: 'every gather rebuilds the current version' is part of which condition?",
    ),
)
