"""The root's task that had no function of its own: ``price`` one configuration, what
``placement-edu time`` prints (``pricing.price_configuration``, its names resolved here).
"""

from __future__ import annotations

from collections.abc import Mapping

from placement_edu.configuration import Priced
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import TransformerSpec
from placement_edu.precision import Precision, get_precision
from placement_edu.pricing import price_configuration
from placement_edu.timing import Hardware, get_hardware


def price(
    strategy: str,
    model: TransformerSpec,
    mesh: Mesh | Mapping[str, int] | str,
    global_batch: int,
    hardware: str | Hardware = "h100-nvlink-ib",
    precision: str | Precision = "mixed_adam",
    *,
    recompute: str = "none",
    sequence_parallel: bool = False,
    schedule: str = "1f1b",
    overlap: str = "per_pass",
    efficiency: float = 1.0,
    context_attention: str = "ring",
    balanced_stages: bool = False,
) -> Priced:
    """One step of ``strategy`` for ``model`` on ``mesh`` (e.g. ``"data=8,tensor=8"``) with
    ``global_batch`` sequences: its time on rank 0, where the time goes, FLOP/s, MFU and the peak
    bytes, as ``placement-edu time`` prints it. ``hardware`` and ``precision``: a preset's name
    or the value itself; the keywords are ``time``'s flags (``pricing.price_configuration``)."""
    return price_configuration(
        model,
        as_mesh(mesh),
        strategy,
        global_batch,
        get_hardware(hardware),
        get_precision(precision),
        recompute,
        sequence_parallel,
        schedule,
        overlap,
        efficiency,
        context_attention,
        balanced_stages,
    )
