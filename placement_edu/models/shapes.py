"""A model as the derivations take it (``as_model``): a spec, or a bare Ψ, the abstract model of
``per_layer_model`` -- Ψ in the layers of the nearest published shape (``SHAPES``)."""

from __future__ import annotations

import math
from typing import Any, Union

from placement_edu.errors import PlacementError, positive_int
from placement_edu.models.concrete import ConcreteModel
from placement_edu.models.ideal import IdealSlices, ModelSpec
from placement_edu.models.protocol import Model
from placement_edu.models.transformer import TransformerSpec

#: What ``as_model`` takes: a model, or Ψ (a number of parameters).
ModelOrPsi = Union[Model, int, float]
#: A published shape: (name, layers L, hidden h, heads a, sequence s, vocabulary V, source).
Shape = tuple[str, int, int, int, int, int, str]

# --- the abstract model of a bare Ψ -------------------------------------------------------------
#: Published shapes (name, layers L, hidden h, heads a, sequence s, vocabulary V, source).
SHAPES: tuple[Shape, ...] = (
    ("GPT-2 small", 12, 768, 12, 1024, 50257, "Radford et al. 2019"),
    ("GPT-2 XL", 48, 1600, 25, 1024, 50257, "Radford et al. 2019"),
    ("Llama-2-7B", 32, 4096, 32, 4096, 32000, "Touvron et al. 2023, Table 1 and §2.2"),
    ("Llama-2-13B", 40, 5120, 40, 4096, 32000, "Touvron et al. 2023"),
    ("Llama-2-70B", 80, 8192, 64, 4096, 32000, "Touvron et al. 2023"),
    ("GPT-3 175B", 96, 12288, 96, 2048, 50257, "Brown et al. 2020, Table 2.1"),
    ("Megatron 1T", 128, 25600, 160, 2048, 51200, "Narayanan et al. 2021, Table 1"),
)

#: The course's 7B-class model for the pipeline's activations (the live-set explorer and its
#: exercises): 32 layers, h = 4096, a = 32, s = 2048, V = 51200, selective recomputation.
SEVEN_B_CLASS = TransformerSpec(
    layers=32,
    hidden=4096,
    heads=32,
    seq=2048,
    vocab=51200,
    recompute="selective",
    name="a 7B-class model",
)


def nearest_shape(psi: int) -> Shape:
    """The published shape (a row of ``SHAPES``) whose GPT-style model (f = 4h) is nearest to
    ``psi`` parameters, by ratio."""
    psi = positive_int("number of parameters (psi)", psi)

    def gpt_style_psi(shape: Shape) -> int:
        _, layers, h, a, s, v, _ = shape
        return TransformerSpec(layers=layers, hidden=h, heads=a, seq=s, vocab=v).psi

    return min(SHAPES, key=lambda shape: abs(math.log(gpt_style_psi(shape) / psi)))


def per_layer_model(psi: int) -> ModelSpec:
    """The abstract model of a bare Ψ (``as_model``, ``table --params``): ``psi`` parameters in the
    layers of the published shape nearest to it (``nearest_shape``), gathered one layer at a time
    -- FSDP's usual wrapping. (A single unit would gather the whole model at once: zero3's peak
    above zero2's. Ask for it explicitly: ``ModelSpec(psi)``.)"""
    psi = positive_int("number of parameters (psi)", psi)
    name, layers, *_ = nearest_shape(psi)
    return ModelSpec(
        psi, layers=layers, name=f"Ψ = {psi:,} parameters in {layers} layers ({name}'s L)"
    )


def as_model(model: ModelOrPsi | Any) -> Model:
    """A model, or Ψ (a number) for the abstract one of ``per_layer_model`` (Ψ in the layers of
    the nearest published shape, gathered a layer at a time); anything else is refused by name."""
    if isinstance(model, (IdealSlices, ConcreteModel)):  # MoESpec (experts.py) is IdealSlices
        return model  # type: ignore[return-value]
    if isinstance(model, (int, float)) and not isinstance(model, bool):
        return per_layer_model(model)  # type: ignore[arg-type]
    raise PlacementError(
        f"model must be a number of parameters (Ψ) or a ModelSpec, TransformerSpec, MoESpec "
        f"or ConcreteModel, got {model!r}"
    )
