"""README's console examples are what the current command line prints (issue 25, item 8): each
```console block that starts with ``$ placement-edu`` is run in this process and compared with
README's text (``tests/readme_examples.py`` says how elisions are read; no normalisation is needed
by today's examples). The commands that start ranks are in ``tests/test_readme_runs.py``.
A block that drifted: ``python -m tests.readme_examples --write`` rewrites it."""

from __future__ import annotations

import difflib

import pytest

from tests.readme_examples import NORMALISE, examples, matches, output, rewritten

pytestmark = pytest.mark.fast

EXAMPLES = [e for e in examples() if not e.runs_ranks]


def assert_as_printed(example) -> None:
    printed = output(example.argv)
    diff = "\n".join(difflib.unified_diff(list(example.lines), printed, "README", "printed", n=1))
    assert matches(example.lines, printed), (
        f"README's `{example.command}` is not what it prints "
        f"(python -m tests.readme_examples --write rewrites it):\n{diff}"
    )
    assert rewritten(example.lines, printed) == list(example.lines)  # --write leaves it as it is


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: " ".join(e.argv[:2]))
def test_a_readme_example_is_what_the_command_prints(example) -> None:
    assert_as_printed(example)


def test_every_command_readme_shows_is_an_example_checked_here() -> None:
    # an example README drops from the check (a ```console block made a plain ```) fails here;
    # calibrate's examples are measurements on one machine, shown in plain ``` blocks
    shown = {e.argv[0] for e in examples()}
    assert shown >= {"table", "check", "estimate", "run", "torch-ref", "fit", "plan", "time"}
    assert NORMALISE == ()  # a normalisation, once added, is named there and tested here


def test_an_elision_stands_for_lines_and_a_drifted_line_is_caught() -> None:
    printed = ["title", "a 1", "b 2", "c 3"]
    assert matches(("title", "..."), printed)
    assert matches(("title", "...", "c 3"), printed)
    assert matches(("title ...", "a 1", "b ...", "c 3"), printed)
    assert not matches(("title", "...", "a 1", "b 2", "c 3"), printed)  # ... is at least a line
    assert not matches(("title", "a 1", "b 2"), printed)  # a line missing at the end
    assert not matches(("title", "a 1", "b 9", "c 3"), printed)  # a figure changed
    assert not matches(("title", "a 1", "b 2", "c 3", ""), printed)
    # --write keeps the elisions: as many lines before and after ..., a shortened line as long
    printed = ["new title", "a 1", "b 2", "c 4"]
    assert rewritten(("title", "...", "c 3"), printed) == ["new title", "...", "c 4"]
    assert rewritten(("tit ...", "a 1", "b 0"), printed) == ["new ...", "a 1", "b 2", "c 4"]
