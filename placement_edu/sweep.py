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
from placement_edu.schedule import derive_schedule
from placement_edu.strategies import Strategy, get_strategy

_PROBE_PSI = 2**20  # any Ψ works: the probe reads elements as a fraction of Ψ
_PROBE_N = 2        # the smallest group that issues collectives


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
        raise ValueError(f"the sweep covers data-axis strategies; {strategy.name!r} uses {strategy.axes}")
    # Model state per device is whole + split / N for a data-axis placement: two probes give both.
    at1, at2 = (derive_memory(strategy, ModelSpec(_PROBE_PSI), Mesh.of(data=n), precision).model_state
                for n in (1, _PROBE_N))
    split = Fraction(2 * (at1 - at2), _PROBE_PSI)
    whole = Fraction(at1, _PROBE_PSI) - split
    schedule = derive_schedule(strategy, ModelSpec(_PROBE_PSI), Mesh.of(data=_PROBE_N), precision)
    collectives = tuple((o.op, Fraction(o.elements) / _PROBE_PSI, o.element_bytes)
                        for o in schedule.collectives)
    return Terms(whole, split, collectives)


_RING = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
         "reduce_scatter": lambda n: (n - 1) / n, "send": lambda n: np.ones_like(n)}
_ZERO = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "send": 1}


def sweep(strategies: Sequence[str | Strategy], psi: np.ndarray, n: np.ndarray,
          precision: str | Precision = "mixed_adam") -> dict[str, dict[str, np.ndarray]]:
    """For each strategy: ``model_state`` (bytes per device), ``volume_psi`` (ZeRO convention)
    and ``ring_bytes`` (per device per step), as float64 arrays broadcast over ``psi`` and ``n``.
    An axis of one device issues no collectives, so N = 1 costs no communication."""
    psi = np.asarray(psi, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    out = {}
    for strategy in strategies:
        t = terms(strategy, precision)
        many = n > 1
        volume = sum(_ZERO[op] * float(e) for op, e, _ in t.collectives) * many
        ring = sum(_RING[op](n) * float(e) * b for op, e, b in t.collectives) * psi
        out[get_strategy(strategy).name] = {
            "model_state": psi * (float(t.whole) + float(t.split) / n),
            "volume_psi": np.broadcast_to(volume, np.broadcast(psi, n).shape),
            "ring_bytes": np.broadcast_to(ring * many, np.broadcast(psi, n).shape),
        }
    return out
