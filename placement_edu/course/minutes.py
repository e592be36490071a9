"""How long a notebook takes a learner: a stated model, not a stopwatch.

A test run of a notebook says how long its cells take to compute, not how long a learner takes to
read, think and answer. So the minutes in notebook 00's map (and each notebook's "**Time:**") are
computed from what the notebook holds, by one model:

- every word of its text, its code and its printed output, read at ``WORDS_PER_MINUTE`` -- 200,
  Carver's "learning" rate (R. P. Carver, *Reading rate: theory, research, and practical
  implications*, Journal of Reading 36(2), 1992: scanning 600, skimming 450, rauding 300, learning
  200, memorizing 138 words a minute);
- ``RUN_MINUTES`` to run each code cell and see what it shows (a measuring cell starts its
  processes in a few seconds);
- ``FIGURE_MINUTES`` to read each figure;
- ``EXPLORER_MINUTES`` to try each explorer (a widget: move its controls, watch the picture);
- ``EXERCISE_MINUTES`` for each exercise: think, compute, type an answer, read the checker's reply;
- the sum rounded up to a multiple of ``ROUNDED_TO`` minutes.

A notebook is meant to fit one sitting, ``SITTING_MINUTES``; one that does not is a candidate to
split in two. ``python -m placement_edu.course.minutes`` prints each notebook's terms and minutes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from placement_edu.course import notebooks

#: Carver's (1992) "learning" rate, words a minute: text, code and printed output alike.
WORDS_PER_MINUTE = 200
#: Minutes to run one code cell and look at what it shows.
RUN_MINUTES = Fraction(1, 2)
#: Minutes to read one figure (a PNG output).
FIGURE_MINUTES = 1
#: Minutes to try one explorer widget.
EXPLORER_MINUTES = 3
#: Minutes for one exercise: think, compute, type, read the reply.
EXERCISE_MINUTES = 4
#: A notebook's minutes are rounded up to a multiple of this.
ROUNDED_TO = 5
#: One sitting: a notebook longer than this is a candidate to split.
SITTING_MINUTES = 60

#: What an output shows instead of its plain text (a table, a figure, a widget).
RICHER = frozenset({"text/html", "image/png", "application/vnd.jupyter.widget-view+json"})
#: An exercise cell: the learner's answer handed to the checker.
EXERCISE = re.compile(r'check_answer\("[\w-]+", answer\)')
#: An explorer cell: a widget made from one of the presentation's ``...Explorer`` classes.
EXPLORER = re.compile(r"\b[A-Z]\w*Explorer\(")


@dataclass(frozen=True)
class Reading:
    """What one notebook holds, counted as the model counts it, and its minutes."""

    words: int  # text, code and printed output
    code_cells: int
    figures: int
    explorers: int
    exercises: int

    @property
    def exact(self) -> Fraction:
        """The model's minutes before rounding."""
        return (
            Fraction(self.words, WORDS_PER_MINUTE)
            + RUN_MINUTES * self.code_cells
            + FIGURE_MINUTES * self.figures
            + EXPLORER_MINUTES * self.explorers
            + EXERCISE_MINUTES * self.exercises
        )

    @property
    def minutes(self) -> int:
        """The model's minutes, rounded up to a multiple of ``ROUNDED_TO``."""
        return ROUNDED_TO * math.ceil(self.exact / ROUNDED_TO)


def _printed(output: Mapping[str, Any]) -> str:
    """The text an output shows: a stream, or a result's plain text when it has no richer view (a
    widget's or an image's plain text is a placeholder nobody reads)."""
    if "text" in output:
        return "".join(output["text"])
    data = output.get("data", {})
    if "text/plain" in data and not RICHER & set(data):
        return "".join(data["text/plain"])
    return ""


def reading(cells: Sequence[Mapping[str, Any]]) -> Reading:
    """Count a notebook's cells (as saved, outputs included) the way the model does."""
    words = code_cells = figures = explorers = exercises = 0
    for cell in cells:
        source = "".join(cell["source"])
        words += len(source.split())
        if cell["cell_type"] != "code":
            continue
        code_cells += 1
        explorers += bool(EXPLORER.search(source))
        exercises += bool(EXERCISE.search(source))
        for output in cell.get("outputs", []):
            words += len(_printed(output).split())
            figures += "image/png" in output.get("data", {})
    return Reading(words, code_cells, figures, explorers, exercises)


def notebook_reading(path: Path) -> Reading:
    """``reading`` of the notebook saved at ``path``."""
    return reading(json.loads(path.read_text(encoding="utf-8"))["cells"])


def course_minutes() -> dict[str, int]:
    """Each notebook's minutes by its number ("00": 45, ...), in reading order."""
    return {path.name[:2]: notebook_reading(path).minutes for path in notebooks()}


def total_phrase(total: int) -> str:
    """The course's length as 00's map states it: "About 13 hours 50 minutes in all (830
    minutes"."""
    minutes = f" {total % 60} minutes" if total % 60 else ""
    return f"About {total // 60} hours{minutes} in all ({total} minutes"


def model_sentence() -> str:
    """The model in one sentence, as notebook 00 states it below its map."""
    return (
        f"every word of a notebook's text, code and printed output read at {WORDS_PER_MINUTE} "
        f'words a minute (Carver\'s "learning" rate), {_minutes(RUN_MINUTES)} to run each code '
        f"cell, {_minutes(FIGURE_MINUTES)} to read each figure, {_minutes(EXPLORER_MINUTES)} to "
        f"try each explorer and {_minutes(EXERCISE_MINUTES)} for each exercise, the sum rounded "
        f"up to a multiple of {ROUNDED_TO} minutes"
    )


def _minutes(value: Fraction | int) -> str:
    return "half a minute" if value == Fraction(1, 2) else f"{value} minute{'s' * (value != 1)}"


if __name__ == "__main__":
    print(
        f"{'':3s}{'words':>6s} {'cells':>5s} {'figs':>4s} {'expl':>4s} {'exer':>4s} "
        f"{'exact':>6s} {'min':>4s}"
    )
    for path in notebooks():
        r = notebook_reading(path)
        print(
            f"{path.name[:2]:3s}{r.words:6d} {r.code_cells:5d} {r.figures:4d} "
            f"{r.explorers:4d} {r.exercises:4d} {float(r.exact):6.1f} {r.minutes:4d}"
        )
    print(total_phrase(sum(course_minutes().values())) + ")")
