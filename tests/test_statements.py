"""The course's statements that a review found wrong (issue 25, item 1), each pinned by a check that
reads the text learners read -- every notebook's markdown and every exercise's question, answer
and mistakes -- so the same wrong sentence cannot come back in another cell."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from placement_edu.exercises import EXERCISES
from placement_edu.units import GB, GiB

pytestmark = pytest.mark.fast

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def _markdown(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def _texts() -> list[tuple[str, str]]:
    """(where, text) for every markdown cell and every exercise's words."""
    found = [(f"{nb.name} cell", text) for nb in NOTEBOOKS for text in _markdown(nb)]
    for name, e in EXERCISES.items():
        words = [e.question, e.why, e.hint] + [reason for _, reason in e.mistakes]
        found += [(f"exercise {name}", " ".join(words))]
    return found


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.;?!])\s+", " ".join(text.split()))


def test_a_number_in_gib_is_6_9_percent_smaller_and_a_gib_7_4_percent_larger():
    smaller = 100 * (1 - GB / GiB)  # 6.87 %: the same bytes, counted in the larger unit
    larger = 100 * (GiB / GB - 1)  # 7.37 %: one GiB against one GB
    assert (round(smaller, 1), round(larger, 1)) == (6.9, 7.4)
    claims = 0
    for where, text in _texts():
        for sentence in _sentences(text):
            if "GiB" not in sentence:
                continue
            for m in re.finditer(r"(\d+(?:\.\d+)?)\s*%\s*\*?(smaller|larger)\*?", sentence):
                expected = {"smaller": 6.9, "larger": 7.4}[m.group(2)]
                assert float(m.group(1)) == expected, f"{where}: {sentence}"
                claims += 1
            for m in re.finditer(r"(smaller|larger) by (\d+(?:\.\d+)?)\s*%", sentence):
                expected = {"smaller": 6.9, "larger": 7.4}[m.group(1)]
                assert float(m.group(2)) == expected, f"{where}: {sentence}"
                claims += 1
    assert claims >= 3  # 04's answer, 12's section and answer at least


def test_notebooks_04_and_12_give_the_same_gib_answer():
    # 04's exercise 1 and 12's exercise on 140 GB: once 04 said "smaller by 7.4%"
    answers = {
        nb.name[:2]: [t for t in _markdown(nb) if "Answer" in t and "130.39 GiB" in t]
        for nb in NOTEBOOKS
        if nb.name[:2] in ("04", "12")
    }
    for number, cells in answers.items():
        assert len(cells) == 1, number
        assert "6.9% smaller" in " ".join(cells[0].replace("*", "").split()), (number, cells)


def test_zero1_at_3_psi_is_never_called_wrong():
    # ZeroRedundancyOptimizer's all-reduce + broadcast schedule: the other schedule of ZeRO-1's
    # placement (SPEC §4 rule 1, §8); 07's "Derive: communication" once called it wrong
    judged = re.compile(r"\b(wrong|a mistake|an error|incorrect)\b", re.I)
    cleared = re.compile(r"\bnot (wrong|a mistake|an error|incorrect)\b", re.I)
    for where, text in _texts():
        for sentence in _sentences(text):
            if "3Ψ" in sentence and judged.search(sentence):
                assert cleared.search(sentence), f"{where}: {sentence}"


def test_orders_of_magnitude_are_counted_between_the_numbers_they_compare():
    # 08's float64 paragraph once said 1e-10 is "6 orders of magnitude" below 1e-6
    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}
    checked = 0
    for where, text in _texts():
        for sentence in _sentences(text):
            said = re.search(r"(\d+|\w+) orders of magnitude", sentence)
            powers = sorted({int(p) for p in re.findall(r"\b1e-(\d+)\b", sentence)})
            if said and len(powers) == 2:
                count = int(said.group(1)) if said.group(1).isdigit() else words[said.group(1)]
                assert count == powers[1] - powers[0], f"{where}: {sentence}"
                checked += 1
    assert checked >= 1


def test_the_gpipe_over_1f1b_question_asks_for_the_ratio_it_expects():
    # the question once asked 1F1B's peak over GPipe's (1/2) and expected GPipe's over 1F1B's (2)
    exercise = EXERCISES["materialized-gpipe-over-1f1b"]
    assert "GPipe ÷ 1F1B" in exercise.question
    (notebook,) = [nb for nb in NOTEBOOKS if nb.name.startswith("05")]
    (asked,) = [t for t in _markdown(notebook) if "**Exercise 3.**" in t]
    assert "GPipe ÷ 1F1B" in asked
    assert exercise.reference() == 2  # m / min(p, m) = 8 / 4


def test_02_and_08_say_both_conditions_a_fault_breaks():
    # skip-grad-reduce breaks gradient integrity directly and state consistency from the next step
    # (the replicas diverge); unsynced-init the other way round. The checker once said state
    # consistency holds "from the same summed gradient" under skip-grad-reduce.
    for notebook in NOTEBOOKS:
        if notebook.name[:2] in ("02", "08"):
            both = [
                t
                for t in _markdown(notebook)
                if "skip-grad-reduce" in t and "unsynced-init" in t and "as a consequence" in t
            ]
            assert both, notebook.name
    for where, text in _texts():
        assert "same summed gradient" not in text, where
