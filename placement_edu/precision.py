"""Precision presets: bytes per element of each state (SPEC §1). A plain table, no multipliers
hidden anywhere else: 16 vs 18 vs 20 bytes per parameter is a choice of this table, not a theory.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from placement_edu.errors import PlacementError, positive_int
from placement_edu.placement import State


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter element for P, G and O, and bytes per activation element."""

    name: str
    params: int
    grads: int
    optimizer: int
    activations: int = 2

    def __post_init__(self) -> None:
        for field in ("params", "grads", "optimizer", "activations"):
            positive_int(f"precision {self.name!r}: bytes per {field}", getattr(self, field))

    def bytes_per(self, state: State) -> int:
        """Bytes per element of ``state``."""
        return int(getattr(self, State(state).value))

    @property
    def model_state(self) -> int:
        """P + G + O bytes per parameter (16 for mixed_adam: ZeRO's 2 + 2 + K with K = 12)."""
        return self.params + self.grads + self.optimizer


PRESETS: Mapping[str, Precision] = MappingProxyType({
    # ZeRO §3.1: fp16 params and grads, fp32 master params + Adam momentum + variance (K = 12).
    "mixed_adam": Precision("mixed_adam", 2, 2, 12, 2),
    # Plain fp32 training with Adam: fp32 weights and grads, m and v (no separate master copy).
    "fp32_adam": Precision("fp32_adam", 4, 4, 8, 4),
    # Megatron-LM / nanotron: bf16 params, fp32 main grads, fp32 master + m + v: 18 B/param.
    "mixed_adam_fp32_grads": Precision("mixed_adam_fp32_grads", 2, 4, 12, 2),
    # What the runtime uses by default, so rounding vanishes next to real faults.
    "fp64_adam": Precision("fp64_adam", 8, 8, 16, 8),
    # SGD with momentum: one buffer (fp32), or fp32 master + momentum under mixed precision.
    "sgd_momentum": Precision("sgd_momentum", 4, 4, 4, 4),
    "mixed_sgd_momentum": Precision("mixed_sgd_momentum", 2, 2, 8, 2),
    "fp64_sgd_momentum": Precision("fp64_sgd_momentum", 8, 8, 8, 8),
})


def get_precision(precision: str | Precision) -> Precision:
    """A preset by name, or a user-defined Precision passed through."""
    if isinstance(precision, Precision):
        return precision
    if precision not in PRESETS:
        raise PlacementError(
            f"unknown precision {precision!r}; known presets: {', '.join(PRESETS)} "
            "(or pass Precision(name, params, grads, optimizer, activations))")
    return PRESETS[precision]
