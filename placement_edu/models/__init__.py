"""Model specifications: how big each state is before any placement divides it.

Three kinds, simplest first, a module each (``ideal``, ``transformer``, ``concrete``); ``splits``
says how any of them divides into units, stages and heads, ``shapes`` resolves a bare Ψ, and
``protocol`` holds the ``Model`` every derivation reads:
- ``ModelSpec``: abstract, Ψ parameters (what the ZeRO paper's tables use); ideal slices Ψ/N.
- ``TransformerSpec``: layers, hidden, heads, ffn, sequence, vocab, micro-batch; parameter count
  and the activation terms of Korthikanti et al. 2022 (SPEC §3).
- ``ConcreteModel``: the exact tensors of a torch ``nn.Module``; slices follow a real sharding
  rule (ZeRO's flat padded buffer, or FSDP2's per-tensor dim-0 chunks) and report their padding.

All sizes are in *elements*; the precision preset turns them into bytes.
"""

from placement_edu.models.splits import (
    Number,
    UnitRun,
    unit_runs_of,
    prefetched_window,
    per_layer_units,
    stage_units,
    Heads,
    listed_units,
    heads_divide,
    tensor_divides_heads,
    stage_layers,
)
from placement_edu.models.ideal import (
    IdealSlices,
    ModelSpec,
)
from placement_edu.models.transformer import (
    MAX_EVERY,
    LAYER_K,
    layer_k,
    every_kth,
    TransformerSpec,
)
from placement_edu.models.concrete import (
    SHARDING_RULES,
    GATHER_UNITS,
    greedy_partition,
    TensorSpec,
    Parametrized,
    ConcreteModel,
)
from placement_edu.models.protocol import Model, NoAttention
from placement_edu.models.shapes import (
    ModelOrPsi,
    Shape,
    SHAPES,
    nearest_shape,
    per_layer_model,
    as_model,
)

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["ConcreteModel", "ModelSpec", "TensorSpec", "TransformerSpec", "greedy_partition"]
