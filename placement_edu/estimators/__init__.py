"""Other tools' memory estimators, reproduced as named conventions, and reconciled with ours.

Users compare our figures with what DeepSpeed, Megatron-LM and Accelerate print. Each tool has its
own module here (``deepspeed.py``, ``megatron.py``, ``accelerate.py``) that reproduces its formula
as its source computes it, split into named terms, and returns an ``Estimate`` (``estimate.py``)
holding those terms and the number exactly as the tool prints it. ``reconcile.py`` then lines the
terms up with our own derivation (``report.analyze``), kind by kind, so that every difference is a
named term -- an fp32 gradient copy, a 1.5 buffer factor, a model-load copy, a maximum over phases
instead of a sum -- and never a mystery (SPEC §8).

Units: every ``bytes`` here is exact (an int or a Fraction). What the tools print is not always
what it says: DeepSpeed prints GiB (2^30 bytes) labelled "GB", Megatron MiB (2^20) labelled "MB",
Accelerate powers of 1024 labelled "KB/MB/GB". ``Estimate.unit`` says which.
"""

from __future__ import annotations

from placement_edu.estimators.accelerate import (
    ACCELERATE_DTYPES,
    accelerate_convert_bytes,
    accelerate_table,
    accelerate_training,
)
from placement_edu.estimators.deepspeed import (
    DEEPSPEED_PLACEMENTS,
    ZERO2_GPU_FORMULAS,
    DeepSpeedRow,
    deepspeed_printout,
    deepspeed_table,
    deepspeed_zero2,
    deepspeed_zero3,
)
from placement_edu.estimators.estimate import KINDS, Bytes, Estimate, Term
from placement_edu.estimators.megatron import megatron_theoretical_memory
from placement_edu.estimators.reconcile import Line, Reconciliation, ours, reconcile

# Units, as this module offered them before it became a package (callers import them from here).
from placement_edu.units import GiB as GiB
from placement_edu.units import MiB as MiB

#: The public names (a notebook imports only these).
__all__ = [
    "ACCELERATE_DTYPES",
    "Bytes",
    "DEEPSPEED_PLACEMENTS",
    "DeepSpeedRow",
    "Estimate",
    "KINDS",
    "Line",
    "Reconciliation",
    "Term",
    "ZERO2_GPU_FORMULAS",
    "accelerate_convert_bytes",
    "accelerate_table",
    "accelerate_training",
    "deepspeed_printout",
    "deepspeed_table",
    "deepspeed_zero2",
    "deepspeed_zero3",
    "megatron_theoretical_memory",
    "ours",
    "reconcile",
]
