"""One row of a tracker benchmark's table (``bench_mesh_tracker.py``,
``bench_pipeline_tracker.py``): the derivation's figures beside PyTorch's ``MemTracker``'s, as
those scripts print them."""

from __future__ import annotations

from typing import Any

#: How far a peak may be from the tracker's (the suite's 2 %).
WITHIN = 0.02


def compared(ours: Any, theirs: dict[str, int]) -> tuple[bool, str]:
    """Whether ``ours`` (a derived step: ``params``, ``grads``, ``optimizer`` and both peaks)
    matches ``theirs`` (``peak_tracker.states``): every state equal to the byte and both peaks
    within ``WITHIN``; and the row's last cells (states, our and their forward-backward peak, both
    peaks' ratios)."""
    equal = (ours.params, ours.grads, ours.optimizer) == tuple(
        theirs[k] for k in ("params", "grads", "optimizer")
    )
    fb = ours.forward_backward_peak.total
    ratios = fb / theirs["forward_backward_peak"], ours.step_peak.total / theirs["step_peak"]
    cells = (
        f"| {'equal' if equal else 'DIFFER'} | {fb:,} | {theirs['forward_backward_peak']:,} "
        f"| {ratios[0]:.5f} | {ratios[1]:.5f} |"
    )
    return equal and all(abs(r - 1) <= WITHIN for r in ratios), cells
