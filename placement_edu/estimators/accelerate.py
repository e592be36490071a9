"""Accelerate's ``accelerate estimate-memory``, as its source computes and prints it: the largest
of four training phases, not their sum.

Accelerate prints powers of 1024 labelled "KB/MB/GB"; every ``bytes`` here is exact.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from placement_edu.errors import expect, positive_int
from placement_edu.estimators.estimate import Estimate, Term

#: ``accelerate estimate-memory``'s dtypes: the divisor of the fp32 size for the "Total Size"
#: column.
ACCELERATE_DTYPES: Mapping[str, int] = {"float32": 1, "float16": 2, "int8": 4, "int4": 8}


def accelerate_convert_bytes(size: float) -> str:
    """accelerate.utils.convert_bytes: powers of 1024 labelled KB, MB, GB, rounded with
    round(x, 2)."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"


def accelerate_training(psi: int, dtype: str = "float32", buffer_bytes: int = 0) -> Estimate:
    """The "Training using Adam" column of ``accelerate estimate-memory``
    (src/accelerate/commands/estimate.py, ``estimate_training_usage``), in bytes: the LARGEST of
    four phases, not their sum. With B = the model's fp32 size (4Ψ + ``buffer_bytes``: the empty
    model is built in float32 and its buffers, e.g. BERT's int64 position ids, are counted too):

    - float32: model B, gradients B, optimizer 2B, step 4B → 4B = 16Ψ;
    - float16 (mixed precision): model B (fp32 weights), gradients 1.5B (fp32 + fp16), optimizer 2B,
      step 2B → 2B = 8Ψ;
    - int8, int4: not estimated ("N/A"): no terms.
    """
    psi = positive_int("params", psi)
    expect(
        dtype in ACCELERATE_DTYPES,
        f"unknown Accelerate dtype {dtype!r}; known: {', '.join(ACCELERATE_DTYPES)}",
    )
    B = 4 * psi + buffer_bytes
    if dtype == "float32":
        phases = [
            Term("model (fp32 weights)", B, "phase 'model': the fp32 weights, B", "params"),
            Term("gradients (fp32)", B, "phase 'gradients': B", "grads"),
            Term("optimizer (Adam m + v)", 2 * B, "phase 'optimizer': 2B", "optimizer"),
            Term(
                "step (4 × model size)",
                4 * B,
                "phase 'step': weights + gradients + m + v, 4B",
                "step",
            ),
        ]
    elif dtype == "float16":
        phases = [
            Term("model (fp32 weights)", B, "phase 'model': the fp32 weights, B", "params"),
            Term(
                "gradients (fp32 + fp16)",
                B + B // 2,
                "phase 'gradients': 1.5B, 'weight gradient + computation (GEMM)'",
                "grads",
            ),
            Term("optimizer (Adam m + v)", 2 * B, "phase 'optimizer': 2B", "optimizer"),
            Term("step (= optimizer)", 2 * B, "phase 'step': the optimizer's 2B", "step"),
        ]
    else:
        phases = []
    total = max((x.bytes for x in phases), default=None)
    return Estimate(
        "Accelerate estimate-memory ('Training using Adam')",
        f"{dtype}, largest phase",
        tuple(phases),
        "N/A" if total is None else accelerate_convert_bytes(float(total)),
        'powers of 1024, printed as "KB/MB/GB"',
        rule="max",
    )


def accelerate_table(
    psi: int,
    buffer_bytes: int = 0,
    largest_layer: int | None = None,
    dtypes: Sequence[str] = tuple(ACCELERATE_DTYPES),
) -> tuple[tuple[str, str, str, str], ...]:
    """The rows of ``accelerate estimate-memory``: (dtype, Largest Layer, Total Size, Training using
    Adam), as it prints them. ``largest_layer`` is in parameters (fp32, 4 B each); None prints
    "?"."""
    B = 4 * positive_int("params", psi) + buffer_bytes
    rows = []
    for dtype in dtypes:
        divisor = ACCELERATE_DTYPES[dtype]
        layer = (
            "?" if largest_layer is None else accelerate_convert_bytes(4 * largest_layer / divisor)
        )
        rows.append(
            (
                dtype,
                layer,
                accelerate_convert_bytes(B / divisor),
                accelerate_training(psi, dtype, buffer_bytes).printed,
            )
        )
    return tuple(rows)
