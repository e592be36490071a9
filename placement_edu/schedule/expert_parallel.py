"""Expert parallelism's rules (issue 26, item 2), one small function each, read from the mesh's
expert axis and the model's experts (``placement_edu.experts``):

- ``expert_all_to_alls``  the router's tokens go to their experts' ranks and come back: dispatch
                          and combine in forward, the same two reversed in backward
- ``expert_parallel_grads`` the experts' grads reduced over their d data replicas, the dense
                          grads over the data × expert group (d·e ranks)
- ``dense_startup_broadcast`` the dense weights, R across the expert ranks, start identical there
"""

from __future__ import annotations

from fractions import Fraction

from placement_edu.axes import split_axes
from placement_edu.experts import MoESpec, all_to_all_elements, has_experts, moe_layers_on_stage
from placement_edu.placement import EXPERT_AXIS, STARTUP, State
from placement_edu.schedule.ops import Op, Repeat, Tag, held
from placement_edu.schedule.rules import Device, reduce_partial_grads
from placement_edu.schedule.costs import OpKind

#: Why each MoE all-to-all is there, in the order a pass runs them (forward, then backward:
#: backward meets the combine first, it runs forward's exchanges in reverse).
ALL_TO_ALLS = {
    "forward": (
        ("dispatch", "forward: send each routed token to the rank that holds its expert"),
        ("combine", "forward: bring the experts' outputs back to their tokens' ranks"),
    ),
    "backward": (
        ("combine", "backward: send each output's gradient back to the rank of its expert"),
        ("dispatch", "backward: bring the input gradients back to their tokens' ranks"),
    ),
}


def expert_model(dev: Device) -> MoESpec | None:
    """The mixture of experts an expert axis splits on ``dev``; None without one (no expert axis,
    or a model without experts)."""
    model = dev.model
    return model if has_experts(model) and dev.mesh.degree(EXPERT_AXIS) > 1 else None


def expert_degree(dev: Device) -> int:
    """e, the expert axis' degree (1 without one, or on a model without experts)."""
    return dev.mesh.degree(EXPERT_AXIS) if has_experts(dev.model) else 1


def expert_all_to_alls(dev: Device, phase: str) -> list[Op | Repeat]:
    """Per MoE layer of the stage and per micro-batch, two all-to-alls in ``phase`` over the e
    expert ranks, each of E·C·h elements (``experts.all_to_all_elements``): 4 per layer per
    micro-batch, forward and backward."""
    model, e = expert_model(dev), expert_degree(dev)
    if model is None:
        return []
    size = all_to_all_elements(model)
    block = [
        dev.op(OpKind.ALL_TO_ALL, State.ACTIVATIONS, EXPERT_AXIS, phase, size, e, why)
        for _, why in ALL_TO_ALLS[phase]
    ]
    return held(block, moe_layers_on_stage(model, dev.stages, dev.stage))


def expert_parallel_grads(dev: Device, tag: Tag) -> list[Op | Repeat]:
    """The gradient reductions under expert parallelism (``reduce_partial_grads``' rule 1, with
    the two groups EP makes; every state is whole on data, ``check_expert_axis``, so both are
    all-reduces):

    - the dense grads (attention, router, norms, embeddings) are partial on every rank that read
      other tokens, the d·e ranks of the data × expert group: one all-reduce there (recorded on
      the expert axis, its group d·e);
    - an expert's grads are whole along the expert axis -- the all-to-alls brought it every token
      that chose it -- and partial over the d data replicas of that expert: one all-reduce on
      data (none when d = 1).

    Without an expert axis: rule 1's reductions (``reduce_partial_grads``)."""
    model = expert_model(dev)
    if model is None:
        return reduce_partial_grads(dev, tag)
    d, e = dev.mesh.degree("data"), expert_degree(dev)
    split = split_axes(dev.strategy.placement, State.GRADS, dev.mesh, exclude=EXPERT_AXIS)
    other = 1
    for n in split.values():
        other *= n
    dense = Fraction(model.dense_elements, other)
    experts = Fraction(model.expert_elements, other * e)
    ops: list[Op | Repeat] = [
        dev.op(
            OpKind.ALL_REDUCE,
            State.GRADS,
            EXPERT_AXIS,
            "backward",
            dense,
            d * e,
            f"the dense grads are partial on all {d * e} ranks of the data × expert group (EP is "
            "carved from data: each rank read other tokens): all-reduce them there",
            micro_batches=tag,
        )
    ]
    if d > 1:
        ops.append(
            dev.op(
                OpKind.ALL_REDUCE,
                State.GRADS,
                "data",
                "backward",
                experts,
                d,
                f"each expert's grads are whole on the expert axis (the all-to-alls brought it "
                f"every token that chose it) but partial over its {d} data replicas: all-reduce "
                "them on data",
                micro_batches=tag,
            )
        )
    return ops


def dense_startup_broadcast(dev: Device) -> list[Op]:
    """SPEC §4 rule 4 on the expert axis: the dense weights are R across the e expert ranks and
    start identical by one broadcast (each expert has one owner there: nothing to broadcast)."""
    model, e = expert_model(dev), expert_degree(dev)
    if model is None:
        return []
    split = split_axes(dev.strategy.placement, State.PARAMS, dev.mesh, exclude=EXPERT_AXIS)
    other = 1
    for n in split.values():
        other *= n
    return [
        dev.op(
            OpKind.BROADCAST,
            State.PARAMS,
            EXPERT_AXIS,
            STARTUP,
            Fraction(model.dense_elements, other),
            e,
            "the dense weights are replicated across the expert ranks: they start identical "
            "(rule 4); the experts each have one owner there",
        )
    ]
