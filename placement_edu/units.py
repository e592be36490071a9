"""Byte units, always labelled: GB = 10^9 bytes (the ZeRO paper's tables), GiB = 2^30 bytes
(what `nvidia-smi` and DeepSpeed's estimators print -- DeepSpeed labels GiB as "GB"), MiB = 2^20
bytes (Megatron's "MB", a container's memory limit). And the one rule for the width of printed
text: ``wrapped``."""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable
from itertools import repeat
from fractions import Fraction
from typing import TypeVar, Union, cast

#: The names of this module's page in the API reference, which a notebook may import.
__all__ = ["GB", "GiB", "fmt_bytes", "fmt_gb", "wrapped"]

#: A gigabyte, 10^9 bytes: what the papers' tables print.
GB = 10**9
#: A gibibyte, 2^30 bytes: what PyTorch's memory tools and nvidia-smi print.
GiB = 2**30
MiB = 2**20

Number = Union[int, float, Fraction]


def to_gb(n_bytes: Number) -> float:
    return float(Fraction(n_bytes) / GB) if not isinstance(n_bytes, float) else n_bytes / GB


def to_gib(n_bytes: Number) -> float:
    return float(Fraction(n_bytes) / GiB) if not isinstance(n_bytes, float) else n_bytes / GiB


def exact(numerator: int | Fraction, denominator: int = 1) -> int | Fraction:
    """numerator / denominator, exactly: an int when it is whole, else a Fraction. The same
    value either way (``Fraction(6, 3) == 2``), but sums and products of ints cost a fraction of a
    Fraction's (the planner's derivations divide sizes by degrees millions of times, and most
    divide evenly)."""
    if isinstance(numerator, int):
        whole, rest = divmod(numerator, denominator)
        return whole if rest == 0 else Fraction(numerator, denominator)
    value = Fraction(numerator) / denominator
    return value.numerator if value.denominator == 1 else value


Summed = TypeVar("Summed", bound=Number)


def total(values: Iterable[Summed]) -> Summed:
    """``sum(values, 0)``, the same value of the same type (an int where every value is one, a
    Fraction where any is; floats and the rest summed by ``sum`` itself), at a fraction of its
    cost: the Fractions are put over one denominator and reduced once, not at every addition (a
    plan on 2^40 devices sums thousands of terms like 1211625411/8589934592 bytes)."""
    return weighted_total(zip(repeat(1), values))


def weighted_total(pairs: Iterable[tuple[int, Summed]]) -> Summed:
    """``sum(k * value for k, value in pairs)`` for whole ``k``, as ``total`` sums: the same value
    of the same type, without a Fraction made for each product."""
    pairs = list(pairs)
    numerator, denominator, fractional = 0, 1, False
    for k, value in pairs:
        if isinstance(value, Fraction):
            fractional, d = True, value.denominator
            if denominator % d:
                common = denominator // math.gcd(denominator, d) * d
                numerator, denominator = numerator * (common // denominator), common
            numerator += k * value.numerator * (denominator // d)
        elif isinstance(value, int) and not isinstance(value, bool):
            numerator += k * value * denominator
        else:
            return cast(Summed, sum((k * value for k, value in pairs), 0))
    return cast(Summed, Fraction(numerator, denominator) if fractional else numerator)


def plain(value: Number) -> int | float:
    """An exact number for JSON: an int when it is whole, else a float."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else float(value)


def fmt_gb(n_bytes: Number, digits: int = 6) -> str:
    """``"31.40625 GB"`` -- trailing zeros trimmed, at most ``digits`` decimals."""
    text = f"{to_gb(n_bytes):.{digits}f}".rstrip("0").rstrip(".")
    return f"{text} GB"


def fmt_bytes(n_bytes: Number) -> str:
    """Both conventions, labelled: ``"120 GB (111.759 GiB)"``; small values in bytes."""
    if abs(Fraction(n_bytes)) < 10**6:
        return f"{plain(Fraction(n_bytes)):,} B"
    return f"{fmt_gb(n_bytes)} ({to_gib(n_bytes):,.3f} GiB)"


#: The widest line the package prints: what a learner reads in a notebook or a terminal fits 100
#: characters (issue 25, item 6).
WIDTH = 100
#: A space that ``wrapped`` does not break: between a word and the short number after it, so
#: "rule 1)" or "by 4," never leaves its number alone at the start of a line; and between a number
#: and its unit, so "16,384 B" or "(0.031 GiB)" never starts a line with the unit.
_KEEP = re.compile(
    r"(?<=[^\W\d]) (?=\d{1,3}[),.;:]*(?: |$))"
    r"|(?<=\d) (?=(?:B|kB|KiB|MB|MiB|GB|GiB|TB|TiB|ms|s|Ψ)(?!\w))"
)


def wrapped(text: str, indent: str = "    ", width: int = WIDTH) -> str:
    """``text`` with each line longer than ``width`` broken at spaces; a continuation line starts
    with the line's own indentation plus ``indent``. Shorter lines, and the spacing inside a line
    (aligned columns), are kept as they are; no word is broken, so a number is never split, nor
    parted from a word before it when short ("rule 1")."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        out += textwrap.wrap(
            _KEEP.sub("\0", line),
            width,
            subsequent_indent=lead + indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(out).replace("\0", " ")
