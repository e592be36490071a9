"""README's and the docs' console examples are what the current command line prints (issue 25,
item 8; issue 38): each ```console block of README.md and docs/*.md that starts with
``$ placement-edu`` is run in this process and compared with the page's text
(``tests/readme_examples.py`` says how elisions are read, and names the one normalisation:
round-off), and each ``>>>`` block runs under doctest. The commands that start ranks are in
``tests/test_readme_runs.py``. A block that drifted: ``python -m tests.readme_examples --write``
rewrites it in its page."""

from __future__ import annotations

import difflib
import functools

import pytest

from tests.readme_examples import (
    NORMALISE,
    README,
    all_examples,
    doctest_failures,
    doctests,
    examples,
    matches,
    normalised,
    output,
    pages,
    rewritten,
)

pytestmark = pytest.mark.fast

EXAMPLES = [e for e in all_examples() if not e.runs_ranks]
DOCTESTS = [d for page in pages() for d in doctests(path=page)]

#: One run per command: a page may show the same command as README does (README's excerpt of a
#: longer block in docs/), and a command that starts ranks costs seconds.
printed_by = functools.cache(output)


def example_id(example) -> str:
    return f"{example.path.name}:{' '.join(example.argv[:2])}"


def assert_as_printed(example) -> None:
    printed = printed_by(example.argv)
    diff = "\n".join(difflib.unified_diff(list(example.lines), printed, "page", "printed", n=1))
    assert matches(example.lines, printed), (
        f"{example.where}: `{example.command}` is not what it prints "
        f"(python -m tests.readme_examples --write rewrites it):\n{diff}"
    )
    # --write leaves it as it is (but for round-off, which it writes as this machine prints it)
    assert list(map(normalised, rewritten(example.lines, printed))) == list(
        map(normalised, example.lines)
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=example_id)
def test_a_readme_example_is_what_the_command_prints(example) -> None:
    assert_as_printed(example)


def test_every_command_the_pages_show_is_an_example_checked_here() -> None:
    # an example a page drops from the check (a ```console block made a plain ```) fails here;
    # calibrate's examples are measurements on one machine, shown in plain ``` blocks
    shown = {e.argv[0] for e in all_examples()}
    assert shown >= {"table", "check", "estimate", "run", "torch-ref", "fit", "plan", "time"}
    # README shows one example of each command it lists under "What the command line answers"
    assert [e.argv[0] for e in examples()] == ["table", "check", "plan", "time", "fit", "run"]
    assert {e.path.name for e in all_examples()} >= {"README.md", "cli.md", "peak.md", "time.md"}
    assert [name for name, _, _ in NORMALISE] == ["round-off"]  # each one named and tested here


@pytest.mark.parametrize("example", DOCTESTS, ids=lambda d: d.where)
def test_a_python_example_prints_what_the_page_shows(example) -> None:
    failures = doctest_failures(example)
    assert failures == "", failures


def test_the_python_examples_are_found_and_a_wrong_one_fails() -> None:
    assert {d.path.name for d in DOCTESTS} >= {"python.md", "time.md"}
    (worked,) = doctests(path=README.parent / "docs" / "python.md")
    assert "analyze(" in worked.source and worked.source.count(">>> ") >= 10
    wrong = type(worked)(worked.source.replace("'1.875 GB'", "'1.876 GB'"), 0, worked.path)
    assert "Expected:\n    '1.876 GB'\nGot:\n    '1.875 GB'" in doctest_failures(wrong)


def test_examples_are_read_from_each_page_with_their_lines() -> None:
    page = "intro\n```console\n$ placement-edu check zero3\ncheck zero3 ...\n```\n"
    page += "```python\n>>> 1 + 1\n2\n```\n"
    (example,) = examples(page, README.parent / "docs" / "cli.md")
    assert (example.argv, example.lines, example.start, example.end) == (
        ("check", "zero3"),
        ("check zero3 ...",),
        2,
        3,
    )
    assert example.where == "docs/cli.md:3"
    (test,) = doctests(page, README)
    assert (test.source, test.where) == (">>> 1 + 1\n2\n", "README.md:7")
    assert doctest_failures(test) == ""


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


# README's zero3 run as printed on the machine it was written on, and on an AMD EPYC (issue 44)
ZERO3_SHOWN = (
    "zero3 on data=4: 3 steps, float64, tiny MLP",
    "max |θ − θ_one_process| = 5.551e-17, tolerance 1.0e-10 (= 1e-10 + 16 × rounding floor "
    "5.6e-17) ->",
    "    equivalent to one process",
    "per step: 5.6e-17, 5.6e-17, 5.6e-17",
    "   0  predicted" + "".join(f"{b:>17}" for b in (1248, 1248, 2496, 1536)) + f"{11232:>17}",
)


def test_round_off_is_masked_but_a_byte_or_a_verdict_is_not() -> None:
    epyc = list(ZERO3_SHOWN)
    epyc[1] = epyc[1].replace("5.551e-17", "1.110e-16")
    epyc[3] = "per step: 5.6e-17, 5.6e-17, 1.1e-16"
    assert matches(ZERO3_SHOWN, epyc)
    assert matches(ZERO3_SHOWN, [line.replace("e-17", "e-19") for line in ZERO3_SHOWN])
    zero = [line.replace("5.551e-17", "0.000e+00") for line in ZERO3_SHOWN]
    assert matches(ZERO3_SHOWN, zero)  # an exact sum on another machine
    one_more_byte = epyc[:4] + [epyc[4].replace("1248 ", "1249 ", 1)]
    assert not matches(ZERO3_SHOWN, one_more_byte)
    broken = [*epyc[:2], "    BROKEN: not equivalent to one process", *epyc[3:]]
    assert not matches(ZERO3_SHOWN, broken)
    # a deviation that is no longer round-off, and the tolerance, are compared as printed
    assert not matches(ZERO3_SHOWN, [epyc[0], epyc[1].replace("1.110e-16", "3.200e-04"), *epyc[2:]])
    assert not matches(ZERO3_SHOWN, [epyc[0], epyc[1].replace("1.0e-10", "1.0e-08"), *epyc[2:]])
    assert normalised("tolerance 1.0e-10, 1e-12, floor 5.6e-17") == (
        "tolerance 1.0e-10, 1e-12, floor <round-off>"
    )
