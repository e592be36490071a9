"""The root's tasks that had no function of their own: ``price`` one configuration, what
``placement-edu time`` prints (``pricing.price_configuration``), through the one door; and ``fit``,
will one rank's step of a real model fit (``fitting.fit_peak``, what ``placement-edu fit`` prints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Unpack

from placement_edu.configuration import Priced
from placement_edu.fitting import fit_peak
from placement_edu.mesh import Mesh
from placement_edu.models import TransformerSpec
from placement_edu.precision import Precision
from placement_edu.pricing import PriceOptions, price_configuration
from placement_edu.setting import Setting, resolve
from placement_edu.strategies import Strategy
from placement_edu.timing import Hardware

#: Will one rank's step fit? The step of a real model (GPT-2, Llama) under FSDP2 on ``devices``,
#: derived from its activation profile, event by event: ``fitting.fit_peak``.
fit = fit_peak


def price(
    strategy: str | Strategy | Setting,
    model: TransformerSpec | None = None,
    mesh: Mesh | Mapping[str, int] | str | None = None,
    global_batch: int = 0,
    hardware: str | Hardware = "h100-nvlink-ib",
    precision: str | Precision = "mixed_adam",
    *,
    recompute: str = "none",
    **options: Unpack[PriceOptions],
) -> Priced:
    """One step of ``strategy`` for ``model`` on ``mesh`` (e.g. ``"data=8,tensor=8"``) with
    ``global_batch`` sequences: its time on rank 0, where the time goes, FLOP/s, MFU and the peak
    bytes, as ``placement-edu time`` prints it. ``hardware`` and ``precision``: a preset's name
    or the value itself. ``strategy`` may be a ``Setting`` (``resolve``), which brings the rest but
    the batch. The other keywords are ``time``'s flags, ``pricing.price_configuration``'s
    (``PriceOptions``), with its defaults."""
    setting = resolve(strategy, model, mesh, precision, hardware, recompute=recompute)
    return price_configuration(setting, global_batch=global_batch, **options)
