"""Show a widget so that a notebook opened without running still says what to do, and shows a still.

Widgets need a live kernel. Opened without running (or saved and reopened, or exported to HTML or
slides), a widget cell shows a text repr or "Error displaying widget: model not found". So every
widget cell's output area starts with a line telling the learner to run the cells, and a still
of the figure as it was last run (plain HTML, which every viewer shows). Once the controls are
live, a style inside the widget hides that still in its own cell (CSS ``:has``): a running
notebook shows the controls only.

Run, saved, and reopened after its kernel is gone, a notebook's widget outputs name models that
died with the kernel (JupyterLab saves no widget state unless "Save Widget State Automatically" is
on). JupyterLab then draws the widget output as bare text -- "Loading widget..." until its widget
manager has looked, "Error displaying widget: model not found" after -- and never falls back to
another type of the same output (the widget renderer is the only one asked for a widget output of
a trusted notebook). So the still carries a second style: in its cell, an output that holds
nothing but such a text is hidden, and the line and the still of that run are what remain.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a widget is shown: the package imports without ipywidgets
    from ipywidgets import Image, Widget

STILL = "placement-edu-still"  # the class of the line and still shown until the cells run
LIVE = "placement-edu-live"  # the class of the live widget
_HIDE_STILL = (
    f"<style>.jp-Cell:has(.{LIVE}) .{STILL}, .cell:has(.{LIVE}) .{STILL} {{display: none}}</style>"
)


#: Image pixels per CSS pixel: every figure is drawn at twice the pixels it is shown at
#: (``style.FIGURE_DPI``), so it stays sharp on a high-density screen and under a projector's zoom.
PIXEL_DENSITY = 2


def shown_width(png: bytes) -> int:
    """The width, in CSS pixels, at which a PNG drawn at PIXEL_DENSITY is shown: its pixel width
    (the big-endian word at bytes 16-19 of the PNG's IHDR chunk) / PIXEL_DENSITY."""
    return int.from_bytes(png[16:20], "big") // PIXEL_DENSITY


def png_html(png: bytes, alt: str) -> str:
    """An ``<img>`` of PNG bytes, inline, at its shown width."""
    return (
        f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}" alt="{alt}" '
        f'width="{shown_width(png)}" style="max-width: 100%">'
    )


def sharp_image(**layout: str) -> Image:
    """An ``ipywidgets.Image`` that shows each PNG it is given at its shown width (``layout``:
    CSS properties of the widget, e.g. ``max_width="760px"``)."""
    import ipywidgets as w

    image = w.Image(format="png", layout=w.Layout(**layout))

    def fit(change: dict) -> None:
        image.width = str(shown_width(change["new"])) if change["new"] else ""

    image.observe(fit, names="value")
    return image


#: In a cell with a still, hide an output that is bare text (no element inside): the widget
#: renderer's "Loading widget..." or "Error displaying widget" of a model that is gone. A live
#: widget, the still, and text output (a ``<pre>``) all have elements inside.
_HIDE_DEAD_WIDGET = (
    f"<style>.jp-Cell:has(.{STILL}) .jp-OutputArea-output:not(:has(*)) {{display: none}}</style>"
)


def still_html(still: str = "") -> str:
    """The line, then ``still`` (HTML: what the controls showed when the notebook was last run)."""
    until = " Until then, what they showed when this notebook was last run:" if still else ""
    return (
        f'<div class="{STILL}">{_HIDE_DEAD_WIDGET}<p>▶ <b>Run the cells</b> (Run ▸ Run All Cells) '
        f"to use the controls of this cell.{until}</p>{still}</div>"
    )


def show(widget: Widget, still: str = "") -> None:
    """Display the line and ``still``, then ``widget`` (with the style that hides them once
    live)."""
    import ipywidgets as w
    from IPython.display import HTML, display

    display(HTML(still_html(still)))
    live = w.VBox([w.HTML(_HIDE_STILL), widget])
    live.add_class(LIVE)
    bundle = live._repr_mimebundle_()  # the widget, and for a viewer without it:
    bundle["text/plain"] = "(the controls of this cell appear here once the cells run)"
    display(bundle, raw=True)
