"""Exercises with checkable answers: ``check_answer("zero2-memory", 16.640625)`` says right or
wrong, and why.

Each exercise is a question whose reference answer the core computes (never a typed-in number), the
unit the answer is given in, and what a right answer teaches; common wrong answers carry their own
explanation ("3 is ZeroRedundancyOptimizer's schedule, ..."). Exercises live in one module per
notebook in this package (``exercises/<notebook>.py``, each defining ``EXERCISES``) and are
collected once, at import, into the read-only ``EXERCISES`` mapping.

In a notebook::

    from placement_edu.exercises import check_answer, solution
    check_answer("zero2-memory", 16.64)          # -> right / wrong, and why
    check_answer("zero2-memory", solution("zero2-memory"))   # what nbval runs: the reference answer

Numbers: an exact answer (int, Fraction, or a float that equals the reference exactly) is needed
unless the exercise states a relative tolerance; a float is compared with that tolerance (1e-9 at
least, float rounding). Text answers compare case- and space-insensitively.
"""

from __future__ import annotations

import html
import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Callable, Mapping, Union

from placement_edu.errors import PlacementError, shown

Answer = Union[int, float, Fraction, str, bool]


@dataclass(frozen=True)
class Exercise:
    """``reference`` computes the answer with the core; ``unit`` says what the answer counts
    ("GB (1e9 bytes)", "bytes", "Ψ", "×", "" for a word); ``why`` is what the right answer shows;
    ``mistakes``: (a wrong answer, what it reveals) pairs; ``tolerance``: relative, for answers that
    are read off a chart or rounded (0: exact)."""

    name: str
    question: str
    reference: Callable[[], Answer]
    unit: str
    why: str
    mistakes: tuple[tuple[Answer, str], ...] = ()
    tolerance: float = 0.0
    hint: str = ""


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

    def __str__(self) -> str:
        return f"{'✔ right' if self.right else '✘ not yet'} ({self.name}): {self.message}"

    def _repr_html_(self) -> str:
        colour = "#009E73" if self.right else "#D55E00"
        return (
            f'<p style="color:{colour}"><b>{"✔ right" if self.right else "✘ not yet"}</b> '
            f"({self.name}): "
            f"{html.escape(self.message)}</p>"
        )


def _collect() -> Mapping[str, Exercise]:
    found: dict[str, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for exercise in getattr(module, "EXERCISES", ()):
            assert exercise.name not in found, f"two exercises named {exercise.name!r}"
            found[exercise.name] = exercise
    return MappingProxyType(found)


def _exercise(name: str) -> Exercise:
    if not isinstance(name, str) or name not in EXERCISES:  # a list is not even hashable
        raise PlacementError(
            f"unknown exercise {shown(name)}; expected an exercise's name (text), one of: "
            f"{', '.join(EXERCISES)}"
        )
    return EXERCISES[name]


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


def _same(given: Answer, expected: Answer, tolerance: float) -> bool:
    if isinstance(expected, str):
        return isinstance(given, str) and " ".join(given.lower().split()) == " ".join(
            expected.lower().split()
        )
    if isinstance(expected, bool) or isinstance(given, bool):
        return given is expected
    if isinstance(given, float) and not math.isfinite(given):
        return False  # an infinity is no byte count (nan is refused before)
    if isinstance(given, float) or tolerance:
        # exact Fractions, not floats: an int answer of 400 digits is wrong, not an OverflowError
        scale = max(abs(Fraction(expected)), Fraction(1, 10**300))
        gap = abs(Fraction(given) - Fraction(expected))
        return gap <= Fraction(max(tolerance, 1e-9)) * scale
    return Fraction(given) == Fraction(expected)


def _shown(value: Answer) -> str:
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return _shown(value.numerator)
        return f"{value} (= {float(value):g})" if abs(value) < 10**300 else shown(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) < 10**30 else shown(value)  # 10**400: its start
    return shown(value)


def check_answer(name: str, answer: Answer) -> Verdict:
    """Right or wrong, and why (named apart from ``placement_edu.check``, the correctness
    checker). ``answer`` in the exercise's unit (a number, or a word)."""
    exercise = _exercise(name)
    answer = _plain(answer)  # type: ignore[assignment]
    expected = exercise.reference()
    numeric = not isinstance(expected, (str, bool))
    if numeric and (
        isinstance(answer, (str, bool)) or not isinstance(answer, (int, float, Fraction))
    ):
        raise PlacementError(
            f"exercise {name!r} takes a number in {exercise.unit}, got {shown(answer)} of type "
            f"{type(answer).__name__}"
        )
    if numeric and isinstance(answer, float) and answer != answer:
        raise PlacementError(f"exercise {name!r} takes a number in {exercise.unit}, got nan")
    if not numeric and not isinstance(answer, type(expected)):
        raise PlacementError(
            f"exercise {name!r} takes "
            f"{'True or False' if isinstance(expected, bool) else 'a word'}, got {shown(answer)}"
        )
    if _same(answer, expected, exercise.tolerance):
        return Verdict(name, True, answer, exercise.why, expected)
    for wrong, reason in exercise.mistakes:
        if _same(answer, wrong, exercise.tolerance):
            return Verdict(
                name, False, answer, f"{_shown(answer)} {exercise.unit}: {reason}".strip(), expected
            )
    hint = f" Hint: {exercise.hint}" if exercise.hint else ""
    return Verdict(
        name, False, answer, f"{_shown(answer)} {exercise.unit} is not it.{hint}", expected
    )


EXERCISES: Mapping[str, Exercise] = _collect()

__all__ = ["EXERCISES", "Exercise", "Verdict", "check_answer", "solution"]
