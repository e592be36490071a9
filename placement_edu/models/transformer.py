"""A decoder's shape (``TransformerSpec``): layers, hidden, heads, ffn, sequence, vocabulary and
micro-batch; its parameter count and the activation terms of Korthikanti et al. 2022 (SPEC §3),
and the recomputation policies (torchtitan's ``layer:K``: ``layer_k``, ``every_kth``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

from placement_edu.errors import expect, positive_int
from placement_edu.models.splits import Number, per_layer_units
from placement_edu.models.ideal import IdealSlices


#: torchtitan's layer selective AC, ``selective_ac_option = "K"``: ``layer:K``, K at most this.
MAX_EVERY = 10_000
LAYER_K = (
    "layer:K: torchtitan's layer selective AC (selective_ac_option = 'K'): every K-th block "
    "checkpointed as full, the others kept (K from 1 to 10,000)"
)


def layer_k(text: str) -> str | None:
    """``layer:K`` as written once (``layer:02`` is ``layer:2``), K from 1 to ``MAX_EVERY``; None
    if ``text`` is not such a policy."""
    name, _, k = text.partition(":")
    if name == "layer" and k.isdigit() and len(k) <= 5 and 1 <= int(k) <= MAX_EVERY:
        return f"layer:{int(k)}"
    return None


def every_kth(recompute: str) -> int:
    """K of ``layer:K`` (every K-th block checkpointed), 0 for every other policy."""
    return int(recompute.partition(":")[2]) if recompute.startswith("layer:") else 0


@dataclass(frozen=True)
class TransformerSpec(IdealSlices):
    """A decoder: ``layers`` blocks of attention + MLP. ``block`` "gpt" (the default): GPT's,
    learned positions, tied embeddings, biases, LayerNorm, a 2-matrix MLP; "llama": Llama's,
    RoPE (no position table), untied embeddings, no biases, RMSNorm, SwiGLU (gate, up, down).

    Parameter count per layer: 4h² + 4h (QKV and output projections with biases) + 2hf + f + h
    (MLP with biases) + 4h (two layernorms); plus embeddings V·h + s·h and a final layernorm 2h.
    With f = 4h this is Megatron's 12h² + 13h per layer (Narayanan et al. 2021, §5.1).
    A Llama block: 2h² + 2h·K·h/a attention, 3hf SwiGLU, 2h for its two RMSNorm weights; plus
    2·V·h untied embeddings and a final RMSNorm h (Llama-3-8B: 8,030,261,248). Megatron's tensor
    parallelism keeps R of them whole on every tensor rank (``replicated_elements``).

    ``kv_heads`` (0 means ``heads``): grouped-query attention's key-value heads K; the key and
    value projections are K·(h/a) wide, so attention's weights are 2h² + 2h·K·h/a (+ biases
    h + h + 2K·h/a) instead of 4h² + 4h. ``attention``: how attention is computed, apart from
    recomputation -- "eager" (softmax and dropout as separate ops: the 5as²b bytes Korthikanti et
    al. count) or "flash" (FlashAttention: no s² tensor is kept, only the logsumexp).
    ``attention_count``: how attention's FLOPs are counted, "full" or "causal"
    (``ATTENTION_COUNTS``). ``tied_embeddings``: the output layer is the token embedding (V·h
    once); None takes the block's own (GPT's tied, Llama's untied), True a Llama-3.2-1B.
    """

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    micro_batch: int = 1
    ffn: int = 0  # 0 means 4 * hidden
    sequence_parallel: bool = False
    #: Activation recomputation (Korthikanti et al. 2022): "none"; "selective" (attention's
    #: softmax and dropout recomputed: the 5as/h term goes); "full" (only the layer input is kept,
    #: 2·s·b·h bytes per layer). True and False are read as "full" and "none".
    recompute: str = "none"
    gather_units: int = 0  # 0 means one unit per layer (FSDP's usual wrapping)
    name: str = ""
    kv_heads: int = 0  # 0 means heads (multi-head attention, no GQA)
    attention: str = "eager"
    block: str = "gpt"
    attention_count: str = "full"
    tied_embeddings: bool | None = None

    RECOMPUTE = ("none", "selective", "full")
    #: Policies the time model charges (``torchtitan_op_recomputed``) but whose memory only a
    #: module's profile prices (``fit``'s, ``time --model``): Korthikanti's formula has no term for
    #: torchtitan's save list, so ``activation_terms_per_layer`` refuses them.
    PROFILE_ONLY = ("torchtitan-op",)
    #: The blocks a transformer is built of: GPT's, and Llama's (SwiGLU, RMSNorm, RoPE, untied).
    BLOCKS = ("gpt", "llama")
    #: How attention is computed (apart from recomputation): see ``activation_terms_per_layer``.
    ATTENTION = ("eager", "flash")
    #: How attention's s² FLOPs are counted (issue 40), named wherever a figure uses one, and the
    #: factor each applies to them: "full", every query against every key (PaLM's 12·L·h·s per
    #: token, the count the presets' published runs use); "causal", half of it (Megatron-LM's
    #: causal count: a causal kernel skips the blocks above the diagonal).
    ATTENTION_COUNTS = {"full": Fraction(1), "causal": Fraction(1, 2)}

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq", "vocab", "micro_batch"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        recompute = self.recompute
        if isinstance(recompute, bool):  # the old flag: True meant full recomputation
            recompute = "full" if recompute else "none"
        if isinstance(recompute, str) and recompute not in self.RECOMPUTE:
            recompute = layer_k(recompute) or recompute
        known = (*self.RECOMPUTE, *self.PROFILE_ONLY)
        expect(
            isinstance(recompute, str) and (recompute in known or every_kth(recompute)),
            f"recompute must be one of {', '.join(known)} (or True = full, False = none) "
            f"or layer:K (K from 1 to {MAX_EVERY:,}), got {self.recompute!r}",
        )
        object.__setattr__(self, "recompute", recompute)
        if self.ffn == 0 and not isinstance(self.ffn, bool):
            object.__setattr__(self, "ffn", 4 * self.hidden)
        object.__setattr__(self, "ffn", positive_int("ffn", self.ffn))
        per_layer_units(self)
        expect(
            self.hidden % self.heads == 0,
            f"hidden ({self.hidden}) must be divisible by heads ({self.heads})",
        )
        if self.kv_heads == 0 and not isinstance(self.kv_heads, bool):
            object.__setattr__(self, "kv_heads", self.heads)
        kv = positive_int("kv_heads", self.kv_heads)
        expect(
            self.heads % kv == 0,
            f"kv_heads ({kv}) must divide heads ({self.heads}): each key-value head serves "
            "heads / kv_heads query heads",
        )
        expect(
            self.attention in self.ATTENTION,
            f"attention must be one of {', '.join(self.ATTENTION)}, got {self.attention!r}",
        )
        expect(
            self.attention_count in self.ATTENTION_COUNTS,
            f"attention_count must be one of {', '.join(self.ATTENTION_COUNTS)}, got "
            f"{self.attention_count!r}",
        )
        expect(
            self.block in self.BLOCKS,
            f"block must be one of {', '.join(self.BLOCKS)}, got {self.block!r}",
        )

    @property
    def llama(self) -> bool:
        return self.block == "llama"

    @property
    def tied(self) -> bool:
        """Whether the output layer is the token embedding: the block's own unless said."""
        return (not self.llama) if self.tied_embeddings is None else self.tied_embeddings

    @property
    def embedding_params(self) -> int:
        """V·h tied, 2·V·h untied (an input embedding and an output layer)."""
        return (1 if self.tied else 2) * self.vocab * self.hidden

    @property
    def kv_width(self) -> int:
        """K·h/a: the width of the key (and of the value) projection's output."""
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def psi(self) -> int:  # type: ignore[override]  # derived from the shape (ModelSpec's is a field)
        h, f, kv = self.hidden, self.ffn, self.kv_width
        if self.llama:  # no biases; SwiGLU's three matrices; two RMSNorm weights; untied, RoPE
            per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
            return self.layers * per_layer + self.embedding_params + h
        attention = 2 * h * h + 2 * h + 2 * h * kv + 2 * kv  # Q and out h² + h each; K, V h·kv + kv
        per_layer = attention + 2 * h * f + f + h + 4 * h
        return self.layers * per_layer + self.embedding_params + self.position_params + 2 * h

    @property
    def position_params(self) -> int:
        """s·h: GPT's learned position table, one row per position; 0 for a Llama block (RoPE
        computes its rotations, it learns none)."""
        return 0 if self.llama else self.seq * self.hidden

    @property
    def replicated_elements(self) -> int:  # type: ignore[override]  # derived from the shape
        """R: the parameters Megatron-LM keeps whole on every tensor rank, so a rank holds
        (Ψ − R)/t + R of each model state (16(Ψ − R)/t + 16R bytes under ``mixed_adam``): the
        layers' norms and row-parallel biases and the final norm (``tensor_replicated_elements``)
        and the learned position table (``position_params``: LanguageModelEmbedding's "Position
        embedding (serial)", a plain ``torch.nn.Embedding``). GPT: R = 6h·L + 2h + s·h; a Llama
        block: 2h·L + h. What is split: the word embedding (by vocabulary,
        ``VocabParallelEmbedding``), every column-parallel weight and bias, every row-parallel
        weight (``megatron/core/tensor_parallel/layers.py``). Sequence parallelism splits
        activations, not R."""
        return self.tensor_replicated_elements(range(self.layers), True) + self.position_params

    @property
    def checkpointed_layers(self) -> int:
        """Layers recomputation checkpoints whole: all under "full", L // K under torchtitan's
        layer:K (its every K-th block), none otherwise."""
        every = every_kth(self.recompute)
        return self.layers // every if every else self.layers if self.recompute == "full" else 0

    def torchtitan_op_recomputed(self) -> dict[str, int]:
        """Forward FLOPs per token of one block that torchtitan's op policy replays in backward
        (``--recompute torchtitan-op``), by matmul: the Linears as ``float8.linears`` names them,
        and "attention" under eager attention. Derived from the policy, as a learner can check:

        1. The policy (torchtitan's ``_save_list`` at commit 9dec370,
           ``reference_models.TorchtitanOp``) saves the outputs of ``aten.mm``, of the fused
           attention kernels (SDPA) and of reduce-scatter; it recomputes every second ``mm`` of a
           block, counting from 1 in forward order; every other op is recomputed in backward.
        2. A Llama block's Linears have no bias: ``nn.Linear`` on [b, s, h] runs one ``aten.mm``
           each, in forward order q, k, v, o, then the SwiGLU's gate (w1), up (w3), down (w2).
           The odd ones are saved -- q, v, gate, down -- and the even ones recomputed: k (h·K·h/a
           weights), o (h²) and up (h·f). 2 FLOPs a weight per token: 2h·kv + 2h² + 2hf.
        3. A GPT block, as the module ``fit`` measures it (``reference_models.Conv1D``, HF's GPT-2
           layer: ``addmm``, bias and matmul in one op): the policy sees no ``mm`` at all, so none
           is saved and all four are recomputed, as under full recomputation -- c_attn (3h² with
           K = a), c_proj (h²), c_fc (hf), the MLP's c_proj (fh). (Megatron-LM's GPT layers run
           ``mm`` and add the bias apart: there c_attn and c_fc would be saved and the two
           projections recomputed. The count follows the module fit measures.) The last of them
           is replayed because the dropout after it keeps a mask (GPT-2's resid_pdrop 0.1):
           ``torch.utils.checkpoint`` stops replaying once every tensor backward needs is back
           (its early stop), so a GPT block without dropout would replay three.
        4. What feeds them: a recomputed matmul needs its input. The norms, RoPE, GeLU, SiLU and
           their products are recomputed too, but they are elementwise: the time model counts no
           FLOPs for them (the roofline prices their bytes, ``roofline.replayed``). The attention
           output feeding o (or c_proj): SDPA's is saved (flash attention, none of its FLOPs
           replayed); eager attention's two ``bmm`` (q·kᵀ and the probabilities times v) are not
           in the save list, so they are replayed: 4·h·s per token, as ``timing`` counts
           attention's forward (its ``attention_count``).

        So per token and block, Llama: 2h(K·h/a + h + f) (+ 4hs eager); GPT: 2h(h + 2K·h/a) +
        2h² + 4hf (+ 4hs eager) -- the block's forward matmuls, as under "full". Llama-3-8B
        (h = 4096, K·h/a = 1024, f = 14336): 2·4096·(1024 + 4096 + 14336) = 159,383,552 FLOPs a
        token a block, 36.5% of its 436,207,616 matmul FLOPs (k, o and up of q, k, v, o, gate,
        up and down). ``tests/test_torchtitan_op_flops.py`` measures them (``FlopCounterMode``)."""
        h, f, kv = self.hidden, self.ffn, self.kv_width
        if self.llama:
            replayed = {"wk": 2 * h * kv, "wo": 2 * h * h, "w3": 2 * h * f}
        else:
            replayed = {"qkv": 2 * h * (h + 2 * kv), "proj": 2 * h * h, "fc1": 2 * h * f}
            replayed["fc2"] = 2 * f * h
        if self.attention == "eager":
            count = self.ATTENTION_COUNTS[self.attention_count]
            replayed["attention"] = int(4 * h * self.seq * count)
        return replayed

    @property
    def lookup_params(self) -> int:
        """Parameters read by a lookup, not a matmul, that FLOP counts leave out: a Llama's
        untied input embedding V·h (torchtitan's ``get_num_flop_per_token`` excludes it). GPT's
        tied embedding is the logit layer's matmul, counted (as is its small position table,
        the package's convention since its first figures); a tied Llama's likewise."""
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def boundary_elements(self) -> int:
        """b·s·h: one activation at a block or stage boundary, for one micro-batch."""
        return self.micro_batch * self.seq * self.hidden

    tp_blocks_per_layer: int = field(default=2, init=False)

    def tensor_replicated_elements(self, layers: range, last_stage: bool) -> int:
        """Parameters of ``layers`` Megatron leaves whole on every tensor rank and all-reduces on
        the tensor axis under sequence parallelism (``sequence_parallel`` set on them; its
        ``finalize_model_grads._allreduce_layernorm_grads``): two layernorms (4h) and the biases
        of the two row-parallel layers (2h) per layer, and the final layernorm (2h) on the last
        stage. A Llama block: its two RMSNorm weights (2h), the final one (h). The position table,
        also whole, is not among them: it is read before the sequence is scattered, so every
        tensor rank computes its whole gradient (``replicated_elements`` counts it)."""
        if self.llama:
            return 2 * self.hidden * len(layers) + (self.hidden if last_stage else 0)
        return 6 * self.hidden * len(layers) + (2 * self.hidden if last_stage else 0)

    def activation_bytes_per_layer(self, tensor: int = 1) -> Fraction:
        """Bytes of activations one layer keeps for backward, for one micro-batch on one of
        ``tensor`` tensor-parallel ranks: Korthikanti et al. 2022, "Reducing Activation
        Recomputation in Large Transformer Models", Table 2 (16-bit; the coefficients are already
        bytes, SPEC §3).

        ==================  ==========================  ====================
        recompute           tensor parallel t           with sequence parallel
        ==================  ==========================  ====================
        "none"              sbh(10 + 24/t + 5as/(ht))   sbh(34/t + 5as/(ht))
        "selective"         sbh(10 + 24/t)              sbh·34/t
        "full"              2sbh (the layer input)      2sbh/t
        ==================  ==========================  ====================

        At t = 1 the first column is sbh(34 + 5as/h); selective recomputation drops the 5as/h term
        (attention's softmax and dropout, recomputed in backward). That is eager attention with
        multi-head attention; flash attention keeps the logsumexp (4as·b/t bytes) in place of the
        5as²b/t, and grouped-query attention narrows the key and value flash attention keeps. The
        sum of ``activation_terms_per_layer``, where each term is derived."""
        return sum(self.activation_terms_per_layer(tensor).values(), Fraction(0))

    def activation_bytes_per_microbatch(self, tensor: int, layers_here: Fraction) -> Number:
        return self.activation_bytes_per_layer(tensor) * layers_here

    #: The named terms of ``activation_terms_per_layer``, in drawing order.
    ACTIVATION_TERMS = ("outside_tp", "inside_tp", "attention_scores", "layer_input")

    def activation_terms_per_layer(self, tensor: int = 1) -> dict[str, Fraction]:
        """``activation_bytes_per_layer`` split into Korthikanti et al.'s named terms (bytes, one
        micro-batch, one of ``tensor`` ranks); the values sum to it exactly, every key present:

        - ``outside_tp``: 10·sbh, what tensor parallelism leaves whole on every rank (the two
          layernorm inputs 4sbh, the attention and MLP block inputs 2sbh each, two dropout masks
          sbh each); sequence parallelism splits it over t: 10·sbh/t.
        - ``inside_tp``: 24·sbh/t, the tensors between a column- and a row-parallel layer: Q, K
          and V (2sbh each), the output projection's input 2sbh, the MLP's 8sbh twice. Under
          grouped-query attention flash attention keeps K and V at their K·h/a width:
          sbh(20 + 4K/a)/t; eager attention expands them to every head before QKᵀ (Megatron's
          local attention ``repeat_interleave``, HF's ``repeat_kv``) and keeps 24·sbh/t.
        - ``attention_scores``: eager attention, 5as²b/t: the softmax output 2as²b, its dropout
          mask as²b and the dropout output 2as²b (Korthikanti et al. 2022, §4.1). Flash attention
          keeps none of these, only the softmax's logsumexp, one fp32 per head and token: 4asb/t
          bytes (FlashAttention-2, Dao 2023, Algorithm 1 writes the logsumexp L to HBM; PyTorch's
          ``_scaled_dot_product_flash_attention`` saves ``logsumexp`` [b, a, s] fp32 beside
          q, k, v and the output). 0 under selective recomputation, whichever attention: what
          Megatron's ``--recompute-granularity selective`` recomputes is core attention.
        - ``layer_input``: 2sbh (2sbh/t with sequence parallelism), all full recomputation keeps
          (the layer being recomputed: ``recompute_working_set``).

        A Llama block (``block="llama"``, no dropout), as Megatron-LM runs it: ``outside_tp``
        8·sbh (two RMSNorm inputs, the attention and MLP inputs); ``inside_tp`` Q, K, V and the
        output projection's input as above, and the MLP's 6·sbf: its first matmul's [s, b, 2f]
        output (gate and up side by side), all Megatron's fused SwiGLU saves
        (megatron/core/fusions/fused_bias_swiglu.py: ``SwiGLUFunction`` saves its input and
        recomputes silu in backward), and the second matmul's [s, b, f] input. (HF's Llama, op by
        op, keeps gate, up, silu(gate) and their product: 8·sbf, as ``fit`` measures.) Eager
        ``attention_scores``: the softmax output alone, 2as²b/t (Megatron's fused softmax writes
        16 bits)."""
        s, b, h, a, t = (
            self.seq,
            self.micro_batch,
            self.hidden,
            self.heads,
            positive_int("tensor", tensor),
        )
        sbh = s * b * h
        terms = {name: Fraction(0) for name in self.ACTIVATION_TERMS}
        expect(
            self.recompute not in self.PROFILE_ONLY,
            f"Korthikanti's formula has no term for {self.recompute}'s save list: only a "
            "module's profile prices its peak (fit's; price_configuration's peak_of)",
        )
        if every_kth(self.recompute):  # torchtitan's layer:K: k = L // K layers as under full
            k, L = self.checkpointed_layers, self.layers
            kept, full = (
                replace(self, recompute=r).activation_terms_per_layer(tensor)
                for r in ("none", "full")
            )
            return {n: (kept[n] * (L - k) + full[n] * k) / L for n in self.ACTIVATION_TERMS}
        if self.recompute == "full":
            terms["layer_input"] = Fraction(2 * sbh, t if self.sequence_parallel else 1)
            return terms
        outside = 8 if self.llama else 10
        terms["outside_tp"] = Fraction(outside * sbh, t if self.sequence_parallel else 1)
        flash = self.attention == "flash"
        kv_kept = self.kv_heads if flash else a  # eager expands K and V to every head
        if self.llama:  # Q, output input 2sbh each, K and V, then the MLP's 2f- and f-wide
            attention = sbh * Fraction(4 * a + 4 * kv_kept, a * t)
            terms["inside_tp"] = attention + Fraction(6 * s * b * self.ffn, t)
        else:
            terms["inside_tp"] = sbh * Fraction(20 * a + 4 * kv_kept, a * t)
        if self.recompute == "none":
            scores = 2 if self.llama else 5  # (no dropout in a Llama block)
            terms["attention_scores"] = (
                Fraction(4 * a * s * b, t) if flash else sbh * Fraction(scores * a * s, h * t)
            )
        return terms

    def recompute_working_set(self, tensor: int = 1) -> Fraction:
        """Bytes live on top of the kept activations while one layer's backward runs under full
        recomputation, one micro-batch on one of ``tensor`` ranks: the layer's forward is replayed
        and keeps everything a layer without recomputation keeps (``activation_bytes_per_layer``
        of "none", same attention) until its backward is done: the checkpointed inputs of every
        layer plus one layer's full activations. 0 under
        "none" and "selective", whose layers keep their activations already; under layer:K the
        same as "full" (a checkpointed layer replays), 0 where no layer is checkpointed (K > L)."""
        if not self.checkpointed_layers:
            return Fraction(0)
        return replace(self, recompute="none").activation_bytes_per_layer(tensor)

    @property
    def description(self) -> str:
        kv = f" K={self.kv_heads}" if self.kv_heads != self.heads else ""
        attention = f", {self.attention} attention" if self.attention != "eager" else ""
        attention += ", causal count" if self.attention_count == "causal" else ""
        kind = "Llama-block transformer" if self.llama else "transformer"
        return self.name or (
            f"{kind} L={self.layers} h={self.hidden} a={self.heads}{kv} "
            f"s={self.seq} V={self.vocab} b={self.micro_batch} (Ψ = {self.psi:,}){attention}"
        )
