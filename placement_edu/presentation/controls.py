"""The controls the widgets share, each made one way: a slider over a few fixed choices, the model's
size Ψ and the device count N."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # imported where a widget is made: the package imports without ipywidgets
    from ipywidgets import FloatLogSlider, IntSlider, SelectionSlider


def choice_slider(options: Sequence[Any], value: Any, description: str) -> SelectionSlider:
    """A slider over ``options`` that answers when let go (one update a move, not one per choice
    passed), its description shown in full."""
    import ipywidgets as w

    return w.SelectionSlider(
        options=options,
        value=value,
        description=description,
        continuous_update=False,
        style={"description_width": "initial"},
    )


def log_slider(
    value: float, lowest: float, highest: float, description: str, digits: int = 3
) -> FloatLogSlider:
    """A quantity on a log scale from 10^``lowest`` to 10^``highest``, shown to ``digits``
    significant digits; it answers when let go."""
    import ipywidgets as w

    return w.FloatLogSlider(
        value=value,
        base=10,
        min=lowest,
        max=highest,
        step=0.01,
        description=description,
        readout_format=f".{digits}g",
        continuous_update=False,
    )


def psi_slider(psi: float, lowest_exponent: int = 6, digits: int = 3) -> FloatLogSlider:
    """Ψ, the model's parameter count, on a log scale from 10^``lowest_exponent`` to 10^12."""
    return log_slider(psi, lowest_exponent, 12, "Ψ (params)", digits)


def devices_slider(
    options: Sequence[int], devices: int, description: str = "N (devices)"
) -> SelectionSlider:
    """N, the device count, over ``options``; it answers when let go."""
    import ipywidgets as w

    return w.SelectionSlider(
        options=options, value=devices, description=description, continuous_update=False
    )


def count_slider(value: int, low: int, high: int, description: str) -> IntSlider:
    """A count from ``low`` to ``high`` (micro-batches, stages), its description shown in full;
    it answers when let go."""
    import ipywidgets as w

    return w.IntSlider(
        value=value,
        min=low,
        max=high,
        description=description,
        continuous_update=False,
        style={"description_width": "initial"},
    )
