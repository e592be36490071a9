"""How a model divides: into gather units (runs of equal units, the prefetched window), into
pipeline stages (whole layers each) and over tensor ranks (whole attention heads each). One
definition for every model kind (``ideal``, ``transformer``, ``concrete``) and for the runtime."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Mapping, Protocol, Union

from placement_edu.errors import MAX_LISTED_OPS, PlacementError, expect


Number = Union[int, Fraction]
#: A run of equal gather units, in forward order: (elements of one unit, how many in a row). A
#: model of 10^12 equal layers is one run, not a list of 10^12 sizes.
UnitRun = tuple[Number, int]
#: Mesh axes and their degrees, e.g. {"data": 8, "tensor": 2}: the axes a state is split over.
Degrees = Mapping[str, int]
#: A device's coordinate on each mesh axis (``Mesh.coords``); None: rank 0's.
Coords = Mapping[str, int] | None


def unit_runs_of(sizes: list[Number]) -> list[UnitRun]:
    """``sizes`` (one per unit, in order) held as runs of equal neighbours: [3, 3, 5] ->
    [(3, 2), (5, 1)]."""
    runs: list[UnitRun] = []
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1] = (size, runs[-1][1] + 1)
        else:
            runs.append((size, 1))
    return runs


def prefetched_window(runs: list[UnitRun]) -> Number:
    """Elements gathered at once when units are gathered one at a time with one prefetched: the
    unit computing and the next one, whose all-gather runs beside it -- the largest two
    neighbours in forward order (backward walks the same pairs in reverse); a lone unit is
    itself. PyTorch FSDP's forward and backward prefetch (Zhao et al. 2023, "PyTorch FSDP",
    §3.3; PyTorch's FSDP Notes, "FSDP Prefetch Nuances": the next all-gather's output is
    allocated while the current one is in use) and FSDP2's defaults (pytorch/pytorch#128884:
    "allows two all-gather output tensors to be alive at once" in forward, one unit prefetched
    in backward) keep two units' parameters alive."""
    sizes = [size for size, _ in runs]
    pairs = [2 * size for size, times in runs if times > 1]  # two equal neighbours in one run
    pairs += [a + b for a, b in zip(sizes, sizes[1:])]  # the last of a run and the next run's
    return max(pairs, default=sizes[0] if sizes else 0)


def per_layer_units(model: Any) -> None:
    """Give ``model`` one gather unit per layer where its ``gather_units`` is 0, the default:
    FSDP's usual wrapping, ``fully_shard`` on each block (one definition for every model kind)."""
    if model.gather_units == 0 and not isinstance(model.gather_units, bool):
        object.__setattr__(model, "gather_units", model.layers)


def stage_units(units: int, layers: int, stages: int, stage: int) -> int:
    """Gather units on pipeline ``stage``: the model's ``units`` times the stage's share of its
    layers (``stage_layers``: a stage holds whole layers), at least 1."""
    if stages <= 1 or layers < stages:
        return units
    return max(1, units * len(stage_layers(layers, stages, stage)) // layers)


def listed_units(runs: list[UnitRun]) -> list[Number]:
    """``runs`` listed unit by unit; refused above ``MAX_LISTED_OPS`` units (the runs hold any
    number of them)."""
    n = sum(times for _, times in runs)
    expect(
        n <= MAX_LISTED_OPS,
        f"listing {n:,} gather units one by one stops at {MAX_LISTED_OPS:,}; unit_runs holds "
        "them as runs of equal units, (elements of one, how many)",
    )
    return [size for size, times in runs for _ in range(times)]


class Heads(Protocol):
    """Anything a tensor axis splits by attention heads: a model (``protocol.Model``), or the
    runtime's toy shapes. None: no attention, nothing to split by heads."""

    @property
    def heads(self) -> int | None: ...

    @property
    def kv_heads(self) -> int | None: ...


def heads_divide(model: Heads, tensor: int) -> bool:
    """Whether ``tensor`` ranks can each hold whole attention heads of ``model`` -- and, under
    grouped-query attention, whole key-value heads (Megatron asserts num_query_groups % t == 0):
    the rule that ``tensor_divides_heads`` enforces and the planner's search keeps to (True for a
    model without heads)."""
    heads, kv_heads = model.heads, model.kv_heads or model.heads
    if heads is None or kv_heads is None or tensor < 1:
        return True
    return heads % tensor == 0 and kv_heads % tensor == 0


def tensor_divides_heads(model: Heads, tensor: int) -> None:
    """Refuse a tensor degree that does not divide the model's attention heads: Megatron's tensor
    parallelism gives each tensor rank whole heads (Q, K and V split by head), so t must divide a.

    The one rule for the analyses (``analyze``, ``check``, Megatron's estimate) and the runs alike;
    ``model`` is anything with ``heads`` (a ``TransformerSpec``, the runtime's toy transformer) --
    a model without heads (Ψ alone, a list of tensors) has nothing to refuse here."""
    heads, kv_heads = model.heads, model.kv_heads or model.heads
    if heads is None or kv_heads is None or heads_divide(model, tensor):
        return
    if heads % tensor == 0:  # the key-value heads do not split
        raise PlacementError(
            f"tensor degree {tensor:,} does not divide the {kv_heads:,} key-value heads; expected "
            f"a divisor of {kv_heads:,}, because each tensor rank computes whole key-value heads "
            "(Megatron splits grouped-query attention by query groups)"
        )
    divisors = [d for d in range(1, min(heads, 4096) + 1) if heads % d == 0]
    listed = (
        f" ({', '.join(map(str, divisors[:-1]))} or {divisors[-1]})"
        if heads <= 4096 and len(divisors) <= 16
        else ""
    )
    raise PlacementError(
        f"tensor degree {tensor:,} does not divide the {heads:,} attention heads; expected a "
        f"divisor of {heads:,}{listed}, because each tensor rank computes whole heads "
        "(Megatron splits attention by heads)"
    )


def stage_layers(layers: int, stages: int, stage: int) -> range:
    """The contiguous layers of pipeline ``stage`` of ``stages`` (earlier stages take the extra
    layers): the one stage split every derivation and the runtime use."""
    expect(
        layers >= stages,
        f"{layers} layers cannot fill {stages} pipeline stages (one layer at least each)",
    )
    base, extra = divmod(layers, stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))
