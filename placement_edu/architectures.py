"""The shapes of the models people train, as plain data (no torch): HF GPT-2 and Llama.

An ``Architecture`` names every parameter tensor of the reference modules in
``placement_edu.runtime.measurement.reference_models`` -- same names, same shapes, same order -- and
the FSDP2 unit each belongs to: ``"root"`` (embeddings, final norm, head: the module ``fully_shard``
is applied to last) or the block's index. The peak derivation (``placement_edu.peak``) reads only
this.

Presets (shapes from the published HF ``config.json`` files):

- ``gpt2``: HF GPT-2 124M -- 12 layers, h = 768, 12 heads, V = 50257, 1024 positions, tied head,
  HF's Conv1D weights stored [in, out], dropout 0.1 (``resid_pdrop``, ``embd_pdrop``,
  ``attn_pdrop``).
- ``llama-1b``: Llama-3.2-1B -- 16 layers, h = 2048, 32 heads, 8 kv heads, ffn 8192, V = 128256,
  tied.
- ``llama-8b``: Llama-3-8B -- 32 layers, h = 4096, 32 heads, 8 kv heads, ffn 14336, V = 128256.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping

from placement_edu.models.transformer import TransformerSpec
from placement_edu.errors import (
    MAX_COUNT,
    MAX_PARAMS,
    PlacementError,
    expect,
    kv_heads_of,
    one_of,
    positive_int,
    show_limit,
    shown,
)

KINDS = ("gpt2", "llama")


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer's shape. ``kv_heads`` < ``heads`` is grouped-query attention
    (Llama); ``positions`` > 0 means learned position embeddings (GPT-2), 0 means RoPE."""

    kind: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    kv_heads: int = 0  # 0 means heads (no GQA)
    positions: int = 0  # learned positions (GPT-2); 0 for RoPE (Llama)
    tied: bool = True  # the LM head is the token embedding
    dropout: float = 0.0
    name: str = ""
    #: The HF ``config.json`` this shape was read from ("" for the plain-torch reference): the
    #: runtime then builds HF's own module with ``transformers`` (the optional ``hf`` extra).
    config: str = ""

    def __post_init__(self) -> None:
        one_of("architecture kind", self.kind, KINDS)
        for field in ("layers", "hidden", "heads", "ffn", "vocab"):
            positive_int(field, getattr(self, field))
        object.__setattr__(self, "kv_heads", kv_heads_of(self.hidden, self.heads, self.kv_heads))
        expect(0.0 <= self.dropout < 1.0, f"dropout is a probability in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def with_(self, **changes: object) -> "Architecture":
        return replace(self, **changes)  # type: ignore[arg-type]

    def formula(
        self, seq: int, micro_batch: int = 1, attention: str = "eager", recompute: str = "none"
    ) -> TransformerSpec:
        """The formula's view of this module at ``seq``: a ``TransformerSpec`` of its layers,
        widths, heads, vocabulary, block and tied or untied embeddings (GPT-2's position table is
        the formula's s rows, so the two count the same parameters at s = ``positions`` only)."""
        return TransformerSpec(
            layers=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.kv_heads,
            ffn=self.ffn,
            vocab=self.vocab,
            seq=seq,
            micro_batch=micro_batch,
            attention=attention,
            recompute=recompute,
            block="llama" if self.kind == "llama" else "gpt",
            tied_embeddings=self.tied,
        )

    # --- the tensors ------------------------------------------------------------------------
    def block_tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name inside the block, shape) of one block's parameters, in registration order."""
        h, f = self.hidden, self.ffn
        if self.kind == "gpt2":  # HF Conv1D: weight [in, out], then bias [out]
            return [
                ("ln_1.weight", (h,)),
                ("ln_1.bias", (h,)),
                ("attn.c_attn.weight", (h, 3 * h)),
                ("attn.c_attn.bias", (3 * h,)),
                ("attn.c_proj.weight", (h, h)),
                ("attn.c_proj.bias", (h,)),
                ("ln_2.weight", (h,)),
                ("ln_2.bias", (h,)),
                ("mlp.c_fc.weight", (h, f)),
                ("mlp.c_fc.bias", (f,)),
                ("mlp.c_proj.weight", (f, h)),
                ("mlp.c_proj.bias", (h,)),
            ]
        kv = self.kv_heads * self.head_dim  # nn.Linear: weight [out, in], no biases
        return [
            ("self_attn.q_proj.weight", (h, h)),
            ("self_attn.k_proj.weight", (kv, h)),
            ("self_attn.v_proj.weight", (kv, h)),
            ("self_attn.o_proj.weight", (h, h)),
            ("mlp.gate_proj.weight", (f, h)),
            ("mlp.up_proj.weight", (f, h)),
            ("mlp.down_proj.weight", (h, f)),
            ("input_layernorm.weight", (h,)),
            ("post_attention_layernorm.weight", (h,)),
        ]

    def root_tensors(
        self,
    ) -> tuple[list[tuple[str, tuple[int, ...]]], list[tuple[str, tuple[int, ...]]]]:
        """(name, shape) of the root unit's parameters: those registered before the blocks
        (embeddings) and those after (final norm, an untied head)."""
        h, V = self.hidden, self.vocab
        before: list[tuple[str, tuple[int, ...]]]
        after: list[tuple[str, tuple[int, ...]]]
        if self.kind == "gpt2":
            before = [
                ("transformer.wte.weight", (V, h)),
                ("transformer.wpe.weight", (self.positions, h)),
            ]
            after = [("transformer.ln_f.weight", (h,)), ("transformer.ln_f.bias", (h,))]
        else:
            before, after = [("model.embed_tokens.weight", (V, h))], [("model.norm.weight", (h,))]
        return before, after + ([] if self.tied else [("lm_head.weight", (V, h))])

    def tensors(self) -> list[tuple[str, tuple[int, ...], str | int]]:
        """(name, shape, unit) of every parameter in ``named_parameters()`` order; unit is
        ``"root"`` or the block index. A tied head is the embedding, listed once. (A list of
        L blocks: ``psi`` counts one block with its count instead.)"""
        before, after = self.root_tensors()
        blocks = "transformer.h" if self.kind == "gpt2" else "model.layers"
        out: list[tuple[str, tuple[int, ...], str | int]] = [(n, s, "root") for n, s in before]
        for i in range(self.layers):
            out += [(f"{blocks}.{i}.{name}", shape, i) for name, shape in self.block_tensors()]
        return out + [(n, s, "root") for n, s in after]

    @property
    def psi(self) -> int:
        """Parameters (elements), a tied head counted once: the root's tensors and one block's
        times L (closed form: the cost does not grow with the layers)."""
        before, after = self.root_tensors()
        root = sum(math.prod(shape) for _, shape in before + after)
        return root + self.layers * sum(math.prod(shape) for _, shape in self.block_tensors())


#: The reference shapes (HF config.json of each model).
PRESETS: Mapping[str, Architecture] = MappingProxyType(
    {
        # openai-community/gpt2: n_layer 12, n_embd 768, n_head 12, n_inner None (4h), n_positions
        # 1024.
        "gpt2": Architecture(
            "gpt2", 12, 768, 12, 3072, 50257, positions=1024, dropout=0.1, name="gpt2"
        ),
        # meta-llama/Llama-3.2-1B: tie_word_embeddings true, head_dim 64.
        "llama-1b": Architecture("llama", 16, 2048, 32, 8192, 128256, kv_heads=8, name="llama-1b"),
        # meta-llama/Meta-Llama-3-8B: untied head, head_dim 128.
        "llama-8b": Architecture(
            "llama", 32, 4096, 32, 14336, 128256, kv_heads=8, tied=False, name="llama-8b"
        ),
    }
)
#: The sequence length each preset is checked at (issue 22) and its profile shipped for: GPT-2's
#: whole context, 2048 for Llama-3.2-1B, 4096 for Llama-3-8B.
REFERENCE_SEQ: Mapping[str, int] = MappingProxyType(
    {"gpt2": 1024, "llama-1b": 2048, "llama-8b": 4096}
)


def sequence_of(model: str | Architecture, seq: int | None = None) -> int:
    """The sequence length a command prices ``model`` at: ``seq`` if given, else the one its
    reference shape is checked at (``REFERENCE_SEQ``), else min(its learned positions, 2048)."""
    if seq:
        return seq
    arch = get_architecture(model)
    return REFERENCE_SEQ.get(arch.name) or min(arch.positions or 2048, 2048)


#: What a config.json may hold. A real one is about 1 kB; layers: the peak is placed from a
#: two-block profile (at least 2); ``peak.derive`` costs the same for any L (each run of alike
#: blocks by its ends, ``peak.MAX_LISTED_BLOCKS``), but a mesh's pipeline and tensor ranks, the
#: chart and ``--verify`` (which builds every block) still go block by block, so 10^4; the other
#: counts as the transformer flags take them (errors.MAX_COUNT), and the whole model at most
#: errors.MAX_PARAMS parameters, as --params.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_LAYERS = 10_000


def _count(config: Mapping, key: str, where: str, low: int = 1, high: int = MAX_COUNT) -> int:
    """``config[key]``, a whole number from ``low`` to ``high``, or one line naming the field."""
    expect(key in config, f"{where}: the field {key!r} is missing")
    value = config[key]
    expect(
        isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
        f"{where}: {key} is {shown(value)}; expected a whole number from {low} to "
        f"{show_limit(high)}",
    )
    return value


def from_hf_config(config: object, path: str = "") -> Architecture:
    """The shape an HF ``config.json`` describes (``model_type`` gpt2 or llama), read as plain
    JSON: every field checked for its type and range, in one line naming it."""
    where = path or "the config"
    expect(
        isinstance(config, Mapping),
        f"{where}: expected a JSON object (an HF config.json), got {type(config).__name__}",
    )
    assert isinstance(config, Mapping)
    kind = config.get("model_type")
    expect(kind in KINDS, f"{where}: model_type {shown(kind)} is not one of {', '.join(KINDS)}")
    name = path or str(kind)
    layers = "n_layer" if kind == "gpt2" else "num_hidden_layers"
    L = _count(config, layers, where, 2, MAX_CONFIG_LAYERS)
    if kind == "gpt2":
        h, heads = _count(config, "n_embd", where), _count(config, "n_head", where)
        inner = _count(config, "n_inner", where) if config.get("n_inner") is not None else 4 * h
        arch = Architecture(
            "gpt2",
            L,
            h,
            heads,
            inner,
            _count(config, "vocab_size", where),
            positions=_count(config, "n_positions", where),
            tied=bool(config.get("tie_word_embeddings", True)),
            dropout=_probability(config, "resid_pdrop", where, 0.1),
            name=name,
            config=path,
        )
    else:
        h, heads = (
            _count(config, "hidden_size", where),
            _count(config, "num_attention_heads", where),
        )
        head_dim = _count(config, "head_dim", where) if "head_dim" in config else h // heads
        expect(head_dim * heads == h, f"{name}: head_dim x heads must equal hidden_size here")
        kv = config.get("num_key_value_heads")
        arch = Architecture(
            "llama",
            L,
            h,
            heads,
            _count(config, "intermediate_size", where),
            _count(config, "vocab_size", where),
            kv_heads=_count(config, "num_key_value_heads", where) if kv is not None else heads,
            tied=bool(config.get("tie_word_embeddings", False)),
            name=name,
            config=path,
        )
    expect(
        arch.psi <= MAX_PARAMS,
        f"{where}: {arch.psi:,} parameters; at most {show_limit(MAX_PARAMS)} (errors.MAX_PARAMS)",
    )
    return arch


def _probability(config: Mapping, key: str, where: str, default: float) -> float:
    value = config.get(key, default)
    expect(
        isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1,
        f"{where}: {key} is {shown(value)}; expected a probability in [0, 1)",
    )
    return float(value)


def read_hf_config(path: str) -> Architecture:
    """The ``Architecture`` of an HF ``config.json`` at ``path``: a regular file of at most
    ``MAX_CONFIG_BYTES`` (a FIFO would block), one JSON object, each field checked."""
    import json
    import os
    import stat

    try:
        info = os.stat(path)
        expect(stat.S_ISREG(info.st_mode), f"{path!r} is not a regular file; give a config.json")
        expect(
            info.st_size <= MAX_CONFIG_BYTES,
            f"{path!r} holds {info.st_size:,} bytes; an HF config.json is about 1 kB "
            f"(at most {MAX_CONFIG_BYTES:,} read)",
        )
        with open(path, "rb") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)
        config = json.loads(text)
    except RecursionError:
        raise PlacementError(f"cannot read an HF config from {path!r}: nested too deep") from None
    except (OSError, ValueError) as error:
        raise PlacementError(f"cannot read an HF config from {path!r}: {error}") from None
    return from_hf_config(config, path)


def get_architecture(name: str | Architecture) -> Architecture:
    """A preset by name, a path to an HF ``config.json``, or an ``Architecture`` passed through."""
    if isinstance(name, Architecture):
        return name
    if name in PRESETS:
        return PRESETS[name]
    if isinstance(name, str) and name.endswith(".json"):
        return read_hf_config(name)
    raise PlacementError(
        f"unknown model {name!r}; known: {', '.join(PRESETS)}, or a path to an HF config.json"
    )
