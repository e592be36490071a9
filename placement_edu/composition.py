"""Safety rules for composing placements on a mesh of named axes (SPEC §6).

A composed strategy gives each state a mode per axis. Memory multiplies over the axes a state is
split on, communication adds per axis; both are derived elsewhere. This module only answers: is
the composition safe? Each rule is a pure function of the placement and the mesh, and a broken
rule comes back as a RuleViolation naming the state, the axes and what to change -- so the
checker can report it, and the pricing functions (``derive_memory``, ``derive_schedule``) can
refuse it instead of silently pricing something that does not train correctly.

Rule 5 (ZeRO-2/3 gradients under micro-batching cost ×m) is a cost, not an error: the schedule
prices it and warns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from placement_edu.mesh import Mesh
from placement_edu.placement import BATCH_AXES, MODEL_STATES, SPLIT_MODES, WHOLE, Mode, State
from placement_edu.shown import Shown
from placement_edu.strategies import Strategy

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["RULES", "safety_violations"]

#: The composition rules by number (SPEC §6), each checked by ``safety_violations``.
RULES = {
    1: "orthogonality",
    2: "integrity per axis",
    3: "consistency per axis",
    4: "gather scope",
    5: "costs, not errors",
}
#: Which correctness condition (SPEC §5) each rule protects.
RULE_CONDITION = {
    1: "state_consistency",
    2: "gradient_integrity",
    3: "state_consistency",
    4: "state_consistency",
}


@dataclass(frozen=True)
class RuleViolation(Shown):
    """One broken safety rule: its number and name, the offending state(s) and axes, and why."""

    rule: int
    name: str
    state: str
    axes: tuple[str, ...]
    explanation: str

    def __str__(self) -> str:
        return f"rule {self.rule} ({self.name}) broken: {self.explanation}"

    def to_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "name": self.name,
            "state": self.state,
            "axes": list(self.axes),
            "explanation": self.explanation,
        }


def _v(rule: int, state: str, axes: tuple[str, ...], explanation: str) -> RuleViolation:
    return RuleViolation(rule, RULES[rule], state, axes, explanation + f" (SPEC §6 rule {rule})")


def _is(state: State) -> str:
    """'params are', 'grads are', 'optimizer state is': the subject of a learner-facing sentence."""
    return {State.PARAMS: "params are", State.GRADS: "grads are"}.get(state, "optimizer state is")


def orthogonality(strategy: Strategy, mesh: Mesh) -> Iterator[RuleViolation]:
    """Rule 1: one mesh axis shards at most one dimension of a tensor.

    Two axes MAY shard the same dimension: nested, the second splitting each slice of the first
    (FSDP2 + TP with ``_StridedShard``, JAX's ``P(('data', 'tensor'))``), so the slices stay
    disjoint and cover the tensor. What is forbidden is one axis splitting two dimensions: its
    collectives would have to move a slice that is not contiguous in either."""
    for axis, degree in mesh:
        dims = strategy.shard_dim(axis)
        states = [str(s) for s in MODEL_STATES if strategy.placement.mode(s, axis) in SPLIT_MODES]
        if degree > 1 and states and len(dims) > 1:
            yield _v(
                1,
                ", ".join(states),
                (axis,),
                f"the {axis} axis shards {' and '.join(repr(d) for d in dims)} of "
                f"{' and '.join(states)} at once: one axis may split one dimension only, so "
                f"its collectives move contiguous slices; give {axis} one dimension "
                "(Strategy.shard_dims) and let another axis split the other -- two axes may "
                "share a dimension, nested",
            )


def integrity_per_axis(strategy: Strategy, mesh: Mesh) -> Iterator[RuleViolation]:
    """Rule 2: every batch-splitting axis has a sum-reduction of gradients, once per step."""
    for axis in BATCH_AXES:
        n = mesh.degree(axis)
        if n > 1 and strategy.placement.mode(State.GRADS, axis) is Mode.M:
            yield _v(
                2,
                "grads",
                (axis,),
                f"grads are M (materialized) on the {axis} axis, which splits the batch "
                f"{n} ways: each rank uses the gradient it made and frees it, so nothing "
                f"sum-reduces it across the {n} {axis} ranks; place grads R (all-reduced) "
                f"or S (reduce-scattered) on {axis}",
            )


def consistency_per_axis(strategy: Strategy, mesh: Mesh) -> Iterator[RuleViolation]:
    """Rule 3: every state replicated along an axis gets identical updates along it.

    On batch-splitting axes the schedule guarantees it (summed gradients, and an all-gather of the
    parameters after an owner-only step). Along tensor and pipeline nothing re-gathers: a state
    whole there must be updated from a state that is whole there too.
    """
    pl = strategy.placement
    for axis, n in mesh:
        if n == 1 or axis in BATCH_AXES:
            continue
        for state, source in ((State.PARAMS, State.OPTIMIZER), (State.OPTIMIZER, State.GRADS)):
            if pl.mode(state, axis) in WHOLE and pl.mode(source, axis) in SPLIT_MODES:
                yield _v(
                    3,
                    str(state),
                    (axis,),
                    f"{_is(state)} {pl.mode(state, axis)} (a whole copy per rank) on the "
                    f"{axis} axis but {_is(source)} {pl.mode(source, axis)} there: each of the "
                    f"{n} {axis} ranks updates only its own slice of its {state} copy and "
                    f"nothing re-gathers it along {axis}, so the copies drift apart; split "
                    f"{state} on {axis} too, or keep {source} whole there",
                )


def gather_scope(strategy: Strategy, mesh: Mesh) -> Iterator[RuleViolation]:
    """Rule 4: an SG state is gathered only along the axis it is SG on, and that axis splits the
    batch (ZeRO-3 on data with TP on tensor gathers over data and yields the tensor-parallel
    slice)."""
    pl = strategy.placement
    for axis, n in mesh:
        if n == 1 or axis in BATCH_AXES:
            continue
        for state in MODEL_STATES:
            if pl.mode(state, axis) is Mode.SG:
                yield _v(
                    4,
                    str(state),
                    (axis,),
                    f"{_is(state)} SG on the {axis} axis: a gather along {axis} hands every "
                    f"rank the whole tensor, but {axis}-parallel compute uses only its own "
                    f"slice, so the gathered tensor is not the one any rank computes with; "
                    f"gather only along the batch-splitting axis (SG on data) and keep "
                    f"{state} S on {axis}",
                )


def safety_violations(strategy: Strategy, mesh: Mesh) -> tuple[RuleViolation, ...]:
    """Every broken safety rule (1-4) of ``strategy`` on ``mesh``, in rule order."""
    return (
        *orthogonality(strategy, mesh),
        *integrity_per_axis(strategy, mesh),
        *consistency_per_axis(strategy, mesh),
        *gather_scope(strategy, mesh),
    )
