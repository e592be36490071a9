"""The controls the widgets share, made one way: a slider over a few fixed choices."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # imported where a widget is made: the package imports without ipywidgets
    from ipywidgets import SelectionSlider


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
