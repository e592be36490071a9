"""What the checker says: every sentence of its verdicts, one function (or constant) per finding.

The walks (``integrity.py``, ``consistency.py``) decide which findings a schedule has; the words
live here, so that a reader sees every message the checker can give in one place. A problem's
sentence names what is wrong and how to fix it (SPEC §4's rules, §6's safety rules); a condition
that holds says why.
"""

from __future__ import annotations

from placement_edu.placement import EXPERT_AXIS
from placement_edu.schedule import Op


def cap(text: str) -> str:
    """The sentence with its first letter capitalised."""
    return text[:1].upper() + text[1:]


def verdict(problems: list[str]) -> str:
    """Several problems as one paragraph, each a capitalised sentence."""
    return " ".join(cap(p) for p in problems)


# --- gradient integrity: what is wrong ------------------------------------------------------
NO_OPTIMIZER_STEP = "the schedule has no optimizer_step, so no gradient is ever applied."


def reduction_before_backward(op: Op) -> str:
    return (
        f"the {op.op} of grads on {op.axis} runs in {op.phase}, before backward has "
        "produced the gradient it should sum; move it into backward."
    )


def extra_reduction(op: Op) -> str:
    return (
        f"grads are summed on the {op.axis} axis where they are not partial (an "
        f"extra {op.op}): the step uses {op.group}× the summed gradient; reduce each "
        "gradient exactly once per batch-splitting axis."
    )


def which_micro_batches(spans: list[list[int]], count: int, m: int) -> str:
    """ " for micro-batches 0..3, 7" (the spans [a, b) still partial), or "" when all m are."""
    if count == m:
        return ""
    return f" for micro-batch{'es' if count > 1 else ''} " + ", ".join(
        str(a) if b - a == 1 else f"{a}..{b - 1}" for a, b in spans
    )


def partial_fix(axis: str, reduction: str, experts: bool) -> str:
    """How to sum a gradient left partial on ``axis`` (``reduction``: the strategy's collective
    there; ``experts``: an expert axis splits the batch too)."""
    if axis == EXPERT_AXIS:
        return (
            "all-reduce the dense grads over the data × expert group (every rank that read "
            "other tokens) in backward, before optimizer_step"
        )
    if axis == "tensor":
        return (
            "all-reduce the gradients of parameters replicated across tensor ranks (e.g. "
            "norms) on tensor: under sequence parallelism each tensor rank saw only its slice "
            "of the sequence (SPEC §6 rule 3)"
        )
    first = "the experts' grads over their data replicas: " if experts else ""
    return (
        f"{first}sum them with {'an' if reduction == 'all_reduce' else 'a'} "
        f"{reduction} of grads on {axis} in backward, before optimizer_step"
    )


def still_partial(axis: str, n: int, which: str, whole: bool, fix: str) -> str:
    return (
        f"grads reach optimizer_step still partial on the {axis} axis ({n} ranks){which}: each "
        "rank would apply only the gradient of its own slice of the batch"
        f"{', so the replicas drift apart' if whole else ''}; {fix}."
    )


def never_scaled(need: int, ways: str) -> str:
    return (
        f"the summed gradient is never divided by {need} ({ways}): the optimizer steps "
        f"with {need}× the batch-mean gradient; scale it once by {need} after the "
        "reduction."
    )


def scaled_twice(signature: tuple[int, ...], total: int, need: int) -> str:
    return (
        f"the summed gradient is divided {len(signature)} times "
        f"({' then '.join(map(str, signature))}, {total} in all) instead of once by "
        f"{need}: every step is {total // need}× too small (the double-scale fault); scale "
        "exactly once, after the reduction."
    )


def scaled_wrong(by: int, need: int, ways: str) -> str:
    return (
        f"the summed gradient is divided by {by}, but the batch is split "
        f"{need} ways ({ways}): divide it once by {need}."
    )


# --- gradient integrity: why it holds --------------------------------------------------------
def no_batch_axis(mesh: object, m: int, tensor: bool) -> str:
    reason = (
        f"No axis of this mesh ({mesh}) splits the batch, so each gradient is whole when "
        "backward ends"
        + (f" and the {m} micro-batches' gradients accumulate locally" if m > 1 else "")
        + "; none reaches optimizer_step partial and none needs scaling."
    )
    if tensor:
        return (
            reason[:-1] + "; the gradients of tensor-replicated params are all-reduced on tensor."
        )
    return reason


def expert_groups(ways: str, d: int) -> str:
    """The two groups of expert parallelism (schedule/expert_parallel.py)."""
    return (
        f"{ways} for the dense params; the experts' own grads are whole on expert (the "
        "all-to-alls brought every token that chose them)"
        + (f" and partial only over their {d} data replicas" if d > 1 else "")
    )


def micro_batch_reductions(m: int, per_micro_batch: bool) -> str:
    if m <= 1:
        return ""
    if per_micro_batch:
        return (
            f", once for each of the {m} micro-batches as it is produced (×{m} traffic, SPEC §6 "
            "rule 5)"
        )
    return f", after local accumulation over the {m} micro-batches"


def integrity_holds(ways: str, ops: str, axes: int, when: str, need: int) -> str:
    return (
        f"Each gradient leaves backward partial on {ways}; "
        f"{ops} sum{'s' if axes == 1 else ''} it before optimizer_step{when}, and it is "
        f"divided by {need} exactly once."
    )


# --- state consistency -----------------------------------------------------------------------
def starts_identical(axis: str) -> str:
    return f"replicated params start identical (start-up broadcast on {axis})"


def no_startup_broadcast(axis: str, n: int) -> str:
    return (
        f"params are replicated on the {axis} axis ({n} ranks) but no start-up "
        "broadcast makes the copies identical: each rank keeps its own initialisation "
        "(e.g. its own seed), so there is no single model to match; broadcast params "
        f"on {axis} once at start-up (SPEC §4 rule 4)."
    )


def resynced(gathered: bool, axis: str) -> str:
    """Replicas made one model again after an owner-only step: all-gathered, or broadcast."""
    how = "all-gathered" if gathered else "broadcast by their owners"
    return f"after the owner-only optimizer step the params are {how} on {axis}"


def no_resync(mode: object, axis: str, n: int) -> str:
    return (
        f"optimizer state is {mode} on the {axis} axis, so each of the {n} ranks "
        "updates only its own slice of the replicated params, and no all-gather of "
        f"params on {axis} follows optimizer_step: the copies drift apart from the "
        f"first step; all-gather params on {axis} after the step (SPEC §4 rule 2)."
    )


def same_update(axis: str) -> str:
    return f"every rank applies the same update to its replica, from the gradient summed on {axis}"


def own_update(axis: str, n: int) -> str:
    return (
        f"nothing sums the gradients on the {axis} axis, so each of the {n} ranks "
        "updates its whole replica from its own samples' gradient: the replicas, "
        "identical at the start, differ from the next step on"
    )


def no_forward_gather(mode: object, axis: str, n: int) -> str:
    return (
        f"params are {mode} on the {axis} axis but nothing all-gathers them before "
        f"forward: each rank holds only a 1/{n} slice; all-gather params on "
        f"{axis} before forward (SPEC §4 rule 3)."
    )


def no_backward_gather(axis: str) -> str:
    return (
        f"params are freed after forward but no all-gather on {axis} rebuilds them "
        f"before backward; gather them again on {axis} (SPEC §4 rule 3)."
    )


def stale_gather(axis: str, phases: str) -> str:
    return (
        f"the all-gather of params on {axis} before {phases} returns the previous "
        "step's slices (a stale gather): forward and backward use parameters one "
        "update behind the ones the optimizer holds, so the gradients belong to an old "
        f"model; every gather on {axis} must read the slices written by the latest "
        "optimizer_step."
    )


def current_gathers(axis: str, n: int) -> str:
    return (
        f"params are stored as disjoint 1/{n} slices on {axis} and every all-gather "
        "rebuilds the current step's version"
    )


def misplaced_gather(op: Op, mode: object) -> str:
    return (
        f"an all-gather of params on {op.axis} in {op.phase} has no slices to rebuild there "
        f"(params are {mode} on {op.axis}); gather params only along the axis they are SG on, "
        "or after an owner-only step."
    )


def drifts(drift: list[str]) -> str:
    return (
        "Gradient integrity is broken, and that breaks this condition too: "
        + "; ".join(drift)
        + "."
    )


DISJOINT_SLICES = (
    "each sharded state is split along one axis per dimension, so its slices are disjoint "
    "and cover it"
)
NOTHING_TO_KEEP = (
    "No state is replicated or sharded along any axis of this mesh, so there are no "
    "copies to keep identical."
)

# the expert axis: the dense weights whole on its ranks
DENSE_START_IDENTICAL = "the dense params start identical on the expert ranks (start-up broadcast)"
DENSE_SUMMED = "every rank updates its dense params from the gradient summed on data × expert"


def dense_no_broadcast(n: int) -> str:
    return (
        f"the dense params are replicated on the expert axis ({n} ranks) but no start-up "
        "broadcast makes the copies identical; broadcast them on expert once at start-up "
        "(SPEC §4 rule 4)."
    )


def dense_own_update(n: int) -> str:
    return (
        f"nothing sums the dense gradients over the data × expert group, so each of the {n} "
        "expert ranks updates its dense params from its own tokens' gradient: they differ from "
        "the next step on"
    )


# --- one condition as the other's consequence (SPEC §5) --------------------------------------
def computed_on_other_params(right: str) -> str:
    return (
        "State consistency is broken, so from the next step on the gradients are computed on "
        "parameters that are not one model's: the gradient the optimizer applies is not the "
        f"single-device gradient, although the schedule reduces it right ({right})."
    )


def with_consequence(reason: str, name: str) -> str:
    return f"{reason} From the next step on, {name} fails too, as a consequence."
