"""An activation profile measured from the module: one forward and backward under ``FakeTensorMode``
(no memory is allocated: an 8B model's block profiles in well under a second on a CPU).

What is measured, on a two-block copy of the model (same widths, vocabulary, b, s):

- **kept for backward**, with ``torch.autograd.graph.saved_tensors_hooks``: every tensor autograd
  saves, once per storage (a tensor saved twice counts once), leaving out parameters and the batch
  (ids, labels: the trackers call them inputs). Each storage is charged to the innermost module that
  saved it first, so a tensor made outside the blocks and saved by every block (GPT-2's causal mask,
  Llama's RoPE cos/sin) is charged once, to the first block, and lands in ``outside``. Under full
  recomputation (``torch.utils.checkpoint`` per block, non-reentrant) nothing inside a block is
  saved: the checkpoint saves the block's inputs just before entering it, charged to that block.
  Under selective recomputation the checkpoint also caches the outputs of the ops its policy saves
  (``reference_models.SELECTIVE``) -- in a dispatch mode, not through autograd's hooks:
  ``_PolicySaves`` sees the same ops and charges those outputs to the module that made them.
  ``block`` is what the second block keeps; ``outside`` is the rest: embeddings, final norm, head,
  the loss's fp32 log-softmax -- and what the blocks share.
- **the moments of the step**, with PyTorch's ``MemTracker`` (``torch.distributed._tools``): for the
  last block's forward, the head and loss, the start of backward (the logits' gradient), each
  block's backward and the embedding's backward, the bytes of activations and temporaries live at
  that module's peak (``Activation`` + ``Temp``) and the gradient bytes made so far (``Grad``, in
  the compute dtype). ``placement_edu.peak`` places these moments in an L-block step.

The profile is plain data (``placement_edu.peak.ActivationProfile``): the derivation never imports
torch.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack, nullcontext

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType, _ModState
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from placement_edu.architectures import Architecture
from placement_edu.peak import ActivationProfile, Moment
from placement_edu.step_case import StepCase
from placement_edu.runtime.measurement.hf_models import build_model
from placement_edu.runtime.measurement.reference_models import (
    SELECTIVE,
    CausalLM,
    CheckpointedCore,
    batch,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
#: Modules inside a block whose saves tensor parallelism leaves whole: norms, the column-parallel
#: layers (they save their replicated input), the dropout after the row-parallel layer. Everything
#: else a block saves lies between a column- and a row-parallel layer, and is split over t.
TP_WHOLE = (
    "ln_1",
    "ln_2",
    "attn.c_attn",
    "mlp.c_fc",
    "attn.resid_dropout",
    "mlp.dropout",
    "input_layernorm",
    "post_attention_layernorm",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    # Under selective recomputation the row-parallel layers' outputs (whole after their all-reduce);
    # the column-parallel layers' outputs are split.
    "attn.c_proj output",
    "mlp.c_proj output",
    "self_attn.o_proj output",
    "mlp.down_proj output",
)
#: Categories of ``MemTracker`` that are neither model state nor the batch.
LIVE = (_MemRefType.ACT, _MemRefType.TEMP)


def _storage(t: torch.Tensor) -> torch.UntypedStorage:
    return t.untyped_storage()


class _Saved:
    """Saved-tensor hooks that charge each storage to the innermost running module, first saver
    wins. A save made by the model itself between blocks -- ``torch.utils.checkpoint`` saving a
    block's inputs before entering it -- is charged to the block about to run. Under full
    recomputation a block's inputs nested in a tuple (Llama's RoPE cos and sin) are not saved by
    autograd but held for the replay by the checkpoint: ``checkpointed`` charges them too."""

    def __init__(self, model: CausalLM, excluded: set[int], checkpointed: bool = False) -> None:
        self.stack: list[str] = []
        self.kept: dict[int, tuple[int, str, str]] = {}  # storage -> (bytes, dtype, module)
        self.excluded = excluded
        blocks = {id(b) for b in model.blocks}
        self.pending = [name for name, m in model.named_modules() if id(m) in blocks]
        self.handles = []
        for name, module in model.named_modules():
            self.handles.append(
                module.register_forward_pre_hook(lambda m, a, name=name: self.stack.append(name))
            )
            self.handles.append(module.register_forward_hook(self._leave))
        if checkpointed:
            for block in model.blocks:
                self.handles.append(block.register_forward_pre_hook(self._inputs))
        for module in model.modules():  # Megatron's selective: the core attention's q, k, v
            if isinstance(module, CheckpointedCore):
                self.handles.append(module.register_forward_pre_hook(self._inputs))

    def _inputs(self, mod: nn.Module, args: tuple) -> None:
        if not torch.is_grad_enabled():
            return  # the replay in backward keeps nothing new
        for a in args:
            for t in a if isinstance(a, tuple) else (a,):
                if isinstance(t, torch.Tensor):
                    self.keep(t)

    def _leave(self, mod: nn.Module, args: tuple, out: object) -> None:
        name = self.stack.pop()
        if self.pending and name == self.pending[0]:
            self.pending.pop(0)

    def keep(self, t: torch.Tensor, module: str | None = None) -> torch.Tensor:
        st = _storage(t)
        if st._cdata not in self.kept and st._cdata not in self.excluded:
            if module is None:
                module = self.stack[-1] if self.stack else ""
            if module == "" and self.pending:
                module = self.pending[0]
            self.kept[st._cdata] = (st.nbytes(), str(t.dtype).removeprefix("torch."), module)
        return t

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


class _PolicySaves(TorchDispatchMode):
    """Entered around the forward under selective recomputation: charges the outputs of the ops
    the policy saves (``reference_models.SELECTIVE[recompute]``, fresh for each block, as the
    checkpoint makes it) inside a block -- what the checkpoint's caching mode keeps -- to the
    module that made them, as "<module> output". Outside the forward (the replay in backward) it
    is not entered."""

    def __init__(self, saved: _Saved, blocks: tuple[str, ...], recompute: str) -> None:
        super().__init__()
        self.saved, self.blocks, self.make = saved, blocks, SELECTIVE[recompute]
        self.block: str | None = None
        self.saves = self.make()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        module = self.saved.stack[-1] if self.saved.stack else ""
        block = next((b for b in self.blocks if _in_block(module, b) is not None), None)
        if block is None:
            return out
        if block != self.block:
            self.block, self.saves = block, self.make()
        if self.saves(func):
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.saved.keep(t, f"{module} output")
        return out


def _live(snapshot: dict) -> tuple[int, int]:
    """(activation + temporary bytes, gradient bytes) of one ``MemTracker`` snapshot."""
    dev: dict[object, int] = next(iter(snapshot.values()), {})  # {memory kind: bytes}
    return sum(dev.get(k, 0) for k in LIVE), dev.get(_MemRefType.GRAD, 0)


def _peak(tracker: MemTracker, module: nn.Module, state: _ModState) -> tuple[int, int]:
    snaps = tracker.memory_tracking[module].snapshots.get(state, [])
    return max((_live(s) for s in snaps), key=lambda v: v[0] + v[1], default=(0, 0))


def measure(case: StepCase) -> ActivationProfile:
    """Profile ``case``'s model at its micro-batch b and sequence s, computing in its dtype
    ("fp32", or "bf16" as FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16)`` computes), with its
    attention and recomputation."""
    recompute = case.recompute
    two = case.model.with_(layers=2)
    default = torch.get_default_dtype()
    with FakeTensorMode(), ExitStack() as stack:
        torch.set_default_dtype(DTYPES[case.compute])
        stack.callback(torch.set_default_dtype, default)
        model = build_model(two, case.attention, recompute)
        ids, labels = batch(two, case.micro_batch, case.seq)
        excluded = {
            _storage(t)._cdata for t in (*model.parameters(), *model.buffers(), ids, labels)
        }
        checkpointed = recompute not in ("none", "megatron-selective")
        saved = _Saved(model, excluded, checkpointed=checkpointed)
        stack.callback(saved.remove)
        policy_saves: AbstractContextManager[object] = (
            _PolicySaves(saved, _block_names(two), recompute)
            if recompute in SELECTIVE
            else nullcontext()
        )
        tracker = MemTracker()
        tracker.track_external(model)
        with tracker:
            with torch.autograd.graph.saved_tensors_hooks(saved.keep, lambda t: t), policy_saves:
                loss = model(ids, labels)
            after_forward = _live(tracker.get_tracker_snapshot())[0]
            loss.backward()
        moments = _moments(model, tracker)
        result = _storage(loss).nbytes()
        buffers = sum({_storage(b)._cdata: _storage(b).nbytes() for b in model.buffers()}.values())
    return _profile(case, saved.kept, after_forward, moments, result, buffers)


def _moments(model: CausalLM, tracker: MemTracker) -> tuple[Moment, ...]:
    """The measured moments of the two-block step, in step order (see ``Moment``)."""
    body, norm = model.body, model.final_norm
    b0, b1 = model.blocks
    block_grads = sum(p.numel() * p.element_size() for p in b1.parameters())
    out: list[Moment] = []

    def add(
        name: str,
        phase: str,
        module: nn.Module,
        state: _ModState,
        block: int | None = None,
        minus: int = 0,
    ) -> None:
        live, grads = _peak(tracker, module, state)
        out.append(Moment(name, phase, live, grads - minus, block))

    add("forward, last block", "forward", b1, _ModState.PEAK_FW, block=-1)
    for name, module in (("final norm", norm), ("head", model.lm_head), ("loss", model.loss)):
        add(f"forward, {name}", "forward", module, _ModState.PEAK_FW)
    for name, module in (
        ("loss (logits' gradient)", model.loss),
        ("head", model.lm_head),
        ("final norm", norm),
    ):
        add(f"backward, {name}", "backward", module, _ModState.PEAK_BW)
    add("backward, block", "backward", b1, _ModState.PEAK_BW, block=1)
    add("backward, first block", "backward", b0, _ModState.PEAK_BW, block=0, minus=block_grads)
    embeddings = ["wte", "wpe"] if model.arch.kind == "gpt2" else ["embed_tokens"]
    for name in embeddings:  # gradients of the blocks (all done by now) are not the root's
        add(
            f"backward, embedding ({name})",
            "backward",
            getattr(body, name),
            _ModState.PEAK_BW,
            minus=2 * block_grads,
        )
    return tuple(out)


def _block_names(arch: Architecture) -> tuple[str, str]:
    """The two blocks' module names in the profile's two-block model."""
    prefix = "transformer.h" if arch.kind == "gpt2" else "model.layers"
    return f"{prefix}.0", f"{prefix}.1"


def _in_block(module: str, prefix: str) -> str | None:
    """The module's name inside the block ``prefix`` ("" for the block itself), or None if outside
    it."""
    if module == prefix:
        return ""
    return module.removeprefix(prefix + ".") if module.startswith(prefix + ".") else None


def _profile(
    case: StepCase,
    kept: dict[int, tuple[int, str, str]],
    after_forward: int,
    moments: tuple[Moment, ...],
    result: int,
    buffers: int,
) -> ActivationProfile:
    """Sort the saved storages: block 1's are one block's; block 0's are one block's plus what the
    blocks share; the rest is outside the blocks."""
    first, second = _block_names(case.model)
    block = tp_split = 0
    by_module: dict[str, int] = {}
    by_dtype: dict[str, int] = {}
    for n, dtype, module in kept.values():
        inside = _in_block(module, second)
        if inside is not None:
            block += n
            tp_split += n if inside and inside not in TP_WHOLE else 0
            by_dtype[dtype] = by_dtype.get(dtype, 0) + n
            key = f"block.{inside}" if inside else "block"
        elif _in_block(module, first) is not None:
            continue  # counted below, as block + shared
        else:
            key = module or "(model)"
        by_module[key] = by_module.get(key, 0) + n
    total = sum(n for n, _, _ in kept.values())
    shared = total - 2 * block - sum(v for k, v in by_module.items() if not k.startswith("block"))
    if shared:
        by_module["shared by the blocks"] = shared
    return ActivationProfile(
        case.model.name or case.model.kind,
        case.micro_batch,
        case.seq,
        case.compute,
        case.attention,
        case.recompute,
        block=block,
        outside=total - 2 * block,
        block_by_dtype=dict(sorted(by_dtype.items())),
        by_module=dict(sorted(by_module.items(), key=lambda kv: -kv[1])),
        kept_after_forward=after_forward,
        moments=moments,
        result=result,
        buffers=buffers,
        block_tp_split=tp_split,
    )
