"""The head's logits and the loss's tensors, by formula (SPEC §3, "The peak of a real model").

The head's and the loss's tensors (``runtime.reference_models.CausalLMLoss``: HF's
ForCausalLMLoss) are each [tokens, V]: the activation profile measures them as moments ("forward,
loss", "backward, loss (logits' gradient)"); the formula path (``memory.derive_memory``) counts
them with ``logits_and_loss``. Bytes throughout.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from placement_edu.errors import positive_int

LOGITS = "logits"  # the head's output, in the compute dtype
LOGITS_FP32 = "logits (fp32 copy)"  # the loss's upcast: none when the compute dtype is fp32
LOG_SOFTMAX = "log-softmax (fp32)"  # what cross-entropy saves for backward
LOG_SOFTMAX_GRADIENT = "log-softmax's gradient (fp32)"  # nll_loss's gradient: dense, [tokens, V]
LOGITS_GRADIENT = "logits' gradient (fp32)"


def logits_and_loss(tokens: int | Fraction, vocab: int, compute: int) -> dict[str, dict[str, Any]]:
    """Bytes of the head's and the loss's tensors for ``tokens`` tokens (b·s) over a vocabulary
    of ``vocab``, computing in ``compute`` bytes per element, at their two moments:

    - "forward", the loss computed: the logits (compute dtype), their fp32 copy (when the compute
      dtype is narrower) and the log-softmax (fp32) -- 8·tokens·V bytes in fp32, 10 in bf16;
    - "backward", the loss's backward (the logits' gradient made): the log-softmax still kept,
      the gradient of its output and the logits' gradient, all fp32 -- 12·tokens·V bytes.

    What a step keeps of them after forward is the log-softmax alone (the logits and their copy
    are saved by no one). ``tokens`` may be a fraction: a tensor rank's share of a vocabulary
    split over t is tokens·V/t."""
    n = tokens * positive_int("vocab", vocab)
    return {
        "forward": {
            LOGITS: compute * n,
            LOGITS_FP32: (4 * n if compute < 4 else 0),
            LOG_SOFTMAX: 4 * n,
        },
        "backward": {LOG_SOFTMAX: 4 * n, LOG_SOFTMAX_GRADIENT: 4 * n, LOGITS_GRADIENT: 4 * n},
    }
