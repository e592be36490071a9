"""What every result type of the package does: it prints (``__str__``, its own text), renders in a
notebook (``_repr_html_``) and serialises (``to_dict``: plain JSON values, bytes exact).

A result type inherits ``Shown`` for the notebook's rendering, its printed text kept as written
(a table whose columns line up); ``Report`` and ``Comparison`` render their own HTML tables.
``tests/test_public_api.py`` finds every dataclass a public function returns and checks all three.
"""

from __future__ import annotations

import html


class Shown:
    """A notebook shows the result as it prints, in a fixed-width block."""

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"
