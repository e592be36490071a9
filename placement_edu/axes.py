"""What a placement says along each mesh axis: the axes a state is split on, the degree by which
the tensor and pipeline axes split the model, the layers of a pipeline stage, and ``validate``,
which refuses a placement that cannot run, with the reason. Read by the memory derivation and the
schedule alike."""

from __future__ import annotations


from placement_edu.composition import safety_violations
from placement_edu.errors import MAX_LISTED_OPS, PlacementError, expect
from placement_edu.mesh import Mesh
from placement_edu.models import Model, stage_layers
from placement_edu.placement import BATCH_AXES, SPLIT_MODES, WHOLE, Mode, Placement, State
from placement_edu.strategies import Strategy


def split_axes(
    strategy_placement: Placement,
    state: State,
    mesh: Mesh,
    modes: frozenset[Mode] = SPLIT_MODES,
    exclude: str | tuple[str, ...] | None = None,
) -> dict[str, int]:
    """Degrees of the axes along which ``state`` is divided (S, SG or OFF), degree > 1 only."""
    excluded = (exclude,) if isinstance(exclude, str) else tuple(exclude or ())
    return {
        axis: degree
        for axis, degree in mesh
        if degree > 1 and axis not in excluded and strategy_placement.mode(state, axis) in modes
    }


def model_axis_degree(strategy: Strategy, mesh: Mesh, axis: str) -> int:
    """The degree by which ``axis`` (tensor or pipeline) splits the model's work: the mesh degree
    where the placement splits the parameters there, 1 where it splits nothing (SPEC §6: an axis
    on which nothing is split costs nothing and splits nothing)."""
    n = mesh.degree(axis)
    return n if n > 1 and strategy.placement.mode(State.PARAMS, axis) in SPLIT_MODES else 1


def layers_on_stage(model: Model, stages: int, stage: int) -> int:
    """How many layers pipeline ``stage`` holds (``models.stage_layers``)."""
    return len(stage_layers(model.layers, stages, stage))


def owner_broadcasts(strategy: Strategy, axis: str) -> bool:
    """Whether the owners re-synchronise replicated params on ``axis`` after the step by one
    broadcast each (``schedule.owner_update_sync``): one op per rank of the axis, so the schedule
    grows with its degree, and ``validate`` bounds it by ``MAX_LISTED_OPS``."""
    mode = strategy.placement.mode
    return (
        strategy.owner_update == "allreduce_broadcast"
        and mode(State.PARAMS, axis) in WHOLE
        and mode(State.OPTIMIZER, axis) not in WHOLE
    )


def materialized_only_activations(pl: Placement, axis: str) -> None:
    """Refuse M (materialized) for a model state on ``axis``, and any other mode for the
    activations: only activations are produced and freed within a step."""
    for state in State:
        mode = pl.mode(state, axis)
        if state is State.ACTIVATIONS:
            if mode is not Mode.M:
                raise PlacementError(
                    f"activations on the {axis} axis must be M (materialized), got {mode}"
                )
            continue
        if state is State.GRADS and axis in BATCH_AXES:
            continue  # grads M on a batch-splitting axis breaks SPEC §6 rule 2: see validate
        if mode is Mode.M:
            raise PlacementError(
                f"{state} cannot be M (materialized) on the {axis} axis: only activations are "
                "produced and freed within a step; use R, S, SG, OFF or OFF-R"
            )


#: The (strategy, mesh, strict) that ``validate`` has passed, by what it reads of the strategy:
#: its name (the messages), placement, owner update, mesh axes and shard dimensions -- not its
#: micro-batches, schedule, sequence parallelism or context attention, which the planner varies
#: over thousands of candidates of one placement -- and of the mesh: its axes, which split (n > 1)
#: and which are too wide to broadcast rank by rank (n > MAX_LISTED_OPS), never the degrees
#: themselves, which the planner varies over thousands of meshes of one shape (a few thousand
#: kept; a refusal is never kept: its message names the mesh).
_PASSED: dict[tuple, None] = {}


def validate(strategy: Strategy, mesh: Mesh, strict: bool = True) -> None:
    """Refuse placements that cannot run, with the reason (``validate_afresh``), once for what it
    reads (``_PASSED``)."""
    s = strategy
    shape = tuple((axis, n > 1, n > MAX_LISTED_OPS) for axis, n in mesh)
    key = (s.name, s.placement, s.owner_update, s.mesh_axes, s.shard_dims, shape, strict)
    if key not in _PASSED:
        validate_afresh(strategy, mesh, strict)
        if len(_PASSED) >= 4096:
            _PASSED.clear()
        _PASSED[key] = None


def validate_afresh(strategy: Strategy, mesh: Mesh, strict: bool = True) -> None:
    """Refuse placements that cannot run, with the reason (einops-style teaching errors), derived
    every time: what ``validate`` keeps a pass of.

    ``strict`` (what pricing uses) also refuses compositions that break a safety rule of SPEC §6:
    they are not priced silently. The checker derives them with ``strict=False`` and reports the
    rule, the state and the axes instead.
    """
    # (each message is written only when its check fails: the planner validates thousands of
    # candidates, and formatting every message up front was a tenth of a 2^40-device plan)
    pl = strategy.placement
    on_mesh = dict(mesh.degrees)
    for axis in strategy.axes:
        if axis not in on_mesh:
            raise PlacementError(
                f"strategy {strategy.name!r} places states on the {axis} axis, "
                f"but the mesh ({mesh}) has no {axis} axis"
            )
    for axis, n in mesh:
        materialized_only_activations(pl, axis)
        if axis not in BATCH_AXES:
            if n > 1 and pl.mode(State.PARAMS, axis) not in SPLIT_MODES:
                raise PlacementError(
                    f"{strategy.name!r} keeps params whole on the {axis} axis ({n} ranks): nothing "
                    f"is split there, so the {n} {axis} ranks would repeat the same work (SPEC §6: "
                    f"an axis on which nothing is split costs nothing and splits nothing); put "
                    f"those devices on the data axis, or split params on {axis}"
                )
            continue
        p, g, o = (pl.mode(s, axis) for s in (State.PARAMS, State.GRADS, State.OPTIMIZER))
        if p is Mode.S:
            raise PlacementError(
                f"params sharded (S) on the {axis} axis: every {axis} rank runs the whole model "
                "on its slice of the batch, so it needs whole parameters; use SG (gather before "
                "use) or R"
            )
        if g is Mode.SG:
            raise PlacementError(
                f"grads cannot be SG on the {axis} axis: nothing gathers gradients; use S "
                "(reduce-scattered to owners) or R (all-reduced)"
            )
        if n > MAX_LISTED_OPS and owner_broadcasts(strategy, axis):
            raise PlacementError(
                f"{strategy.name!r} broadcasts each owner's slice on its own after the step "
                f"(ZeroRedundancyOptimizer): one broadcast per {axis} rank, {n:,} in every step; "
                f"it is priced up to {MAX_LISTED_OPS:,} ranks (owner_update='scatter_gather', one "
                "all-gather, prices any number)"
            )
        if o in WHOLE and g in SPLIT_MODES:
            raise PlacementError(
                f"optimizer state is {o} (whole) on the {axis} axis but grads are {g} (sliced): "
                "the optimizer would read a gradient it does not have; shard the optimizer state "
                "too"
            )
    if strict:
        broken = safety_violations(strategy, mesh)
        expect(
            not broken,
            (str(broken[0]) if broken else "")
            + "; it is not priced: check() lists every rule a strategy breaks",
        )
