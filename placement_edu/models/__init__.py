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
    Coords,
    Degrees,
    Heads,
    Number,
    UnitRun,
    heads_divide,
    listed_units,
    per_layer_units,
    prefetched_window,
    stage_layers,
    stage_units,
    tensor_divides_heads,
    unit_runs_of,
)
from placement_edu.models.protocol import Model, NoAttention
from placement_edu.models.ideal import IdealSlices, ModelSpec
from placement_edu.models.transformer import LAYER_K, MAX_EVERY, TransformerSpec, every_kth, layer_k
from placement_edu.models.concrete import (
    GATHER_UNITS,
    SHARDING_RULES,
    ConcreteModel,
    Parametrized,
    TensorSpec,
    greedy_partition,
)
from placement_edu.models.shapes import (
    SHAPES,
    ModelOrPsi,
    Shape,
    as_model,
    nearest_shape,
    per_layer_model,
)

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["ConcreteModel", "ModelSpec", "TensorSpec", "TransformerSpec", "greedy_partition"]
