"""The single-process reference: the same model, data and seed on one device, the whole global
batch at once, the same element-wise Adam. Parameters after every step are what each rank of a
distributed run is compared with (SPEC §5, §7)."""

from __future__ import annotations

from typing import cast

import torch

from placement_edu.runtime import flat
from placement_edu.runtime.adam import Adam
from placement_edu.runtime.toy import (
    Params,
    TinyMLP,
    ToyModel,
    init_params,
    loss_fn,
    make_batch,
    mlp_forward,
    transformer_forward,
)


def reference_run(
    module: ToyModel,
    steps: int,
    global_batch: int,
    seed: int,
    dtype: torch.dtype,
    adam: Adam,
) -> list[Params]:
    """Parameters after each of ``steps`` steps (index k: after step k)."""
    shapes = [(n, tuple(p.shape)) for n, p in module.named_parameters()]
    params = flat.flatten(init_params(module, seed, dtype), shapes).requires_grad_()
    m, v = torch.zeros_like(params), torch.zeros_like(params)
    history = []
    for step in range(steps):
        x, y = make_batch(step, module, global_batch, seed, dtype)
        p = flat.views(params, shapes)
        out = (
            mlp_forward(p, x, range(len(module.layers)))
            if isinstance(module, TinyMLP)
            else transformer_forward(p, x, module.heads)
        )
        params.grad = None
        loss_fn(out, y).backward()
        # backward() has just filled the gradient (a checker reads it as the None set above).
        grad = cast(torch.Tensor, params.grad)
        with torch.no_grad():
            params -= adam.delta(grad, m, v, step + 1)
        history.append({n: t.detach().clone() for n, t in flat.views(params, shapes).items()})
    return history
