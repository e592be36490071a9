"""The toy layer the newer axes' runs train (``ContextRun``, ``ExpertRun``): its batch, sequence
and width, and the seed of its weights and data -- one definition of the sizes both runs share,
small enough for float64 on CPU ranks. Torch-free: a kernel describes a run without importing
torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

#: The core's model a toy layer is described as (``TransformerSpec``, ``MoESpec``).
M = TypeVar("M")


@dataclass(frozen=True, kw_only=True)
class ToyLayer:
    """``batch`` sequences of ``seq`` tokens, width ``hidden``, weights and data drawn from
    ``seed``. Keyword-only, so a run's own fields (its ranks first) stay positional."""

    batch: int = 2
    seq: int = 8
    hidden: int = 8
    seed: int = 0

    def one_layer(self, kind: Callable[..., M], **more: Any) -> M:
        """The core's model of the toy: one layer of ``kind`` (``TransformerSpec``, ``MoESpec``),
        ``batch`` sequences of ``seq`` tokens of width ``hidden``, a vocabulary of 2; ``more``: what
        the run's layer adds (its heads, its experts)."""
        return kind(
            layers=1, hidden=self.hidden, seq=self.seq, vocab=2, micro_batch=self.batch, **more
        )
