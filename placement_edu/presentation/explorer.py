"""The skeleton every explorer shares: controls -> observe -> redraw -> display.

An explorer makes its controls, then calls ``assemble`` with them in rows and, when it draws a
figure, with its ``picture`` (what the figure shows, in words): below the rows go the image and a
readout (HTML); every control is observed, so that moving it redraws; and the first drawing is
made. What is left to the explorer is what it shows: ``update()`` asks the core, draws into
``image``, writes ``readout`` and returns what it derived (a test or a notebook reads it).
Displayed, an explorer shows ``live.show``'s line and a still of its picture and readout, then the
live controls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from placement_edu.presentation.live import png_html, sharp_image, show

if TYPE_CHECKING:  # imported where a widget is made: the package imports without ipywidgets
    from ipywidgets import HTML, Image, VBox, Widget


class Explorer:
    """Controls in rows, an image and a readout below them; any control's move redraws."""

    #: What the image shows, in words: the still's alt text ("" for an explorer without a figure;
    #: ``assemble`` sets it).
    picture = ""

    controls: tuple[Widget, ...]
    image: Image
    readout: HTML
    widget: VBox

    def assemble(
        self,
        *rows: Widget | Sequence[Widget],
        picture: str = "",
        below: Sequence[Widget] = (),
        controls: Sequence[Widget] | None = None,
        **image_layout: str,
    ) -> None:
        """Lay out ``rows`` (a tuple or list: a row side by side), then ``below`` (widgets that are
        not controls, such as a status line), the image -- only with a ``picture``, what it shows
        in words -- and the readout; observe ``controls`` (every widget of ``rows`` unless given)
        and draw once. ``image_layout``: CSS properties of the image (``live.sharp_image``)."""
        import ipywidgets as w

        self.picture = picture
        self.image = sharp_image(**image_layout)
        self.readout = w.HTML()
        shown = [w.HBox(list(row)) if isinstance(row, (tuple, list)) else row for row in rows]
        pictured = [self.image] if self.picture else []
        self.widget = w.VBox([*shown, *below, *pictured, self.readout])
        every = [c for row in rows for c in (row if isinstance(row, (tuple, list)) else [row])]
        self.controls = tuple(every if controls is None else controls)
        for control in self.controls:
            control.observe(self.redraw, names="value")
        self.update()

    def redraw(self, change: dict | None = None) -> None:
        """A control moved (``change``: ipywidgets' record of it): draw again."""
        self.update()

    def update(self) -> Any:
        """Ask the core, draw, write the readout; return what was derived (the explorer's own)."""
        raise NotImplementedError

    def still(self) -> str:
        """What a notebook opened without running shows: the picture, then the readout."""
        picture = png_html(self.image.value, self.picture) if self.picture else ""
        return picture + self.readout.value

    def _ipython_display_(self) -> None:
        show(self.widget, self.still())
