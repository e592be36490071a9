"""Flat parameter buffers: ZeRO's sharding rule (SPEC §2).

All of a device's parameter tensors are laid end to end in one buffer; sharding pads that buffer to
a multiple of N and gives data rank i the equal slice ``[i*k, (i+1)*k)``. The padding is real: it is
stored in the shards and moved by every collective, and the runtime reports it.
"""

from __future__ import annotations

import math

import torch

Shapes = list[tuple[str, tuple[int, ...]]]


def padded(numel: int, n: int) -> int:
    """``numel`` rounded up to a multiple of ``n``."""
    return -(-numel // n) * n


def owned(numel: int, n: int, index: int) -> slice:
    """The slice of the padded flat buffer that data rank ``index`` of ``n`` owns."""
    k = padded(numel, n) // n
    return slice(index * k, (index + 1) * k)


def flatten(
    tensors: dict[str, torch.Tensor], shapes: Shapes, length: int | None = None
) -> torch.Tensor:
    """Concatenate ``tensors`` in ``shapes`` order into one buffer of ``length`` (zero padding)."""
    body = torch.cat([tensors[name].reshape(-1) for name, _ in shapes])
    total = length or body.numel()
    out = torch.zeros(total, dtype=body.dtype, device=body.device)
    out[: body.numel()] = body
    return out


def views(flat: torch.Tensor, shapes: Shapes) -> dict[str, torch.Tensor]:
    """Named views into ``flat``: no copy, so gradients of the views land in ``flat.grad``."""
    out, offset = {}, 0
    for name, shape in shapes:
        n = math.prod(shape)
        out[name] = flat[offset : offset + n].view(shape)
        offset += n
    return out


def numel(shapes: Shapes) -> int:
    return sum(math.prod(s) for _, s in shapes)


def take(buffer: torch.Tensor, part: slice) -> torch.Tensor:
    """A copy of ``buffer[part]``, zero-padded where ``part`` runs past the end (the padding)."""
    out = torch.zeros(part.stop - part.start, dtype=buffer.dtype, device=buffer.device)
    body = buffer[part]
    out[: body.numel()] = body
    return out


def put(buffer: torch.Tensor, part: slice, values: torch.Tensor) -> None:
    """Write ``values`` into ``buffer[part]``, dropping what falls in the padding."""
    body = buffer[part]
    body.copy_(values[: body.numel()])


def pad(t: torch.Tensor, length: int) -> torch.Tensor:
    """``t`` itself when it already has ``length`` elements, else a zero-padded copy."""
    if t.numel() == length:
        return t
    out = torch.zeros(length, dtype=t.dtype, device=t.device)
    out[: t.numel()] = t
    return out
