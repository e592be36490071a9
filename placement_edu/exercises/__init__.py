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

- a number is right within the precision the question asks: 3 significant figures unless it says
  otherwise ("2 decimals": compared after rounding; "within 1%": a relative tolerance);
- a word is compared without case, spaces, ``-`` or ``_`` ("gradient_integrity" is "gradient
  integrity"), and an exercise may list other words for the same answer ("sharded-with-gather");
- a wrong number is explained: a common mistake by its own reason, a unit slip (bytes for GB, GiB
  for GB, percent for a fraction, a factor 2 or N) by naming the slip;
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

Answer = Union[int, float, Fraction, str, bool]


#: The precision of a number when the question states none: 3 significant figures.
FIGURES = 3


@dataclass(frozen=True)
class Exercise:
    """``reference`` computes the answer with the core; ``unit`` says what the answer counts
    ("GB (1e9 bytes)", "bytes", "Ψ", "×", "" for a word); ``why`` is what the right answer shows;
    ``mistakes``: (a wrong answer, what it reveals) pairs. The precision, as the question states it:
    ``tolerance`` (relative, "within 1%": 0.01), ``decimals`` ("2 decimals": 2), else ``FIGURES``
    significant figures. ``also``: other words for a word answer ("sharded with gather" for
    "SG"); ``devices``: the N of a question asked per device, to recognise an answer N× off."""

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


@dataclass(frozen=True)
class Verdict:
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
class Worked:
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
        return answer.item()  # type: ignore[attr-defined]
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


def _rounded(x: Fraction, step: Fraction) -> int:
    """``x`` in units of ``step``, rounded half away from zero (as a learner rounds)."""
    units = math.floor(abs(x) / step + Fraction(1, 2))
    return units if x >= 0 else -units


def _close(given: Fraction, expected: Fraction, exercise: Exercise, figures: int = 0) -> bool:
    """Whether ``given`` is ``expected`` at the precision the question asks (or, with ``figures``,
    at that many significant figures)."""
    if abs(given - expected) <= abs(expected) / 10**9:  # float rounding: the same number
        return True
    if exercise.tolerance and not figures:  # "within 1%"
        return abs(given - expected) <= Fraction(exercise.tolerance) * abs(expected)
    if exercise.decimals is not None and not figures:  # "2 decimals"
        step = Fraction(1, 10**exercise.decimals)
    elif expected == 0:
        return False
    else:  # 3 significant figures: the step is a unit of the third digit of the reference
        exponent = math.floor(math.log10(abs(expected))) - ((figures or FIGURES) - 1)
        step = Fraction(10) ** exponent
    return _rounded(given, step) == _rounded(expected, step)


def _near(given: Fraction, value: Fraction, exercise: Exercise) -> bool:
    """A wrong answer is recognised (a mistake, a slip) at the question's precision or at
    ``FIGURES`` significant figures, whichever is looser."""
    return _close(given, value, exercise) or _close(given, value, exercise, FIGURES)


def _precision(exercise: Exercise) -> str:
    if exercise.tolerance:
        return f"within {exercise.tolerance:.{0 if exercise.tolerance >= 0.01 else 1}%}"
    if exercise.decimals is not None:
        return f"{exercise.decimals} decimals"
    return f"{FIGURES} significant figures"


def _slips(exercise: Exercise, expected: Fraction) -> tuple[tuple[Fraction, str], ...]:
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
    if abs(expected) <= 1:
        slips.append((Fraction(100), "that is the answer as a percentage; give it as a fraction"))
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
        return f"{value} (= {float(value):g})" if abs(value) < 10**300 else shown(value)
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


def _same(
    given: Answer,
    expected: Answer,
    exercise: Exercise,
    also: tuple[str, ...] = (),
    near: bool = False,
) -> bool:
    """Whether ``given`` is ``expected`` (or one of the words ``also``), as the question asks
    (``near``: or at ``FIGURES`` significant figures)."""
    if isinstance(expected, bool) or isinstance(given, bool):
        return given is expected
    if isinstance(expected, str):
        words = {_words(w) for w in (expected, *also)}
        return isinstance(given, str) and _words(given) in words
    if isinstance(given, str):
        return False
    judge = _near if near else _close
    return judge(_exact(given), Fraction(expected), exercise)


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
    if _same(answer, expected, exercise, exercise.also):
        return Verdict(name, True, answer, exercise.why, expected)
    said = f"{_shown(answer)} {exercise.unit}".strip()
    for mistake, reason in exercise.mistakes:
        if _same(answer, mistake, exercise, near=True):
            return not_yet(f"{said}: {reason}")
    hint = f" Hint: {exercise.hint}" if exercise.hint else ""
    if isinstance(expected, (str, bool)) or isinstance(answer, (str, bool)):
        return not_yet(f"{said} is not it.{hint}")
    given, right = _exact(answer), Fraction(expected)
    for factor, slip in _slips(exercise, right):
        if _near(given, right * factor, exercise):
            return not_yet(f"{said}: {slip}.")
    if _close(given, right, exercise, figures=2):
        return not_yet(f"{said} is close, but the question asks {_precision(exercise)}.")
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
    "solution",
]
