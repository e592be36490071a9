"""A user's HF model, built from a local ``config.json`` with ``transformers`` (the optional ``hf``
extra; nothing is downloaded): HF's own ``GPT2Model`` / ``LlamaModel`` and its head, so its memory
is HF's memory, behind the interface of the reference ``CausalLM`` (``blocks``, ``lm_head``,
``loss``).

The body runs HF's own forward (its masks, RoPE, attention implementation); the loss is HF's
``ForCausalLMLoss``, as ``GPT2LMHeadModel`` / ``LlamaForCausalLM`` compute it (the reference
``CausalLMLoss``). ``recompute="full"`` is HF's ``gradient_checkpointing_enable`` (non-reentrant);
``"selective"`` and ``"torchtitan-op"`` pass it the reference policy (``selective_contexts``).
Parameter names are HF's: ``transformer.h.0.ln_1.weight``, ``model.layers.0.mlp.up_proj.weight``.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from placement_edu.architectures import Architecture
from placement_edu.runtime.measurement.reference_models import (
    CausalLM,
    CausalLMLoss,
    SELECTIVE,
    build,
    selective_contexts,
)


class HFCausalLM(CausalLM):
    def __init__(
        self, arch: Architecture, attention: str = "eager", recompute: str = "none"
    ) -> None:
        try:
            from transformers import AutoConfig, AutoModelForCausalLM
        except ImportError:
            raise ImportError(
                "building a model from an HF config.json needs transformers: "
                "pip install 'placement-edu[hf]'"
            ) from None
        nn.Module.__init__(self)
        self.arch, self.recompute = arch, recompute
        config = AutoConfig.from_pretrained(arch.config, local_files_only=True)
        setattr(
            config, "n_layer" if arch.kind == "gpt2" else "num_hidden_layers", arch.layers
        )  # a profile's 2
        # The dtype is ours, not the config's ``torch_dtype``: fp32 storage (bf16 compute comes from
        # FSDP2's policy; a bf16 profile sets torch's default dtype).
        hf = AutoModelForCausalLM.from_config(
            config, attn_implementation=attention, dtype=torch.get_default_dtype()
        )
        if recompute != "none":  # selective: HF's checkpoint given the reference policy
            kwargs: dict[str, object] = {"use_reentrant": False}
            if recompute in SELECTIVE:
                kwargs["context_fn"] = partial(selective_contexts, recompute)
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        hf.train()
        if arch.kind == "gpt2":
            self.transformer = hf.transformer
        else:
            self.model = hf.model
        self.lm_head = hf.lm_head
        self.loss = CausalLMLoss(arch.vocab)

    def hidden_states(self, ids: torch.Tensor) -> torch.Tensor:
        return self.body(input_ids=ids, use_cache=False).last_hidden_state


def build_model(arch: Architecture, attention: str = "eager", recompute: str = "none") -> CausalLM:
    """HF's own module when ``arch`` was read from a ``config.json``, else the plain-torch
    reference."""
    return (
        HFCausalLM(arch, attention, recompute) if arch.config else build(arch, attention, recompute)
    )
