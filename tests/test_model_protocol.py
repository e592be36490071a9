"""The ``Model`` protocol (issue 41, item 2): every kind of model answers what the derivations ask,
so they read a model through one interface instead of ``getattr(model, "heads", None)``. mypy checks
the shapes statically; these tests check the answers, and that the ones a model without attention
gives (``NoAttention``) are the defaults the derivations used to supply."""

from __future__ import annotations

import pytest

from placement_edu.errors import PlacementError
from placement_edu.experts import MIXTRAL_8X7B
from placement_edu.models import ConcreteModel, ModelSpec, TransformerSpec, tensor_divides_heads
from placement_edu.models.protocol import Model
from placement_edu.runtime.engines.toy_shapes import BlockShape, MLPShape

pytestmark = pytest.mark.fast

#: Llama-3-8B (Meta's config.json: L 32, h 4096, a 32, K 8, f 14336, V 128256).
LLAMA_3_8B = TransformerSpec(
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn=14336,
    vocab=128256,
    seq=8192,
    block="llama",
)
#: GPT-2 small (Radford et al. 2019: L 12, h 768, a 12, s 1024, V 50257), tied embeddings.
GPT2_SMALL = TransformerSpec(layers=12, hidden=768, heads=12, seq=1024, vocab=50257)
MODELS = {
    "ModelSpec": ModelSpec(7_500_000_000, layers=32),
    "TransformerSpec": GPT2_SMALL,
    "llama": LLAMA_3_8B,
    "MoESpec": MIXTRAL_8X7B,
    "ConcreteModel": ConcreteModel.from_module(MLPShape(width=12, layers=4)),
}


def protocol_members() -> list[str]:
    """The names ``Model`` declares (its own and ``Heads``'), dunders aside."""
    return sorted(
        {
            name
            for klass in Model.__mro__
            if klass.__module__.startswith("placement_edu.models")
            for name in vars(klass)
            if not name.startswith("_")
        }
    )


def test_the_protocol_names_what_the_derivations_read() -> None:
    members = protocol_members()
    for read in ("heads", "kv_heads", "seq", "recompute", "lookup_params", "layers", "psi"):
        assert read in members
    assert "unit_runs" in members and "local_elements" in members and "description" in members


@pytest.mark.parametrize("kind", MODELS)
def test_every_kind_of_model_answers_every_member(kind: str) -> None:
    model = MODELS[kind]
    missing = [name for name in protocol_members() if not hasattr(model, name)]
    assert missing == []


def test_a_model_without_attention_answers_as_the_getattr_defaults_did() -> None:
    for model in (MODELS["ModelSpec"], MODELS["ConcreteModel"]):
        assert (model.heads, model.kv_heads, model.seq) == (None, None, None)
        assert (model.recompute, model.lookup_params) == ("none", 0)


def test_a_transformer_answers_with_its_shape() -> None:
    assert (GPT2_SMALL.heads, GPT2_SMALL.kv_heads, GPT2_SMALL.seq) == (12, 12, 1024)
    assert GPT2_SMALL.lookup_params == 0  # tied: the embedding is the logit layer's weight too
    # Llama's untied input embedding is a lookup, V·h = 128,256 × 4,096 (no FLOPs)
    assert LLAMA_3_8B.lookup_params == 525_336_576
    assert (LLAMA_3_8B.heads, LLAMA_3_8B.kv_heads) == (32, 8)
    # Mixtral 8x7B (Jiang et al. 2024): 32 heads, 8 key-value heads, no lookup counted apart
    assert (MIXTRAL_8X7B.heads, MIXTRAL_8X7B.kv_heads, MIXTRAL_8X7B.lookup_params) == (32, 8, 0)


def test_the_toy_shapes_answer_the_heads_a_tensor_axis_splits() -> None:
    assert (MLPShape().heads, MLPShape().kv_heads) == (None, None)
    assert (BlockShape().heads, BlockShape().kv_heads) == (4, 4)
    tensor_divides_heads(MLPShape(), 3)  # no heads: nothing to refuse
    tensor_divides_heads(BlockShape(), 2)
    with pytest.raises(PlacementError, match="tensor degree 3 does not divide the 4 attention"):
        tensor_divides_heads(BlockShape(), 3)
    with pytest.raises(PlacementError, match="does not divide the 8 key-value heads"):
        tensor_divides_heads(LLAMA_3_8B, 16)
