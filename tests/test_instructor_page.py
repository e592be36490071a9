"""docs/instructor.md is what tests/instructor_page.py writes from the exercises (issue 40, item 7):
each exercise's common wrong answers and the checker's reply to each, current."""

from __future__ import annotations

import re

import pytest

from placement_edu.exercises import EXERCISES, check_answer
from tests.instructor_page import PAGE, page

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def written() -> str:
    return page()


def test_the_page_is_current(written):
    # rewrite it with: python -m tests.instructor_page --write
    assert PAGE.read_text(encoding="utf-8") == written


def test_every_exercise_is_on_the_page_once(written):
    listed = re.findall(r"^### Exercise \d+ · `([\w-]+)`$", written, flags=re.M)
    assert sorted(listed) == sorted(EXERCISES)


def test_every_wrong_answer_shown_is_wrong_and_named(written):
    rows = re.findall(r"^\| `(.+?)` \| (.+) \|$", written, flags=re.M)
    assert len(rows) > 2 * len(EXERCISES)
    for typed, reply in rows:
        assert "is not it" not in reply, (typed, reply)  # every reply names the slip
    # a row's reply is the checker's own: 00's Exercise 1 answered with the whole gradient
    reply = check_answer("start-here-zero2-grad-bytes", 2_000_000_000)
    assert not reply.right
    assert f"| `2_000_000_000` | {' '.join(reply.message.split())} |" in written
