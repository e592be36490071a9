"""What every result type of the package does: it prints (``__str__``), renders in a notebook
(``_repr_html_``) and serialises (``to_dict``: plain JSON values, bytes exact).

A result type inherits ``Shown``. What it does not write itself, ``Shown`` gives it from its
fields: ``to_dict`` each field by name (a field that is itself a result, by its own ``to_dict``),
``__str__`` one line per field, and a notebook shows the printed text as it is (a table whose
columns line up). ``Report`` and ``Comparison`` write all three; ``Memory``, ``Schedule``, fit's
``StepPeak`` and ``StepTime`` their own text.
``tests/test_public_api.py`` finds every dataclass a public function returns and checks each is so.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping
from enum import Enum
from fractions import Fraction
from typing import Any

from placement_edu.units import plain


def plain_value(value: Any) -> Any:
    """``value`` as JSON holds it: a result by its ``to_dict``, an enum by its value, an exact
    number as ``units.plain`` writes it, a mapping or a sequence item by item, else its text."""
    if isinstance(value, Shown) or (hasattr(value, "to_dict") and not isinstance(value, type)):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, float, Fraction)):
        return plain(value)
    if isinstance(value, Mapping):
        return {str(plain_value(k)): plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset, range)):
        return [plain_value(v) for v in value]
    return str(value)


class Shown:
    """A result: printed, rendered and serialised from its fields unless it says otherwise."""

    def to_dict(self) -> dict[str, Any]:
        assert dataclasses.is_dataclass(self), type(self)
        return {f.name: plain_value(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def __str__(self) -> str:
        rows = [(name, _text(value)) for name, value in self.to_dict().items()]
        width = max((len(name) for name, _ in rows), default=0)
        head = type(self).__name__
        return "\n".join([head] + [f"  {name.ljust(width)}  {value}" for name, value in rows])

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"


def _text(value: Any) -> str:
    """A field's value on one line: a number with its digits grouped, a short list or mapping
    as written, a long one by its size."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    if len(text) > 80 and isinstance(value, (list, dict)):
        return f"{len(value):,} {'entries' if isinstance(value, dict) else 'items'}"
    return text
