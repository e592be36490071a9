"""The controls the widgets share, each made one way: a slider over a few fixed choices, the model's
size Ψ and the device count N, a drop-down list, a row of toggle buttons and a check box. An
explorer makes its controls here and imports no ipywidgets itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:  # imported where a widget is made: the package imports without ipywidgets
    from ipywidgets import (
        Checkbox,
        Dropdown,
        FloatLogSlider,
        IntSlider,
        SelectionSlider,
        ToggleButtons,
    )


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


def toggles(options: Iterable[Any], value: Any, description: str) -> ToggleButtons:
    """One button per option (names -- a mapping's keys -- or (label, value) pairs), the chosen
    one pressed: a few choices all in view."""
    import ipywidgets as w

    return w.ToggleButtons(options=list(options), value=value, description=description)


def checkbox(value: bool, description: str) -> Checkbox:
    """A yes-or-no choice."""
    import ipywidgets as w

    return w.Checkbox(value=value, description=description)


def dropdown(
    options: Iterable[Any], value: Any, description: str, width: str | None = None
) -> Dropdown:
    """A drop-down list of ``options`` (names -- a mapping's keys -- or (label, value) pairs);
    ``width``: its CSS width, for long labels (default: ipywidgets')."""
    import ipywidgets as w

    shape = {} if width is None else {"layout": w.Layout(width=width)}
    return w.Dropdown(options=list(options), value=value, description=description, **shape)
