"""Exercises with checkable answers: ``check_answer("zero2-memory", 16.640625)`` says right or
wrong, and why.

Each exercise is a question whose reference answer the core computes (never a typed-in number), the
unit the answer is given in, and what a right answer teaches; common wrong answers carry their own
explanation ("3 is ZeroRedundancyOptimizer's schedule, ..."). Exercises live in one module per
notebook in this package (``exercises/<notebook>.py``, each defining ``EXERCISES``) and are
collected once, at import, into the read-only ``EXERCISES`` mapping.

In a notebook::

    from placement_edu.exercises import check_answer, reveal
    answer = ...                                 # the learner replaces ... with an answer
    check_answer("zero2-memory", answer)         # -> not answered yet / right / wrong, and why
    reveal("zero2-memory")                       # the worked answer, only when asked for

An exercise cell starts unanswered (``answer = ...``), so "Run All" answers nothing: each check
says "not answered yet" (what nbval checks), and no reference answer is shown until ``reveal``.

How an answer is judged (``check_answer``):

- a number is judged at the precision the learner typed: the reference is rounded to the last
  digit of the answer and compared (16.6, 16.64 and 16.6406 are all ZeRO's 16.640625; 0.18 and
  0.1795 are both 7/39), never at fewer significant figures than the question states and never at
  fewer than 2. A question that needs more says it: "exactly" (an exact byte count of a toy),
  "3 significant figures", "2 decimals" (the reference rounded to at least 2 decimals) or
  "within 1%" (a relative tolerance);
- a word is compared without case, spaces, ``-`` or ``_`` ("gradient_integrity" is "gradient
  integrity"), and an exercise may list other words for the same answer ("sharded-with-gather");
- a wrong number is explained: a common mistake by its own reason, a slip (bytes for GB, GiB for
  GB, a factor 2, ×N or ÷N where the question names N devices, a percentage for a dimensionless
  answer) by naming it, an answer right only at fewer figures than asked as "close";
- an answer of the wrong kind ("two", None, nan) is "not yet: expected a number of bytes", never an
  error.
"""

from __future__ import annotations

import html
import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from difflib import get_close_matches
from fractions import Fraction
from types import MappingProxyType
from typing import Callable, Mapping, Union

from placement_edu.errors import PlacementError, shown
from placement_edu.shown import Shown

Answer = Union[int, float, Fraction, str, bool]


#: The fewest significant figures an answer is judged at, whatever the question states: 2.
FIGURES = 2
#: An answer typed with more significant digits than this is judged as exact (a Fraction is always
#: exact): no question asks for more, and the rounding below stays cheap.
MAX_FIGURES = 30


@dataclass(frozen=True)
class Exercise:
    """``question`` is what the notebook asks, word for word (markdown: code in backticks, what
    to stress in bold; the notebook's "**Exercise k.**" paragraph is written from it).
    ``reference`` computes the answer with the core; ``unit`` says what the answer counts
    ("GB (1e9 bytes)", "bytes", "Ψ", "×", "" for a word); ``why`` is what the right answer shows;
    ``mistakes``: (a wrong answer, what it reveals) pairs. The precision, as the question states it:
    ``exact`` ("exactly": a toy's byte count), ``tolerance`` (relative, "within 1%": 0.01),
    ``decimals`` ("2 decimals": 2), ``figures`` ("3 significant figures": 3), else the figures the
    learner typed (at least ``FIGURES``). ``also``: other words for a word answer ("sharded with
    gather" for "SG"); ``devices``: the N of a question asked per device, to recognise an answer
    N× off."""

    name: str
    question: str
    reference: Callable[[], Answer]
    unit: str
    why: str
    mistakes: tuple[tuple[Answer, str], ...] = ()
    tolerance: float = 0.0
    hint: str = ""
    decimals: int | None = None
    also: tuple[str, ...] = ()
    devices: int = 0
    figures: int = 0
    exact: bool = False


@dataclass(frozen=True)
class Verdict(Shown):
    """The outcome of ``check``: right or wrong, the answer given, and the explanation."""

    name: str
    right: bool
    given: Answer
    message: str
    expected: Answer | None = field(repr=False, default=None)  # not shown when wrong

    def __bool__(self) -> bool:
        return self.right

    def _verdict(self) -> str:
        if self.given is Ellipsis:
            return NOT_ANSWERED
        return "✔ right" if self.right else "✘ not yet"

    def __str__(self) -> str:
        return f"{self._verdict()} ({self.name}): {self.message}"

    __repr__ = __str__  # one line in a REPL too, never the fields of a dataclass

    def _repr_html_(self) -> str:
        colour = "#009E73" if self.right else "#666666" if self.given is Ellipsis else "#D55E00"
        return (
            f'<p style="color:{colour}"><b>{self._verdict()}</b> ({self.name}): '
            f"{html.escape(self.message)}</p>"
        )


#: What a check says of ``answer = ...``, the answer an exercise cell starts with.
NOT_ANSWERED = "… not answered yet"


@dataclass(frozen=True)
class Worked(Shown):
    """An exercise's worked answer, as ``reveal`` shows it: the reference value in its unit and
    the derivation (the exercise's ``why``)."""

    name: str
    answer: Answer
    unit: str
    derivation: str

    def __str__(self) -> str:
        value = f"{_decimal(self.answer)} {self.unit}".strip()
        return f"answer ({self.name}): {value}. {self.derivation}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        value = html.escape(f"{_decimal(self.answer)} {self.unit}".strip())
        return f"<p><b>answer</b> ({self.name}): <b>{value}</b>. {html.escape(self.derivation)}</p>"


def _collect() -> Mapping[str, Exercise]:
    found: dict[str, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for exercise in getattr(module, "EXERCISES", ()):
            assert exercise.name not in found, f"two exercises named {exercise.name!r}"
            found[exercise.name] = exercise
    return MappingProxyType(found)


def _exercise(name: str) -> Exercise:
    if isinstance(name, str) and name in EXERCISES:  # (a list is not even hashable)
        return EXERCISES[name]
    near = get_close_matches(name, EXERCISES, n=2) if isinstance(name, str) else []
    hint = (
        f"did you mean {' or '.join(map(repr, near))}?"
        if near
        else f"each exercise cell names its own; all {len(EXERCISES)}: "
        "placement_edu.exercises.EXERCISES"
    )
    raise PlacementError(
        f"unknown exercise {shown(name)}; expected an exercise's name (text): {hint}"
    )


def _plain(answer: object) -> object:
    """A numpy scalar (or 0-d array) as the Python number it holds: ``np.float32(16.640625)``,
    ``np.int64(3000000000)`` and ``np.bool_(True)`` are what a learner's numpy cell produces, and
    they mean 16.640625, 3000000000 and True. Anything else is returned as it is."""
    if getattr(answer, "shape", None) == () and callable(getattr(answer, "item", None)):
        value = answer.item()  # type: ignore[attr-defined]
        if isinstance(value, (bool, int, float, str)):
            return value
        # np.longdouble's item() is itself: the decimal numpy prints for it
        try:
            return Fraction(str(value))
        except (ValueError, TypeError, OverflowError):
            return value
    return answer


def solution(name: str) -> Answer:
    """The reference answer of exercise ``name``, computed by the core."""
    return _exercise(name).reference()


def reveal(name: str) -> Worked:
    """The worked answer of exercise ``name``: the reference value, computed by the core, with its
    derivation. A notebook's exercise cell never calls it: the learner asks for it."""
    exercise = _exercise(name)
    return Worked(name, exercise.reference(), exercise.unit, exercise.why)


def _decimal(value: Answer) -> str:
    """An answer as a learner reads it: a word quoted, a whole number with thousands separators,
    a fraction with a finite decimal as that decimal (2025/64 is 31.640625; past 9 places with 6
    significant figures beside it), any other fraction exactly and to 3 significant figures
    (7/39 (≈ 0.179))."""
    if isinstance(value, Fraction):
        denominator = value.denominator
        for prime in (2, 5):
            while denominator % prime == 0:
                denominator //= prime
        if value.denominator == 1:
            return _decimal(value.numerator)
        if denominator == 1:  # only 2s and 5s: the decimal is finite, and exact
            places = max(_places(value.denominator, 2), _places(value.denominator, 5))
            digits = str(abs(value.numerator * 10**places // value.denominator)).zfill(places + 1)
            sign = "-" if value < 0 else ""
            exact = f"{sign}{digits[:-places]}.{digits[-places:]}"
            return exact if places <= 9 else f"{exact} (≈ {float(value):.6g})"
        return f"{value} (≈ {float(value):.3g})"
    return _shown(value)


def _places(n: int, prime: int) -> int:
    """How many times ``prime`` divides ``n``."""
    count = 0
    while n % prime == 0:
        n, count = n // prime, count + 1
    return count


def _words(text: str) -> str:
    """A word answer as compared: lower case, ``-`` and ``_`` as spaces, spaces collapsed."""
    return " ".join(text.lower().replace("-", " ").replace("_", " ").split())


def _exact(number: int | float | Fraction) -> Fraction:
    """A float as the decimal a learner typed (0.1 is 1/10, not 0.1000000000000000055...)."""
    return Fraction(repr(number)) if isinstance(number, float) else Fraction(number)


def _typed(number: int | float | Fraction) -> tuple[Fraction, Fraction | None, int]:
    """The answer as typed: its exact value, the unit of its last significant digit and how many
    significant digits it has (16.6: 1/10 and 3; 1.75e9: 10^7 and 3; 4350: 10 and 3). A Fraction,
    and an answer of more than ``MAX_FIGURES`` digits, is exact: (value, None, MAX_FIGURES)."""
    value = _exact(number)
    if isinstance(number, Fraction) or value == 0:
        return value, None, MAX_FIGURES
    digits = repr(number) if isinstance(number, float) else str(abs(number))
    if "e" in digits or "E" in digits:
        mantissa, power = digits.lower().split("e")
    else:
        mantissa, power = digits, "0"
    whole, _, places = mantissa.lstrip("-").partition(".")
    places = places.rstrip("0")
    shown_digits = (whole + places).lstrip("0")
    exponent = int(power) - len(places)
    if not places:  # trailing zeros of a whole number are not significant (4350: 3 figures)
        stripped = shown_digits.rstrip("0")
        exponent += len(shown_digits) - len(stripped)
        shown_digits = stripped
    figures = len(shown_digits)
    if figures > MAX_FIGURES:
        return value, None, MAX_FIGURES
    return value, Fraction(10) ** exponent, figures


def _rounded(x: Fraction, step: Fraction) -> int:
    """``x`` in units of ``step``, rounded half away from zero (as a learner rounds)."""
    units = math.floor(abs(x) / step + Fraction(1, 2))
    return units if x >= 0 else -units


def _is(given: Fraction, step: Fraction | None, value: Fraction) -> bool:
    """Whether ``value``, rounded to the last digit typed (``step``, but never coarser than
    ``FIGURES`` significant figures of ``value``), is ``given``: the same number at the precision
    the learner typed (without a step: the same number)."""
    if abs(given - value) <= abs(value) / 10**9:  # float rounding: the same number
        return True
    if step is None or value == 0:
        return False
    step = min(step, _figure_step(value, FIGURES))
    return abs(given - value) * 2 <= step  # a tie either way: 13.125 is 13.12 or 13.13


def _figure_step(value: Fraction, figures: int) -> Fraction:
    """The unit of the ``figures``-th significant digit of ``value``."""
    return Fraction(10) ** (math.floor(math.log10(abs(value))) - (figures - 1))


def _right(
    given: Fraction, step: Fraction | None, figures: int, expected: Fraction, exercise: Exercise
) -> bool:
    """Whether an answer typed as ``given`` (last digit ``step``, ``figures`` significant digits)
    is right at the precision the question states (``_precision``) and the learner typed."""
    if abs(given - expected) <= abs(expected) / 10**9:
        return True
    if exercise.exact:
        return False
    if exercise.tolerance:  # "within 1%"
        return abs(given - expected) <= Fraction(exercise.tolerance) * abs(expected)
    if step is None:
        return False
    if exercise.decimals is not None:  # "2 decimals": at least 2, and right at those typed
        enough = step <= Fraction(1, 10**exercise.decimals)
    else:
        enough = figures >= max(FIGURES, exercise.figures)
    return enough and abs(given - expected) * 2 <= step  # a tie (13.125) rounds either way


def _close(given: Fraction, step: Fraction | None, expected: Fraction) -> bool:
    """An answer right only at fewer figures than asked: the same number at its own precision, or
    at 2 significant figures."""
    if expected == 0 or given == 0:
        return False
    two = _figure_step(expected, 2)
    return _rounded(given, two) == _rounded(expected, two)


def _precision(exercise: Exercise) -> str:
    """The precision the question states, as it says it."""
    if exercise.exact:
        return "the exact number"
    if exercise.tolerance:
        return f"within {exercise.tolerance:.{0 if exercise.tolerance >= 0.01 else 1}%}"
    if exercise.decimals is not None:
        return f"{exercise.decimals} decimals"
    return f"{max(FIGURES, exercise.figures)} significant figures"


def _dimensionless(unit: str) -> bool:
    """Whether an answer in ``unit`` is a pure number (a ratio, a fraction, a factor), the only
    kind a learner can give as a percentage."""
    return not unit or unit[0] in "×(" or unit.startswith("of ")


def slips(exercise: Exercise, expected: Fraction) -> tuple[tuple[Fraction, str], ...]:
    """(given ÷ right answer, the slip that gives it), for the slips learners make most."""
    GB, GiB = Fraction(10**9), Fraction(2**30)
    unit, n = exercise.unit, exercise.devices
    other_units = {  # the same quantity in another unit: (factor, that unit)
        "GB": ((GB, "bytes"), (GB / GiB, "GiB (2^30 bytes)")),
        "GiB": ((GiB, "bytes"), (GiB / GB, "GB (1e9 bytes)")),
        "bytes": ((1 / GB, "GB"), (1 / GiB, "GiB")),
        "ms": ((Fraction(1, 1000), "seconds"),),
        "s": ((Fraction(1000), "milliseconds"),),
    }.get(unit.split(" ")[0], ())
    slips = [(f, f"that is the answer in {u}; the question asks {unit}") for f, u in other_units]
    if n > 1:
        slips += [
            (
                Fraction(n),
                f"that is {n}× the answer: all N = {n} devices together, or one factor N too "
                "many; the question asks for one device",
            ),
            (Fraction(1, n), f"that is 1/{n} of the answer: divided by N = {n} once too often"),
        ]
    if _dimensionless(unit):
        slips.append(
            (Fraction(100), "that is the answer as a percentage; give it as a plain number")
        )
    slips += [
        (Fraction(2), "that is 2× the answer: a factor 2 too many"),
        (Fraction(1, 2), "that is half the answer: a factor 2 missing"),
    ]
    return tuple(slips)


def _kind(exercise: Exercise, expected: Answer) -> str:
    """What an answer to ``exercise`` is: "True or False", "a word", "a number of bytes"."""
    if isinstance(expected, bool):
        return "True or False"
    if isinstance(expected, str):
        return "a word"
    unit = exercise.unit
    if unit[:1].isalpha() and not unit.startswith("of ") or unit == "Ψ" or unit.startswith("Ψ "):
        return f"a number of {unit}"
    return f"a number ({unit.strip('()')})" if unit else "a number"


def _shown(value: Answer) -> str:
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return _shown(value.numerator)
        bits = max(value.numerator.bit_length(), value.denominator.bit_length())
        if bits > 3000:  # str() of an int refuses past 4,300 digits: show its size instead
            digits = int(bits * math.log10(2)) + 1
            about = f"{float(value):g}" if abs(value) < 10**300 else "too large for a float"
            return f"a fraction of about {digits:,} digits (≈ {about})"
        return f"{value} (= {float(value):g})"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) < 10**30 else shown(value)  # 10**400: its start
    return shown(value)


def _of_its_kind(answer: object, expected: Answer) -> bool:
    """Whether ``answer`` is the kind of answer ``expected`` is: True/False, a word, a number."""
    if isinstance(expected, (bool, str)):
        return isinstance(answer, type(expected))
    if isinstance(answer, float):
        return math.isfinite(answer)  # nan and inf count nothing
    return isinstance(answer, (int, Fraction)) and not isinstance(answer, bool)


def _same_word(given: Answer, expected: Answer, also: tuple[str, ...] = ()) -> bool:
    """Whether ``given`` is the word (or True/False) ``expected``, or one of the words ``also``."""
    if isinstance(expected, bool) or isinstance(given, bool):
        return given is expected
    words = {_words(w) for w in (expected, *also)}  # type: ignore[arg-type]
    return isinstance(given, str) and _words(given) in words


def _word_verdict(
    name: str, exercise: Exercise, answer: Answer, expected: str | bool, said: str, hint: str
) -> Verdict:
    """An answer that is a word (or True/False): the word expected, a named mistake, or not it."""
    if _same_word(answer, expected, exercise.also):
        return Verdict(name, True, answer, exercise.why, expected)
    for mistake, reason in exercise.mistakes:
        if _same_word(answer, mistake):
            return Verdict(name, False, answer, f"{said}: {reason}", expected)
    return Verdict(name, False, answer, f"{said} is not it.{hint}", expected)


def check_answer(name: str, answer: Answer) -> Verdict:
    """Right or wrong, and why (named apart from ``placement_edu.check``, the correctness
    checker). ``answer`` in the exercise's unit (a number, or a word)."""
    exercise = _exercise(name)
    answer = _plain(answer)  # type: ignore[assignment]
    if answer is Ellipsis:  # the cell as the notebook ships it: nothing computed, nothing shown
        # (one line of at most 100 characters: the cell's first line already names reveal)
        said = "replace ... with your answer"
        return Verdict(name, False, answer, said)
    expected = exercise.reference()

    def not_yet(message: str) -> Verdict:
        return Verdict(name, False, answer, message, expected)

    if not _of_its_kind(answer, expected):
        kind = _kind(exercise, expected)
        return not_yet(f"expected {kind}, got {shown(answer)} ({type(answer).__name__})")
    said = f"{_shown(answer)} {exercise.unit}".strip()
    hint = f" Hint: {exercise.hint}" if exercise.hint else ""
    if isinstance(expected, (str, bool)):
        return _word_verdict(name, exercise, answer, expected, said, hint)
    given, step, figures = _typed(answer)  # type: ignore[arg-type]
    right = Fraction(expected)
    if _right(given, step, figures, right, exercise):
        return Verdict(name, True, answer, exercise.why, expected)
    asks = f"the question asks {_precision(exercise)}"
    if _is(given, step, right):  # right at the figures typed, which are fewer than asked
        return not_yet(f"{said} is close, but {asks}.")
    for mistake, reason in exercise.mistakes:
        if _is(given, step, Fraction(mistake)):  # type: ignore[arg-type]
            return not_yet(f"{said}: {reason}")
    for factor, slip in slips(exercise, right):
        if right and _is(given, step, right * factor):
            return not_yet(f"{said}: {slip}.")
    if _close(given, step, right):
        by_figures = not (exercise.exact or exercise.tolerance or exercise.decimals is not None)
        if by_figures and step is not None and figures >= max(FIGURES, exercise.figures):
            return not_yet(f"{said} is close, but not right at the {figures} figures you gave.")
        return not_yet(f"{said} is close, but {asks}.")
    return not_yet(f"{said} is not it.{hint}")


EXERCISES: Mapping[str, Exercise] = _collect()

__all__ = [
    "EXERCISES",
    "NOT_ANSWERED",
    "Exercise",
    "Verdict",
    "Worked",
    "check_answer",
    "reveal",
    "slips",
    "solution",
]
