"""Precision presets: bytes per element of each state (SPEC §1). A plain table, no multipliers
hidden anywhere else: 16 vs 18 vs 20 bytes per parameter is a choice of this table, not a theory.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from placement_edu.errors import PlacementError, positive_int
from placement_edu.float8 import Float8, gathered_bytes
from placement_edu.models import Number
from placement_edu.placement import State

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["PRESETS", "Precision", "get_precision"]


@dataclass(frozen=True)
class Precision:
    """Where each state lives is a placement; in what dtype it lives and travels is this.

    Storage: bytes per element of P, G and O as held, and of the activations (the compute dtype:
    what a layer's matmuls read and write). Wire: bytes per element a collective moves, when it is
    not the stored dtype -- ``gather``, a parameter all-gather (FSDP2's ``param_dtype``: fp32 shards
    gathered as bf16, 2 B); ``reduce``, a gradient reduction (FSDP2's ``reduce_dtype``, Megatron's
    fp32 gradient all-reduce, DeepSpeed's ``communication_data_type``: bf16 gradients reduced in
    fp32, 4 B). None: the stored dtype travels."""

    name: str
    params: int
    grads: int
    optimizer: int
    activations: int = 2
    gather: int | None = None
    reduce: int | None = None
    #: torchao's float8 training (``float8.Float8``): the block Linears' GEMMs in float8 with
    #: this scaling ("tensorwise" or "rowwise"), the rest in the compute dtype. None: no float8.
    float8: str | None = None

    def __post_init__(self) -> None:
        if self.float8 is not None:
            Float8(self.float8)  # an unknown scaling: one line naming the accepted ones
        for field in ("params", "grads", "optimizer", "activations"):
            positive_int(f"precision {self.name!r}: bytes per {field}", getattr(self, field))
        for field in ("gather", "reduce"):
            if getattr(self, field) is not None:
                positive_int(f"precision {self.name!r}: {field} bytes", getattr(self, field))

    @property
    def float8_recipe(self) -> Float8 | None:
        """torchao's float8 recipe this precision trains with (``float8.Float8``), or None."""
        return None if self.float8 is None else Float8(self.float8)

    def bytes_per(self, state: State) -> int:
        """Bytes per element of ``state`` as stored."""
        return int(getattr(self, State(state).value))

    def wire_bytes(self, state: State) -> int:
        """Bytes per element of ``state`` as a collective moves it: the parameters' gather dtype,
        the gradients' reduce dtype, otherwise the stored dtype."""
        wire = {State.PARAMS: self.gather, State.GRADS: self.reduce}.get(State(state))
        return self.bytes_per(state) if wire is None else wire

    def gather_bytes(self, model: object, tensor: int = 1) -> Number:
        """Bytes a parameter element of ``model`` moves in a gather (and holds, gathered) on a rank
        the tensor axis splits ``tensor`` ways: ``wire_bytes``'s; under torchao's float8
        all-gather, each converted weight at ``gather`` (1 B) and the rest in the compute dtype
        (``float8.gathered_bytes``: for a Llama-3-8B, 9,081,200,640 B a whole gather, not
        8,030,261,248)."""
        wire = self.wire_bytes(State.PARAMS)
        if self.float8 is None:
            return wire
        return gathered_bytes(model, wire, self.activations, tensor)

    @property
    def model_state(self) -> int:
        """P + G + O bytes per parameter (16 for mixed_adam: ZeRO's 2 + 2 + K with K = 12)."""
        return self.params + self.grads + self.optimizer


#: The precision presets by name: bytes per parameter of P, G and O (``get_precision``).
PRESETS: Mapping[str, Precision] = MappingProxyType(
    {
        # ZeRO §3.1: fp16 params and grads, fp32 master params + Adam momentum + variance (K = 12).
        "mixed_adam": Precision("mixed_adam", 2, 2, 12, 2),
        # Plain fp32 training with Adam: fp32 weights and grads, m and v (no separate master copy).
        "fp32_adam": Precision("fp32_adam", 4, 4, 8, 4),
        # Megatron-LM / nanotron: bf16 params, fp32 main grads, fp32 master + m + v: 18 B/param.
        "mixed_adam_fp32_grads": Precision("mixed_adam_fp32_grads", 2, 4, 12, 2),
        # bf16 gradients plus an fp32 accumulation copy (2 + 4 gradient bytes): the Ultra-Scale
        # Playbook's 20 B/param (HuggingFace 2025, "Memory usage in Transformers": 2Ψ params, 2Ψ
        # grads, 4Ψ fp32 grads for accumulation, 12Ψ optimizer), and the 2 + 4 bytes per gradient
        # that DeepSpeed's ZeRO memory estimators count.
        "mixed_adam_fp32_accum": Precision("mixed_adam_fp32_accum", 2, 6, 12, 2),
        # What the runtime uses by default, so rounding vanishes next to real faults.
        "fp64_adam": Precision("fp64_adam", 8, 8, 16, 8),
        # SGD with momentum: one buffer (fp32), or fp32 master + momentum under mixed precision.
        "sgd_momentum": Precision("sgd_momentum", 4, 4, 4, 4),
        "mixed_sgd_momentum": Precision("mixed_sgd_momentum", 2, 2, 8, 2),
        "fp64_sgd_momentum": Precision("fp64_sgd_momentum", 8, 8, 8, 8),
        # PyTorch FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), as torchtitan
        # trains: fp32 parameter shards (no separate master copy), fp32 gradient shards, fp32 m and
        # v -- 4/4/8 B per parameter -- gathered and computed in bf16 (2 B on the wire), gradients
        # reduce-scattered in fp32 (4 B on the wire).
        "fsdp2_bf16": Precision("fsdp2_bf16", 4, 4, 8, 2, gather=2, reduce=4),
        # The same policy with reduce_dtype left unset: gradients reduce in param_dtype, bf16.
        "fsdp2_bf16_reduce_bf16": Precision(
            "fsdp2_bf16_reduce_bf16", 4, 4, 8, 2, gather=2, reduce=2
        ),
        # DeepSpeed's bf16 ZeRO with "communication_data_type": "fp32": ZeRO's 2/2/12 as stored,
        # each gradient reduction moving fp32 (4 B per element).
        "deepspeed_bf16_fp32_comm": Precision("deepspeed_bf16_fp32_comm", 2, 2, 12, 2, reduce=4),
        # torchtitan's float8 (docs/float8.md at 9dec370): fsdp2_bf16's states, the block
        # Linears' GEMMs in float8 with tensorwise dynamic scales (torchao), and FSDP2's float8
        # all-gather: 1 B on the wire for each converted weight (a Llama-3-8B's 6,979,321,856 of
        # 8,030,261,248, ``float8.converted_params``), 2 B for its embeddings, norms and output
        # layer (``gather_bytes``: 9,081,200,640 B a whole gather).
        "fsdp2_float8": Precision(
            "fsdp2_float8", 4, 4, 8, 2, gather=1, reduce=4, float8="tensorwise"
        ),
        # The rowwise recipe: its weights gather in bf16 (torchao's float8 all-gather casts with
        # one scale a tensor: WeightWithDynamicFloat8CastTensor, tensorwise only).
        "fsdp2_float8_rowwise": Precision(
            "fsdp2_float8_rowwise", 4, 4, 8, 2, gather=2, reduce=4, float8="rowwise"
        ),
    }
)


#: The form of a custom precision typed as text: bytes per element of P, G and O, and optionally A.
TRIPLE_FORM = "P/G/O or P/G/O/A bytes per element (e.g. 2/6/12; activations default to 2)"


def parse_precision(text: str) -> Precision:
    """Read a custom "P/G/O" (or "P/G/O/A") string of bytes per element: "2/6/12" is
    Precision("2/6/12", 2, 6, 12, 2). The name is the text itself, so a report shows what was
    typed."""
    parts = [part.strip() for part in text.split("/")]
    if len(parts) not in (3, 4) or not all(
        part.isascii() and part.isdigit() and len(part) <= 6 for part in parts
    ):
        raise PlacementError(_unknown(text))
    numbers = [int(part) for part in parts] + ([2] if len(parts) == 3 else [])
    params, grads, optimizer, activations = numbers
    return Precision("/".join(parts), params, grads, optimizer, activations)


def get_precision(precision: str | Precision) -> Precision:
    """A preset by name, a custom "P/G/O[/A]" string, or a user-defined Precision passed through."""
    if isinstance(precision, Precision):
        return precision
    if not isinstance(precision, str):
        raise PlacementError(_unknown(precision))
    if precision in PRESETS:
        return PRESETS[precision]
    if "/" in precision:
        return parse_precision(precision)
    raise PlacementError(_unknown(precision))


def _unknown(value: object) -> str:
    return (
        f"unknown precision {value!r}; known presets: {', '.join(PRESETS)}; "
        f"or a custom {TRIPLE_FORM}; or pass Precision(name, params, grads, optimizer, activations)"
    )
