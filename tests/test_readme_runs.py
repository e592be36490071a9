"""README's and the docs' examples of the commands that start ranks (``run``, ``torch-ref``) are
what they print today (issue 25, item 8; the others: ``tests/test_readme_examples.py``). Each
command starts its ranks once, a few seconds, however many pages show it (README's ``run zero3``
is an excerpt of docs/cli.md's); the wall-clock line of a run sits in the elided part of its
block."""

from __future__ import annotations

import pytest

from tests.readme_examples import all_examples
from tests.test_readme_examples import assert_as_printed, example_id

pytestmark = pytest.mark.runtime

RUNS = [e for e in all_examples() if e.runs_ranks]


def test_readme_shows_runs_of_both_commands() -> None:
    assert {e.argv[0] for e in RUNS} == {"run", "torch-ref"}
    # three commands: README's run zero3 is an excerpt of the manual's, started once
    assert len({e.argv for e in RUNS}) == 3 and len(RUNS) == 4
    assert {e.path.name for e in RUNS} == {"README.md", "cli.md"}


@pytest.mark.parametrize("example", RUNS, ids=example_id)
def test_a_readme_run_is_what_the_command_prints(example) -> None:
    assert_as_printed(example)
