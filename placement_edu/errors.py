"""One error type for bad input, so the CLI and notebooks can show a one-line, teaching message;
the limits on what a number may be; and the exact readers of numbers typed as text."""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Iterable


class PlacementError(ValueError):
    """Bad input to placement_edu: the message names the bad value and what is accepted.

    ``in_context=True`` marks a message that already names what was being derived (strategy,
    placement, mesh), so ``context`` does not say it twice."""

    def __init__(self, message: str, *, in_context: bool = False) -> None:
        super().__init__(shortened(message))
        self.in_context = in_context


# --- limits ---------------------------------------------------------------------------------
# What the command line accepts. The derivations are exact (ints and Fractions) and would take far
# larger numbers; the limits catch typos (a missing "e9", an extra zero run) with a clear line
# instead of a table of absurd numbers, and keep every figure a float can show.

#: Parameters of a model: 10^15, a thousand times the largest models trained so far.
MAX_PARAMS = 10**15
#: Devices in a mesh: 2^40 (about 1.1e12), far beyond any cluster.
MAX_DEVICES = 2**40
#: Any other count typed on the command line: layers, hidden, heads, sequence, vocabulary,
#: micro-batch size.
MAX_COUNT = 2**40
#: Micro-batches per optimizer step in a derivation (table, check, estimate, the Python API): the
#: schedule holds a run of identical micro-batch passes once, with its count, so its cost does not
#: grow with m; 2^40, like the other counts.
MAX_MICRO_BATCHES = 2**40
#: Micro-batches per step of a measured run (``placement-edu run``): each one is real compute on
#: every rank, so 4096 is the most a run takes.
MAX_RUN_MICRO_BATCHES = 4096
#: Processes ``placement-edu run`` starts on this machine (each one is a full Python with torch).
MAX_LOCAL_WORLD_SIZE = 256
#: Optimizer steps of a measured run (the tiny models take milliseconds a step).
MAX_STEPS = 10**6
#: Seconds a collective may wait before a run is ended: one day.
MAX_TIMEOUT_S = 86_400
#: The most items listed one by one (a schedule's operations, a model's gather units, the rows of
#: ``table --json``'s schedule): a display's list, a runtime's comparison. Totals never need the
#: list: they read each run once, with its count. Also the most data ranks of a strategy whose
#: owners each broadcast their slice (zero1_allreduce): one op per rank, refused by ``validate``.
MAX_LISTED_OPS = 100_000
#: Largest float that still holds every whole number below it exactly (IEEE 754 double: 2^53).
MAX_EXACT_FLOAT = 2**53


def expect(condition: object, message: str) -> None:
    """Raise PlacementError(message) unless condition holds (is true)."""
    if not condition:
        raise PlacementError(message)


def one_of(what: str, value: object, known: Iterable[str]) -> None:
    """Raise PlacementError unless ``value`` is one of ``known``: the one line a choice among names
    refuses a value with, "unknown {what} {value!r}; known: a, b"."""
    known = tuple(known)
    if value not in known:
        raise PlacementError(f"unknown {what} {value!r}; known: {', '.join(known)}")


def positive_int(name: str, value: object) -> int:
    """Return value as an int if it is a whole number >= 1, else raise a PlacementError naming it.

    Accepted: an int (numpy's too), a whole float up to 2^53, a Fraction equal to a whole number.
    Refused: bool (True is not a count), nan and infinities, fractions of a unit, text, and floats
    above 2^53, where a float no longer holds every whole number (give an int)."""
    wanted = f"{name} must be a whole number >= 1"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PlacementError(f"{wanted} (an int), got {value!r} of type {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        number = int(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise PlacementError(f"{wanted}, got {value!r}")
        if value != math.floor(value):
            raise PlacementError(f"{wanted}, got {value!r}: not whole")
        if abs(value) > MAX_EXACT_FLOAT:
            raise PlacementError(
                f"{wanted}, got the float {value!r}: above 2^53 a float is not exact; "
                f"give an int (e.g. {int(value)})"
            )
        number = int(value)
    elif isinstance(value, Fraction) and value.denominator == 1:
        number = int(value)
    else:
        raise PlacementError(f"{wanted}, got {value!r}")
    if number < 1:
        raise PlacementError(f"{wanted}, got {value!r}")
    return number


def kv_heads_of(hidden: int, heads: int, kv_heads: int) -> int:
    """The key-value heads of a model ``hidden`` wide with ``heads`` query heads (``kv_heads`` 0:
    one per query head), checked: the heads divide the width, the key-value heads the heads."""
    kv_heads = kv_heads or heads
    expect(
        hidden % heads == 0 and heads % kv_heads == 0,
        f"hidden ({hidden}) must divide by heads ({heads}), heads by kv_heads ({kv_heads})",
    )
    return kv_heads


def an_int(name: str, value: object) -> int:
    """Return value if it is an int (numpy's too): never a bool, never a float, even a whole one.

    For a count that is handed to torch as it is (a run's world size and steps): a float 4.0 would
    pass every check of its size and fail later, inside torch, with torch's message."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        hint = ""
        if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_EXACT_FLOAT:
            hint = f", because torch takes only ints there; give {int(value)}"
        raise PlacementError(
            f"{name} must be an int, got {shown(value)} of type {type(value).__name__}{hint}"
        )
    return int(value)


def within_device_limit(what: str, devices: int) -> int:
    """The one limit on devices (``MAX_DEVICES``), for a mesh and for ``estimate``'s GPUs alike:
    ``devices`` if it is at most 2^40, else a PlacementError naming ``what`` counted them."""
    if devices > MAX_DEVICES:
        raise PlacementError(
            f"{what} counts {f'{devices:,}' if devices < 10**30 else shown(devices)} devices; "
            f"expected at most {show_limit(MAX_DEVICES)}, because no cluster comes near that "
            "many (the limit catches a typo)"
        )
    return devices


def non_negative_int(name: str, value: object) -> int:
    """Return value as an int if it is a whole number >= 0 (0 allowed), else a PlacementError naming
    it."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value == 0:
        return 0
    try:
        return positive_int(name, value)
    except PlacementError as error:
        raise PlacementError(str(error).replace(">= 1", ">= 0", 1)) from None


def positive_seconds(name: str, value: object, maximum: float = MAX_TIMEOUT_S) -> float:
    """Return value as float seconds if it is a finite number > 0 and at most ``maximum``."""
    wanted = f"{name} must be a number of seconds > 0 and at most {show_limit(int(maximum))}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PlacementError(f"{wanted}, got {value!r} of type {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 < seconds <= maximum:
        raise PlacementError(f"{wanted}, got {value!r}")
    return seconds


# --- numbers typed as text ------------------------------------------------------------------
def show_limit(n: int) -> str:
    """10^15, 2^40 or 86,400: a limit the way a reader knows it (powers from 10^6 and 2^20 on)."""
    for base, smallest in ((10, 6), (2, 20)):
        exponent = round(math.log(n, base)) if n > 1 else 0
        if exponent >= smallest and base**exponent == n:
            return f"{base}^{exponent}"
    return f"{n:,}"


#: Characters of a value a message echoes before shortening it (names and numbers alike).
ECHO_LIMIT = 40


def shown(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` as a message echoes it: its repr (text quoted), shortened when long -- a name or
    a number typed 100,000 characters long is shown by its start and its length, so an error stays
    one readable line."""
    text = value if isinstance(value, str) else _repr(value)
    if len(text) <= limit:
        return repr(text) if isinstance(value, str) else text
    start = repr(text[:limit]) if isinstance(value, str) else text[:limit]
    return f"{start}... ({len(text):,} characters)"


#: A word longer than this in a message is a value echoed whole (a name typed 100,000 characters
#: long): ``shortened`` shows it by its start and its length.
LONG_WORD = 2 * ECHO_LIMIT
#: A message longer than this is cut (a value with spaces in it can be long in many words).
LONG_MESSAGE = 4000
_WORD = re.compile(r"\S{%d,}" % (LONG_WORD + 1))


def shortened(message: str) -> str:
    """``message`` with each overlong word -- a value echoed whole -- shown as ``shown`` shows a
    value (its start, quoted as it was, and its length), and cut when still overlong: every error
    of the package is a readable line, whatever was typed. Applied once, to every PlacementError
    and every command-line usage error."""

    def one(word: re.Match[str]) -> str:
        text = word.group()
        body = text.rstrip(".,;:)")
        tail = text[len(body) :]
        if len(body) > 2 and body[0] in "'\"" and body[-1] == body[0]:
            return f"{body[: ECHO_LIMIT + 1]}{body[0]}... ({len(body) - 2:,} characters){tail}"
        return f"{body[:ECHO_LIMIT]}... ({len(body):,} characters){tail}"

    message = _WORD.sub(one, message) if len(message) > LONG_WORD else message
    if len(message) > LONG_MESSAGE:
        message = f"{message[: LONG_MESSAGE // 2]}... ({len(message):,} characters in all)"
    return message


def _repr(value: object) -> str:
    try:
        return repr(value)
    except ValueError:  # an int of more than 4,300 digits has no repr (Python's own limit)
        return f"<an int of about {value.bit_length() * 0.30103:,.0f} digits>"  # type: ignore[attr-defined]


_shown = shown  # the readers of numbers below


def _decimal(text: str, accepted: str) -> Decimal:
    """The exact value of ``text`` ("7.5e9", "1_000", "123456789012345678901"): never through a
    float."""
    try:
        value = Decimal(text.strip())
    except (InvalidOperation, ValueError, TypeError):
        raise PlacementError(f"{_shown(text)} is not a number; {accepted}") from None
    if not value.is_finite():
        raise PlacementError(f"{_shown(text)} is not a finite number; {accepted}")
    return value


def read_int(text: str, what: str, maximum: int, example: str = "", minimum: int = 1) -> int:
    """Read a whole number from ``minimum`` to ``maximum`` exactly: "7.5e9" is 7500000000, "1.5" is
    refused. ``what`` says what is counted ("parameters"); the error names the value and what is
    accepted."""
    accepted = (
        f"give a whole number of {what}, at least {minimum} and at most {show_limit(maximum)}"
        + (f" (e.g. {example})" if example else "")
    )
    value = _decimal(text, accepted)
    if value > maximum:  # before any conversion: 1e400 stays cheap
        raise PlacementError(f"{_shown(text)} is more than {show_limit(maximum)}; {accepted}")
    if value != value.to_integral_value():
        raise PlacementError(f"{_shown(text)} is not a whole number; {accepted}")
    if value < minimum:
        raise PlacementError(f"{_shown(text)} is less than {minimum}; {accepted}")
    return int(value)


#: Digits an exact fraction flag keeps at most on either side of the point ("0.125" has 3 places):
#: beyond that a typed number ("1e-100000000", "1e5000") would make a Fraction of that many digits.
MAX_PLACES = 30


def read_fraction(text: str, what: str, low: Fraction, high: Fraction, accepted: str) -> Fraction:
    """Read a number exactly, ``low < value <= high``, as a decimal ("1.25", "5e-3") or a ratio
    ("1/2"): never through a float; errors start with ``what`` ("routing skew"). Bounded work
    whatever is typed: each term's size and decimal places are checked on the decimal, before any
    Fraction is made."""
    parts = text.split("/")
    if len(parts) > 2:
        raise PlacementError(f"{what} {_shown(text)} is not a number; {accepted}")
    terms = [_decimal(part, accepted) for part in parts]
    for term in terms:
        if term and term.adjusted() >= MAX_PLACES:
            raise PlacementError(f"{what} {_shown(text)} is out of range; {accepted}")
        if term and int(term.as_tuple().exponent) < -MAX_PLACES:
            raise PlacementError(
                f"{what} {_shown(text)} has more than {MAX_PLACES} decimal places; {accepted}"
            )
    if len(terms) == 2 and not terms[1]:
        raise PlacementError(f"{what} {_shown(text)} divides by zero; {accepted}")
    value = Fraction(terms[0]) / (Fraction(terms[1]) if len(terms) == 2 else 1)
    if not low < value <= high:
        raise PlacementError(f"{what} {_shown(text)} is out of range; {accepted}")
    return value


def read_seconds(text: str, maximum: float = MAX_TIMEOUT_S) -> float:
    """Read a duration in seconds, > 0 and at most ``maximum`` ("60", "0.5", "1e3")."""
    accepted = f"give seconds > 0, at most {show_limit(int(maximum))}"
    value = _decimal(text, accepted)
    if value > maximum:
        raise PlacementError(
            f"{_shown(text)} is more than {show_limit(int(maximum))} seconds; {accepted}"
        )
    if value <= 0 or float(value) <= 0:  # 1e-400 is > 0 but no float holds it
        raise PlacementError(f"{_shown(text)} is not > 0; {accepted}")
    return float(value)


class context:
    """Add the outer context -- what was being derived -- to a PlacementError, once, at the API
    boundary: ``with context(f"deriving {name} ({placement}) on {mesh}"): ...``."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> "context":
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        if isinstance(error, PlacementError) and not error.in_context:
            raise PlacementError(f"{self.what}: {error}", in_context=True) from None
