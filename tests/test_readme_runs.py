"""README's examples of the commands that start ranks (``run``, ``torch-ref``) are what they print
today (issue 25, item 8; the others: ``tests/test_readme_examples.py``). Each starts its ranks
once, a few seconds; the wall-clock line of a run sits in the elided part of its block."""

from __future__ import annotations

import pytest

from tests.readme_examples import examples
from tests.test_readme_examples import assert_as_printed

pytestmark = pytest.mark.runtime

RUNS = [e for e in examples() if e.runs_ranks]


def test_readme_shows_runs_of_both_commands() -> None:
    assert {e.argv[0] for e in RUNS} == {"run", "torch-ref"} and len(RUNS) == 3


@pytest.mark.parametrize("example", RUNS, ids=lambda e: " ".join(e.argv[:2]))
def test_a_readme_run_is_what_the_command_prints(example) -> None:
    assert_as_printed(example)
