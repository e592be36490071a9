"""README's and the docs' examples, as the current command line and API print them (issue 25,
item 8; issue 38 moved the manual from README.md into docs/, and the examples with it).

Every fenced ```console block of README.md and of docs/*.md (``pages()``) whose first line is
``$ placement-edu ARGS`` is an example: the test runs ``placement_edu.cli.main(ARGS)`` in this
process (stdout captured) and compares the page's lines with the output's.
``python -m tests.readme_examples --write`` rewrites the blocks from the current command line, in
the file each came from, keeping each block's elisions. Every ```python block whose first line
starts with ``>>>`` is a doctest (``doctests``), run as written.

How a page's text is read against the output:

- elision: a line ``...`` (alone) stands for the output's lines from there up to the block's next
  line (at least one); a line that ends with ``" ..."`` stands for one output line that starts with
  the text before it. ``--write`` keeps the same number of lines before, between and after the
  elisions, and cuts a shortened line at the same length;
- normalisation: each one is named in ``NORMALISE``, with what varies from machine to machine or
  run to run that it removes, and applies to the page's text and the output alike. The only one is
  **round-off**: a deviation from one process, and the rounding floor it is judged against, is the
  last bit of a float64 sum, which depends on the CPU's vector kernels (5.551e-17 on one x86
  machine, 1.110e-16 on an AMD EPYC: issue 44). Any figure below 1e-12 written in e-notation (and
  an exact ``0.0e+00``) reads as ``<round-off>``; the verdict beside it ("equivalent to one
  process"), the tolerance (1.0e-10) and every byte are compared exactly. Otherwise the examples
  are chosen to need none: no wall-clock seconds, no paths, no process ids.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def pages() -> list[Path]:
    """The files whose examples are checked: README.md, then every page of docs/."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


#: What varies from machine to machine, and what it becomes before the comparison, on both sides:
#: (name, pattern, replacement).
NORMALISE: tuple[tuple[str, str, str], ...] = (
    (
        "round-off",
        r"\b\d(?:\.\d+)?e-(?:1[3-9]|[2-9]\d|\d{3,})\b|\b0(?:\.0+)?e[+-]00\b",
        "<round-off>",
    ),
)


def normalised(line: str) -> str:
    """``line`` with every ``NORMALISE`` pattern replaced."""
    for _name, pattern, replacement in NORMALISE:
        line = re.sub(pattern, replacement, line)
    return line


#: The ranks' start-up makes these commands slow (seconds each): the runtime tier runs them.
RUNS_RANKS = ("run", "torch-ref")

ELIDED = "..."


@dataclass(frozen=True)
class Example:
    """One console block: the command's arguments and the page's lines after the ``$`` line;
    ``start`` and ``end`` are the page's line numbers (0-based) of the block's first and last
    text lines (the ``$`` line and the last output line); ``path`` is the page."""

    argv: tuple[str, ...]
    lines: tuple[str, ...]
    start: int
    end: int
    path: Path = README

    @property
    def command(self) -> str:
        return "placement-edu " + " ".join(self.argv)

    @property
    def where(self) -> str:
        """``docs/cli.md:42``: the page and the line of the ``$`` line (1-based)."""
        return f"{self.path.relative_to(ROOT)}:{self.start + 1}"

    @property
    def runs_ranks(self) -> bool:
        return self.argv[0] in RUNS_RANKS


def examples(text: str | None = None, path: Path = README) -> list[Example]:
    """Every ```console block of the page at ``path`` (or of ``text``) that starts with
    ``$ placement-edu``."""
    lines = (path.read_text() if text is None else text).splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```console" and lines[i + 1].startswith("$ placement-edu "):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            argv = tuple(shlex.split(lines[i + 1])[2:])
            found.append(Example(argv, tuple(lines[i + 2 : end]), i + 1, end - 1, path))
            i = end
        i += 1
    return found


def all_examples() -> list[Example]:
    """Every page's examples, README's first."""
    return [example for page in pages() for example in examples(path=page)]


@dataclass(frozen=True)
class Doctest:
    """One ```python block of a page whose first line starts with ``>>>``: its text and the
    page's line number (0-based) of that first line."""

    source: str
    start: int
    path: Path

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.start + 1}"


def doctests(text: str | None = None, path: Path = README) -> list[Doctest]:
    """Every ```python block of the page at ``path`` (or of ``text``) that starts with ``>>>``."""
    lines = (path.read_text() if text is None else text).splitlines()
    found = []
    for i, line in enumerate(lines[:-1]):
        if line.strip() == "```python" and lines[i + 1].startswith(">>> "):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            found.append(Doctest("\n".join(lines[i + 1 : end]) + "\n", i + 1, path))
    return found


def doctest_failures(example: Doctest) -> str:
    """What ``doctest`` reports for ``example`` run in a fresh namespace: "" when every line
    prints what the page shows."""
    parser, report = doctest.DocTestParser(), io.StringIO()
    test = parser.get_doctest(example.source, {}, example.where, str(example.path), example.start)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=report.write)
    return report.getvalue()


def output(argv: tuple[str, ...]) -> list[str]:
    """What ``placement-edu ARGV`` prints on stdout, run in this process, as printed (``matches``
    normalises; ``--write`` writes what this machine prints); an exit status other than 0 fails
    with what it wrote on stderr."""
    from placement_edu.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    # (``check`` exits 1 when it finds a condition broken, as a linter does: its output is shown)
    expected = (0, 1) if argv[0] == "check" else (0,)
    assert status in expected, f"placement-edu {' '.join(argv)} exited {status}: {err.getvalue()}"
    return [line.rstrip() for line in out.getvalue().splitlines()]


def _shortened(line: str) -> str | None:
    """The start a line ``"TEXT ..."`` stands for, or None for a line shown whole."""
    return line[: -len(ELIDED) - 1] if line.endswith(" " + ELIDED) else None


def matches(shown: tuple[str, ...], printed: list[str]) -> bool:
    """Whether a page's ``shown`` lines are the ``printed`` lines, elisions read as above."""
    if not shown:
        return not printed
    head, rest = shown[0], shown[1:]
    if head.strip() == ELIDED:  # one or more lines, then the rest
        return any(matches(rest, printed[k:]) for k in range(1, len(printed) + 1))
    if not printed:
        return False
    start, line = _shortened(head), normalised(printed[0])
    if start is not None:
        same = line.startswith(normalised(start))
    else:
        same = line == normalised(head.rstrip())
    return same and matches(rest, printed[1:])


def rewritten(shown: tuple[str, ...], printed: list[str]) -> list[str]:
    """The page's block made from ``printed`` with ``shown``'s elisions: as many lines before and
    after its ``...`` line, and each shortened line cut at the same length."""
    cuts = [k for k, line in enumerate(shown) if line.strip() == ELIDED]
    assert len(cuts) <= 1, "at most one ... line per block"
    if cuts:
        head, tail = cuts[0], len(shown) - cuts[0] - 1
        assert head + tail < len(printed), "the output is shorter than the block"
        pairs = list(zip(shown[:head], printed[:head])) + [(ELIDED, shown[head])]
        pairs += list(zip(shown[head + 1 :], printed[len(printed) - tail :]))
    else:
        pairs = list(zip(shown, printed)) + [("", line) for line in printed[len(shown) :]]
    out = []
    for was, line in pairs:
        start = _shortened(was)
        out.append(line if start is None else f"{line[: len(start)]} {ELIDED}")
    return out


def write() -> list[str]:
    """Rewrite every page's examples from the current command line; the commands rewritten, each
    with its page and line."""
    changed = []
    for page in pages():
        lines = page.read_text().splitlines(keepends=False)
        drifted = []
        for example in reversed(examples(path=page)):  # from the end: line numbers stay valid
            printed = output(example.argv)
            if matches(example.lines, printed):  # round-off alone never rewrites a block
                continue
            lines[example.start + 1 : example.end + 1] = rewritten(example.lines, printed)
            drifted.append(f"{example.where}: {example.command}")
        if drifted:  # a page whose examples are as printed is left as it is, byte for byte
            page.write_text("\n".join(lines) + "\n")
            changed += reversed(drifted)
    return changed


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.readme_examples --write")
    for command in write() or ["(every example already as printed)"]:
        print("rewritten:", command)
