"""One step of a real model, as it is profiled and measured: one frozen value (issue 41).

An activation profile (``profile_store``, ``runtime.measurement.profiles``) and PyTorch's tracker
runs (``runtime.axes.axis_tracker``, ``runtime.measurement.cuda_peak``) all ask the same questions
of a step: which model, b sequences of s tokens, in which dtype, with which attention kernel and
recomputation, stepped by which optimizer. ``StepCase`` holds the answers once, so each of those
functions takes one case, not six loose arguments in its own order. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from placement_edu.architectures import Architecture, get_architecture


@dataclass(frozen=True)
class StepCase:
    """A step of ``model``: ``micro_batch`` sequences (b) of ``seq`` tokens (s), computing in
    ``compute`` ("fp32", or "bf16" as FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16)``
    computes), with ``attention`` as PyTorch runs it ("eager": HF's explicit softmax, which keeps
    the s×s scores; "sdpa": ``F.scaled_dot_product_attention``) and ``recompute``, stepped by
    ``optimizer`` (``peak.OPTIMIZERS``). A profile reads all but the optimizer, which holds no
    activations."""

    model: Architecture
    micro_batch: int = 1
    seq: int = 1024
    compute: str = "fp32"
    attention: str = "eager"
    recompute: str = "none"
    optimizer: str = "adam-foreach"

    @classmethod
    def of(cls, model: str | Architecture, *fields: int | str, **named: int | str) -> StepCase:
        """A case of ``model`` (a preset's name, an HF config's path, or an ``Architecture``), the
        other fields as the class lists them: ``StepCase.of("gpt2", 1, 1024, "bf16", "sdpa")``."""
        return cls(get_architecture(model), *fields, **named)  # type: ignore[arg-type]

    def with_(self, **changes: int | str) -> StepCase:
        """This case with some fields changed (``recompute="full"``, ``seq=s // c``)."""
        return replace(self, **changes)  # type: ignore[arg-type]
