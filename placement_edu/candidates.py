"""The candidates' placements: each data placement the planner tries (SPEC §3's table) on the
data axis, composed with S on the tensor and pipeline axes, Megatron's sequence parallelism, a
context axis, and unsharded accumulation (``no_sync``). ``pricing`` prices what ``compose``
builds; ``placement-edu time`` names the same strategies (``pricing.configured_strategy``).
"""

from __future__ import annotations

from functools import lru_cache

from placement_edu import names
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.placement import MODEL_STATES, Placement, State
from placement_edu.strategies import STRATEGIES, Strategy

#: The strategies whose placement on the data axis the planner tries (SPEC §3's table); their
#: modes and ``reshard_after_forward`` are read from ``strategies.STRATEGIES``.
DATA_STRATEGIES: tuple[str, ...] = ("dp", "zero1", "zero2", "zero3", "fsdp_grad_op")
RECOMPUTES: tuple[str, ...] = TransformerSpec.RECOMPUTE
#: The data placements whose gradients are split on the data axis and whose parameters are
#: gathered (SG), which the planner also tries accumulating unsharded (``compose(no_sync=True)``).
#: zero2 accumulating unsharded is zero1's placement (P=R G=R O=S), already a candidate.
NO_SYNC_STRATEGIES: tuple[str, ...] = ("zero3", "fsdp_grad_op")
#: What marks unsharded accumulation on the data part of a name: "zero3+no_sync×tp×pp".
NO_SYNC = "+no_sync"


def compose(
    data: str,
    mesh: Mesh,
    micro_batches: int,
    sequence_parallel: bool = False,
    context_attention: str = "ring",
    no_sync: bool = False,
) -> Strategy:
    """The strategy with ``data``'s placement on the data axis (and R on replica: hsdp), S on the
    tensor and pipeline axes where the mesh has them, and Megatron's sequence parallelism on the
    tensor axis when asked. A context axis takes the data axis' modes -- the states sharded over
    data × context, as Megatron's distributed optimizer and torchtitan's FSDP over dp × cp do --
    and ``context_attention`` (ring or Ulysses). Named like the compositions: zero1×tp×pp,
    zero1×tp+sp, zero1×cp×tp, dp×cp_ulysses.

    ``no_sync``: the gradient accumulates unsharded (R on the batch axes) over the micro-batches
    and is reduced once, after the last (SPEC §4 rule 5's other choice: DDP's and FSDP1's
    ``no_sync()``, FSDP2's ``set_requires_gradient_sync(False)`` on all micro-batches but the
    last): +|G| bytes held, m - 1 reductions fewer. Named with ``NO_SYNC``: zero3+no_sync×tp."""
    axes = tuple(axis for axis, n in mesh if n > 1)
    return _composed(data, axes, micro_batches, sequence_parallel, context_attention, no_sync)


# (a composition reads which axes the mesh has, never their degrees: the planner's candidates on
# every mesh of one shape share one strategy, and one placement and name for every m)
@lru_cache(maxsize=4096)
def _composed(
    data: str,
    axes: tuple[str, ...],
    micro_batches: int,
    sequence_parallel: bool,
    context_attention: str,
    no_sync: bool,
) -> Strategy:
    """``compose`` on a mesh of ``axes``."""
    no_sync = no_sync and "data" in axes  # (the name's data part carries it)
    return Strategy(
        _composed_name(data, axes, sequence_parallel, context_attention, no_sync),
        _composed_placement(data, axes, no_sync),
        reshard_after_forward=STRATEGIES[data].reshard_after_forward,
        micro_batches=micro_batches,
        sequence_parallel=sequence_parallel,
        mesh_axes=axes,
        context_attention=context_attention,
    )


@lru_cache(maxsize=1024)
def _composed_placement(data: str, axes: tuple[str, ...], no_sync: bool) -> Placement:
    """``data``'s modes on the data and context axes (R for the gradient under ``no_sync``), S
    on the tensor and pipeline axes, of those in ``axes``."""
    on_data = STRATEGIES[data].placement
    modes: dict[str, dict[str, str]] = {state.value: {} for state in MODEL_STATES}
    for on in ("data", "context"):
        if on in axes:
            for state in MODEL_STATES:
                modes[state.value][on] = on_data.mode(state, "data").value
            if no_sync:
                modes[State.GRADS.value][on] = "R"
    for axis in ("tensor", "pipeline"):
        if axis in axes:
            for by_axis in modes.values():
                by_axis[axis] = "S"
    return Placement(**modes)


@lru_cache(maxsize=1024)
def _composed_name(
    data: str, axes: tuple[str, ...], sequence_parallel: bool, attention: str, no_sync: bool
) -> str:
    """The composition's name (``names.composed_name``), ``NO_SYNC`` on its data part."""
    name = names.composed_name(data, axes, sequence_parallel, attention)
    if no_sync:
        first, *rest = name.split(names.SEPARATOR)
        name = names.SEPARATOR.join([first + NO_SYNC, *rest])
    return name


def data_replicas(mesh: Mesh) -> int:
    """The ranks that read different sequences: replica × data × expert (an expert axis is carved
    from the data axis: its ranks read their own tokens)."""
    return mesh.degree("replica") * mesh.degree("data") * mesh.degree("expert")
