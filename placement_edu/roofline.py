"""The roofline: each op of a transformer block, its FLOPs and the bytes it moves through device
memory, hence its arithmetic intensity and its seconds (issue 42, item 3).

An op does F FLOPs and moves B bytes between device memory (HBM) and the chip. At a peak of P FLOP/s
and a bandwidth of W bytes per second it takes at least max(F / P, B / W): compute-bound when its
arithmetic intensity F / B is above the *ridge point* P / W, memory-bound below it (Williams et al.
2009, "Roofline"; the Ultra-Scale Playbook and the JAX scaling book, ch. 1). A matmul of b·s tokens
against a k × n weight does 2·b·s·k·n FLOPs on about 2·(b·s·k + k·n + b·s·n) bytes: thousands of
FLOPs a byte, far above an H100's ridge (989e12 / 3.35e12 = 295). A norm, an activation or a
residual add does a few FLOPs per element it reads and writes: below 1, so it runs at W, and no
faster tensor core helps it. That is what the FLOP-only time model missed, why small models reach
a lower MFU, and what torch.compile's fusion buys.

Read top to bottom:

- ``Op``            one op: FLOPs and bytes per token, per pass; its intensity and its seconds
- ``chain``         an elementwise chain, eager (each op a kernel: every intermediate tensor is
                    written and read again) or fused (one kernel: its inputs read, its outputs
                    written once) -- ``fused`` stands for torch.compile's fusion, an approximation
                    (``FUSED_CHAINS`` names which chains fuse)
- ``block_ops``     a transformer's ops, layer by layer, and the logits (Llama's as torchtitan
                    runs it, GPT's as Megatron-LM does); float8's casts beside the converted GEMMs
- ``ridge_point``, ``memory_bound``  peak ÷ bandwidth, and which side of it an op sits
- ``optimizer_seconds``  AdamW's step, memory-bound (``ADAMW_BYTES``)
- ``roofline_seconds``  the seconds per pass of every op of a model for the tokens of a device:
                    max(FLOPs at the achieved rate, bytes at the HBM bandwidth), op by op

Units: FLOPs and bytes per token (exact: ``Fraction`` where a weight's bytes are shared by a
micro-batch's b·s tokens), seconds, FLOP/s, bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping

from placement_edu.errors import expect
from placement_edu.float8 import Float8, cast_bytes, linears
from placement_edu.models import TransformerSpec, every_kth

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = [
    "ADAMW_BYTES",
    "FUSED_CHAINS",
    "Kernels",
    "Op",
    "block_ops",
    "memory_bound",
    "optimizer_seconds",
    "ridge_point",
    "roofline_seconds",
]

#: 16-bit activations (bf16), fp32 (norm statistics, the loss), and float8.
BF16, FP32, FP8 = 2, 4, 1

#: Which elementwise chains torch.compile fuses into one kernel, as ``fused`` prices them (an
#: approximation: Inductor fuses what a graph allows; these are the chains of a Llama and a GPT
#: block it does fuse). Each chain then reads its inputs and writes its outputs once.
FUSED_CHAINS = (
    "RMSNorm: x.float(), pow(2), mean, rsqrt, multiply, type_as, multiply by the weight",
    "RoPE: q and k to fp32, the complex multiply, back to bf16; GQA's repeat of k and v",
    "SwiGLU: silu(w1·x) * (w3·x)",
    "the residual add with the norm that follows it",
    "float8: the amax, scale and cast of a GEMM input, into the op that produces it",
)


@dataclass(frozen=True)
class Op:
    """One op of a model for one token: FLOPs and bytes moved through device memory, per pass
    ("forward", "backward"), for all the layers it stands for (``count`` of them).

    ``kind``: "matmul" (a GEMM, the tensor cores), "attention" (SDPA, flash: its s² work on chip),
    "memory" (elementwise, norms, softmax, casts: the rest). ``float8``: a GEMM float8 converts
    (its FLOPs run at the FP8 peak). Bytes are Fractions: a weight read once per micro-batch is
    shared by its b·s tokens."""

    name: str
    kind: str
    flops: Mapping[str, int]
    bytes: Mapping[str, Fraction]
    count: int = 1
    float8: bool = False

    def intensity(self, phase: str = "forward") -> float:
        """Arithmetic intensity, FLOPs per byte moved (0 for an op that moves no bytes)."""
        moved = self.bytes.get(phase, 0)
        return float(self.flops.get(phase, 0) / moved) if moved else 0.0

    def seconds(self, phase: str, tokens: float, rate: float, bandwidth: float) -> float:
        """max(FLOPs / rate, bytes / bandwidth) for ``tokens`` tokens, all ``count`` layers."""
        flops = self.flops.get(phase, 0) * tokens * self.count
        moved = float(self.bytes.get(phase, 0)) * tokens * self.count
        return max(flops / rate, moved / bandwidth)


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """FLOPs per byte at which an op's compute and memory times are equal: peak ÷ bandwidth (an
    H100 SXM: 989e12 / 3.35e12 = 295.2). Below it an op is memory-bound."""
    expect(peak_flops > 0 and bandwidth > 0, "the ridge point needs FLOP/s and bytes/s > 0")
    return peak_flops / bandwidth


def memory_bound(op: Op, peak_flops: float, bandwidth: float, phase: str = "forward") -> bool:
    """Whether ``op`` sits below the ridge point in ``phase``: priced at the bandwidth."""
    return op.intensity(phase) < ridge_point(peak_flops, bandwidth)


#: Bytes per parameter one AdamW step moves with fp32 parameters and state, as
#: torch.optim.AdamW runs it (torch/optim/adam.py): "foreach" (``_multi_tensor_adam``, the default
#: torchtitan keeps: weight decay ``_foreach_mul_`` 2 accesses, ``_foreach_lerp_`` of m 3,
#: ``_foreach_mul_`` of v 2, ``_foreach_addcmul_`` 3, ``_foreach_sqrt`` 2, ``_foreach_div_`` 2,
#: ``_foreach_add_`` of eps 2, ``_foreach_addcdiv_`` 4: 20 fp32 accesses, 80 B); "fused"
#: (``fused=True``, one kernel: read p, g, m, v, write p, m, v: 28 B). Gradient clipping is not
#: counted.
ADAMW_BYTES: dict[str, int] = {"foreach": 80, "fused": 28}


def optimizer_seconds(elements: int, bandwidth: float, implementation: str = "foreach") -> float:
    """Seconds of one AdamW step over ``elements`` parameters a device updates, at ``bandwidth``
    (memory-bound: a few FLOPs per 80 bytes)."""
    expect(
        implementation in ADAMW_BYTES,
        f"the optimizer is one of {', '.join(ADAMW_BYTES)}, got {implementation!r}",
    )
    return elements * ADAMW_BYTES[implementation] / bandwidth


def _pass(forward: int | Fraction, backward: int | Fraction) -> dict[str, Fraction]:
    return {"forward": Fraction(forward), "backward": Fraction(backward)}


def memory_op(name: str, forward: int | Fraction, count: int, flops: int = 0) -> Op:
    """A memory-bound op moving ``forward`` bytes per token forward. Backward moves twice that (the
    gradient of each tensor read and written, and the saved input read again: an approximation,
    the same for every elementwise op)."""
    return Op(name, "memory", {"forward": flops, "backward": 2 * flops},
              _pass(forward, 2 * forward), count)  # fmt: skip


def chain(steps: tuple[tuple[int, int], ...], io: int, fused: bool) -> int:
    """Bytes per token of an elementwise chain: eager, every step is a kernel that reads and
    writes its tensors (``steps``: (bytes read, bytes written) each), the sum; fused, one kernel
    that reads the chain's inputs and writes its outputs once (``io``), its intermediates kept on
    chip."""
    return io if fused else sum(read + written for read, written in steps)


def rms_norm(h: int) -> tuple[tuple[int, int], ...]:
    """torchtitan's RMSNorm (torchtitan/models/norms.py at 9dec370), eager, per token of width h:
    ``x.float()``, ``pow(2)``, ``mean(-1)``, ``+ eps`` and ``rsqrt`` (one fp32 per token each),
    ``x * rsqrt``, ``.type_as(x)``, ``* weight``."""
    return ((BF16 * h, FP32 * h), (FP32 * h, FP32 * h), (FP32 * h, FP32), (FP32, FP32),
            (FP32, FP32), (FP32 * h + FP32, FP32 * h), (FP32 * h, BF16 * h),
            (BF16 * h, BF16 * h))  # fmt: skip


def matmul(name: str, k: int, n: int, tokens: int, count: int, float8: bool = False) -> Op:
    """A Linear of a k × n weight on ``tokens`` (b·s) tokens a call: 2·k·n FLOPs per token
    forward, 4·k·n backward (the input's gradient and the weight's); bytes, bf16: forward the
    input and output (2k + 2n a token) and the weight once a call, backward twice the input, the
    output gradient twice and the weight and its gradient once a call. Under float8 the same
    tensors as float8 (1 B; ``float8.cast_bytes`` prices the casts)."""
    e = FP8 if float8 else BF16
    weight = Fraction(k * n * e, tokens)
    forward = (k + n) * e + weight
    backward = 2 * (k + n) * e + 2 * weight
    return Op(name, "matmul", {"forward": 2 * k * n, "backward": 4 * k * n},
              _pass(forward, backward), count, float8)  # fmt: skip


@dataclass(frozen=True)
class Kernels:
    """How the ops run: ``fused`` (torch.compile's fusion of the elementwise chains,
    ``FUSED_CHAINS``) and ``float8`` (torchao's float8 training: ``float8.Float8``; None: bf16)."""

    fused: bool = False
    float8: Float8 | None = field(default=None)


def block_ops(model: TransformerSpec, kernels: Kernels = Kernels()) -> tuple[Op, ...]:
    """Every op of ``model`` for one token, per pass: L layers of its block and the logits.

    A Llama block as torchtitan 9dec370 runs it (torchtitan/models/llama/model.py): RMSNorm,
    wq/wk/wv, RoPE on q and k (fp32), GQA's repeat of k and v, SDPA, the output's
    ``transpose(1, 2).contiguous()``, wo, the residual add, RMSNorm, w1 and w3, ``silu(w1 x) *
    w3 x``, w2, the residual add. A GPT block as Megatron-LM runs it with its fused kernels:
    LayerNorm, QKV, attention, the projection, bias-dropout-add, LayerNorm, the MLP's two GEMMs
    with a bias-GeLU between, bias-dropout-add. Eager attention's softmax (and GPT's dropout) over
    the b·a·s² scores (``SOFTMAX_BYTES``, ``EAGER_ATTENTION_BYTES``) moves bytes a score; flash
    keeps them on chip. The logits: the final norm, the output GEMM (never float8: torchtitan's
    filter), and the loss in fp32 (``pred.float()`` and cross-entropy: read and write V fp32
    values a token, twice, and the cast)."""
    L, h, f, kv, V = model.layers, model.hidden, model.ffn, model.kv_width, model.vocab
    T, fused, f8 = model.micro_batch * model.seq, kernels.fused, kernels.float8
    converted = f8 is not None
    ops: list[Op] = []
    if model.llama:
        norm = chain(rms_norm(h), 2 * BF16 * h, fused)
        qk = h + kv  # RoPE turns q and k: to fp32, the complex multiply, back to bf16
        rope = chain(((BF16 * qk, FP32 * qk), (FP32 * qk, FP32 * qk), (FP32 * qk, BF16 * qk)),
                     2 * BF16 * qk, fused)  # fmt: skip
        repeat = 2 * (BF16 * kv + BF16 * h)  # GQA: k and v copied out to every query head
        swiglu = chain(((BF16 * f, BF16 * f), (2 * BF16 * f, BF16 * f)), 3 * BF16 * f, fused)
        residual = BF16 * 3 * h  # read x and the branch, write the sum
        ops += [
            memory_op("RMSNorm (attention)", norm, L),
            memory_op("RoPE and GQA repeat", rope + repeat, L),
            memory_op("attention transpose", 2 * BF16 * h, L),
            memory_op("residual add + RMSNorm (ffn)", residual + norm - (
                BF16 * h if fused else 0), L),
            memory_op("SwiGLU silu * mul", swiglu, L),
            memory_op("residual add", residual, L),
        ]  # fmt: skip
    else:
        layer_norm = 2 * BF16 * h  # one kernel, eager or not (torch.nn.LayerNorm, Apex's)
        # dropout (read 2, write 2 and a 1-byte mask), the add (read 2 + 2, write 2); fused
        # (Megatron's bias_dropout_add): read the branch and the residual, write the sum and mask
        dropout_add = chain(((BF16 * h, BF16 * h + h), (2 * BF16 * h, BF16 * h)), 7 * h, fused)
        gelu = 2 * BF16 * f  # one kernel (Megatron's bias_gelu), eager or not
        ops += [
            memory_op("LayerNorm", layer_norm, 2 * L),
            memory_op("bias-dropout-add", dropout_add, 2 * L),
            memory_op("bias-GeLU", gelu, L),
        ]
    for name, k, n in linears(model):
        ops.append(matmul(name, k, n, T, L, converted))
        if f8 is not None:
            casts = cast_bytes(f8, k, n, T, fused)
            ops.append(Op(f"{name} float8 casts", "memory", {}, casts, L))
    ops.append(attention_op(model))
    eager = eager_attention_op(model)
    if eager is not None:
        ops.append(eager)
    ops += [
        memory_op(
            "final norm", chain(rms_norm(h), 4 * h, fused) if model.llama else 2 * BF16 * h, 1
        ),
        matmul("output", h, V, T, 1),
        # the logits cast to fp32 (read 2V, write 4V) and cross-entropy's log-softmax (read 4V,
        # write 4V), outside the compiled blocks in torchtitan: never fused
        memory_op("loss (fp32 logits)", (BF16 + FP32 + FP32 + FP32) * V, 1),
    ]
    return tuple(ops)


def attention_op(model: TransformerSpec) -> Op:
    """Attention's two s² matmuls for one token (``timing.attention_flops_per_token``'s count: 4·h·s
    forward, twice that backward; under the causal count, ``TransformerSpec.ATTENTION_COUNTS``,
    half), moving q, k, v and the output (bf16, after
    GQA's repeat) forward and those and their gradients backward: compute-bound at any s worth
    the name (intensity s/2)."""
    h, s, L = model.hidden, model.seq, model.layers
    s = int(s * TransformerSpec.ATTENTION_COUNTS[model.attention_count])  # the keys a query sees
    return Op("attention (SDPA)", "attention", {"forward": 4 * h * s, "backward": 8 * h * s},
              _pass(4 * BF16 * h, 8 * BF16 * h), L)  # fmt: skip


#: Bytes each of eager attention's b·a·s² scores moves through device memory outside the
#: matmuls, per pass, with 2-byte (fp16/bf16) activations, as Megatron-LM computes attention
#: (megatron/model/transformer.py, ParallelAttention.forward at commit fda81a21, May 2021:
#: ``torch.baddbmm`` writes the scores, ``FusedScaleMaskSoftmax`` -- one fused kernel up to
#: s = 2048 -- reads them and writes the probabilities, ``torch.nn.Dropout`` reads those and
#: writes its output and a 1-byte mask, ``torch.bmm`` multiplies by V). Forward: the softmax
#: 2 + 2, the dropout 2 + 2 + 1 = 9.
#: Backward: the dropout's gradient reads the incoming 2 and the mask 1 and writes 2, the
#: softmax's reads that 2 and its saved output 2 and writes 2 = 11. The matmuls' own reads and
#: writes of the scores are left in their FLOPs. Dao et al. 2022 ("FlashAttention", §2.2,
#: Algorithm 0): standard attention materializes S and P in HBM, and its softmax, masking and
#: dropout are memory-bound; flash attention keeps them on chip: nothing to price.
EAGER_ATTENTION_BYTES: dict[str, int] = {"forward": 9, "backward": 11}
#: The same without dropout (a Llama block): the softmax alone, forward 2 + 2, backward 2 + 2 + 2.
SOFTMAX_BYTES: dict[str, int] = {"forward": 4, "backward": 6}


def eager_attention_op(model: TransformerSpec) -> Op | None:
    """Eager attention's softmax (and dropout) over a token's a·s scores in each layer, None under
    flash attention."""
    if model.attention != "eager":
        return None
    moved = SOFTMAX_BYTES if model.llama else EAGER_ATTENTION_BYTES
    scores = model.heads * model.seq
    moves = _pass(moved["forward"] * scores, moved["backward"] * scores)
    return Op("softmax (eager attention)", "memory", {}, moves, model.layers)


def replayed(op: Op, model: TransformerSpec, recompute: str) -> Fraction:
    """The share of ``op``'s forward that recomputation replays in backward: every op under "full"
    (torchtitan's layer:K: the checkpointed layers' share); under "selective" the eager softmax
    (Korthikanti et al. 2022, §4.2) and the memory-bound ops, which torchtitan's op policy
    recomputes too (its ``_save_list`` saves only the mms, SDPA and amax: ``PREFER_RECOMPUTE``
    for every other op); the logits never. Under torchtitan-op those memory-bound ops too, and
    of the matmuls and attention the ones its policy recomputes
    (``TransformerSpec.torchtitan_op_recomputed``: a Llama's wk, wo and w3, a GPT's four, eager
    attention's s² matmuls)."""
    if op.count == 1 or recompute == "none":
        return Fraction(0)
    every = every_kth(recompute)
    if every:
        return Fraction(model.layers // every, model.layers)
    if recompute == "full":
        return Fraction(1)
    if recompute == "torchtitan-op" and op.kind != "memory":
        name = "attention" if op.kind == "attention" else op.name
        return Fraction(int(name in model.torchtitan_op_recomputed()))
    return Fraction(0) if op.kind == "matmul" else Fraction(1)


def roofline_seconds(
    model: TransformerSpec,
    tokens: float,
    flops: float,
    bandwidth: float,
    recompute: str = "none",
    kernels: Kernels = Kernels(),
    fp8_ratio: float = 2.0,
) -> dict[str, float]:
    """Seconds per pass ("forward", "backward", "step") of ``tokens`` tokens through ``model`` on
    one device: each op's max(FLOPs / rate, bytes / ``bandwidth``) (``Op.seconds``), the rate
    ``flops`` (achieved FLOP/s, bf16) or, for a float8 GEMM, ``fp8_ratio`` × it (the FP8 peak over
    the bf16 peak: 2 on an H100). Recomputation replays its share of each op's forward in
    backward (``replayed``). The optimizer step is not an op of the model: 0 here."""
    expect(bandwidth > 0 and flops > 0, "the roofline needs FLOP/s and a bandwidth > 0")
    seconds = {"forward": 0.0, "backward": 0.0, "step": 0.0}
    for op in block_ops(model, kernels):
        rate = flops * fp8_ratio if op.float8 else flops
        forward = op.seconds("forward", tokens, rate, bandwidth)
        seconds["forward"] += forward
        seconds["backward"] += op.seconds("backward", tokens, rate, bandwidth)
        seconds["backward"] += float(replayed(op, model, recompute)) * forward
    return seconds
