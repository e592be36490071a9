"""A vectorised sweep over (Ψ, N) for many strategies at once, for plots and benchmarks.

Nothing here is a new formula. For each strategy the scalar core is asked once, at a probe point,
which states it divides by N and which collectives it issues (op, state, elements per Ψ); numpy
then evaluates those same terms over whole arrays of Ψ and N. Tests check the sweep against the
scalar derivation point by point. Abstract models on the data axis only: the ideal Ψ/N formula.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from placement_edu.mesh import Mesh
from placement_edu.models import ModelSpec
from placement_edu.memory import derive_memory
from placement_edu.precision import Precision, get_precision
from placement_edu.schedule import OP_COSTS, OpKind, derive_schedule, ring_bytes
from placement_edu.strategies import Strategy, get_strategy

_PROBE_PSI = 2**20  # any Ψ works: the probe reads elements as a fraction of Ψ
_PROBE_N = 2  # the smallest group that issues collectives


@dataclass(frozen=True)
class Terms:
    """What a strategy's placement says, as coefficients: bytes per parameter kept whole on the
    device, bytes per parameter divided by N, and (op, elements per Ψ, bytes per element) terms."""

    whole: Fraction
    split: Fraction
    collectives: tuple[tuple[str, Fraction, int], ...]


def terms(strategy: str | Strategy, precision: str | Precision = "mixed_adam") -> Terms:
    strategy, precision = get_strategy(strategy), get_precision(precision)
    if strategy.axes != ("data",):
        raise ValueError(
            f"the sweep covers data-axis strategies; {strategy.name!r} uses {strategy.axes}"
        )
    # Model state per device is whole + split / N for a data-axis placement: two probes give both.
    at1, at2 = (
        derive_memory(strategy, ModelSpec(_PROBE_PSI), Mesh.of(data=n), precision).model_state
        for n in (1, _PROBE_N)
    )
    split = Fraction(2 * (at1 - at2), _PROBE_PSI)
    whole = Fraction(at1, _PROBE_PSI) - split
    schedule = derive_schedule(strategy, ModelSpec(_PROBE_PSI), Mesh.of(data=_PROBE_N), precision)
    collectives: list[tuple[str, Fraction, int]] = [
        (o.op, Fraction(o.elements) / _PROBE_PSI, int(o.element_bytes))  # (ModelSpec's: whole)
        for o in schedule.collectives
        if o.op != OpKind.BROADCAST
    ]
    # The owners' broadcasts after the step (ZeroRedundancyOptimizer): N of them, Ψ/N each, so Ψ
    # in all at every N, held as one term; each device is the root of one and sends it to the N-1
    # others: (N-1)/N of Ψ per device.
    owners = [o for o in schedule.collectives if o.op == OpKind.BROADCAST]
    if owners:
        collectives.append(
            (
                OpKind.BROADCAST,
                sum((Fraction(o.elements) for o in owners), Fraction(0)) / _PROBE_PSI,
                int(owners[0].element_bytes),
            )
        )
    return Terms(whole, split, tuple(collectives))


def _ring_bytes_per_psi(
    op: str, elements: Fraction, element_bytes: int, n: np.ndarray
) -> np.ndarray:
    """The core's ``ring_bytes`` of one term, per Ψ, over arrays of N. The broadcast term holds
    the N owners' broadcasts (Ψ/N each); a device sends only the one it is the root of."""
    mine = float(elements) / n if op == OpKind.BROADCAST else float(elements)
    return ring_bytes(op, n, mine * element_bytes)


def sweep(
    strategies: Sequence[str | Strategy],
    psi: np.ndarray,
    n: np.ndarray,
    precision: str | Precision = "mixed_adam",
) -> dict[str, dict[str, np.ndarray]]:
    """For each strategy: ``model_state`` (bytes per device), ``volume_psi`` (ZeRO convention)
    and ``ring_bytes`` (per device per step), as float64 arrays broadcast over ``psi`` and ``n``.
    An axis of one device issues no collectives, so N = 1 costs no communication."""
    psi = np.asarray(psi, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    out = {}
    for strategy in strategies:
        t = terms(strategy, precision)
        many = n > 1
        volume = sum(OP_COSTS[op].zero * float(e) for op, e, _ in t.collectives) * many
        ring = sum(_ring_bytes_per_psi(op, e, b, n) for op, e, b in t.collectives) * psi
        out[get_strategy(strategy).name] = {
            "model_state": psi * (float(t.whole) + float(t.split) / n),
            "volume_psi": np.broadcast_to(volume, np.broadcast(psi, n).shape),
            "ring_bytes": np.broadcast_to(ring * many, np.broadcast(psi, n).shape),
        }
    return out
