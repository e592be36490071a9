"""Adam, element by element, on flat tensors -- so a slice's update equals that slice of the full
update (SPEC §5, the sufficiency argument). The reference and every engine call this one function.

``eps`` is larger than torch's default so that the update is not blind to the gradient's scale:
with eps = 1e-8 Adam is almost scale-invariant and a doubly-scaled gradient would hide.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Adam:
    lr: float = 1e-2
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-3

    def delta(
        self, grad: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int
    ) -> torch.Tensor:
        """Update m and v in place (step counts from 1) and return the amount to subtract from the
        parameters. Element-wise: no element's update depends on another element."""
        m.mul_(self.beta1).add_(grad, alpha=1 - self.beta1)
        v.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        m_hat = m / (1 - self.beta1**step)
        v_hat = v / (1 - self.beta2**step)
        return self.lr * m_hat / (v_hat.sqrt() + self.eps)
