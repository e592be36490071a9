"""The notebooks as a learner meets them, kept so by one function: ``normalise``.

``python -m tests.normalise_notebooks`` rewrites every notebook as ``normalise`` leaves it, and
tests/test_notebook_front.py checks that each is already so. What it does:

- a heading is always the first line of its cell: a markdown cell with a heading further down is
  split there (so every section starts a slide);
- each cell that starts a slide carries its ``slideshow.slide_type``
  (``placement_edu.course.slides.slide_type``: every heading, and markdown after a code cell); no
  other cell carries one (they continue the slide before them);
- every "SPEC §n" (and "SPEC §n rule m") of the markdown links to its section of the theory,
  ``[SPEC §n](../docs/theory.md#sn)`` (``#sn-rule-m``; a subsection "§n.k" to its section);
- the kernelspec is ipykernel's own (display name "Python 3 (ipykernel)"): JupyterLab writes the
  running kernel's into a notebook it opens, and a different one marks the notebook modified;
- RISE's settings: the "white" theme, whose font reveal.js ships (the default theme, "simple",
  loads its fonts from Google), and slides that scroll when taller than the screen;
- every exercise asks the checker's question: the markdown cell before a code cell that calls
  ``check_answer("name", answer)`` has one paragraph "**Exercise k.** ...", k counting the
  notebook's exercises, and it is rewritten as ``Exercise.question`` says (the one definition of
  what is asked, so the notebook and the checker cannot drift apart).

Code cells, outputs and everything else are left as they are.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from placement_edu.course.slides import slide_type
from placement_edu.exercises import EXERCISES

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
THEORY = "../docs/theory.md"
#: ipykernel's kernelspec (``ipykernel.kernelspec.get_kernel_dict``), as JupyterLab writes it.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
#: RISE's settings for every notebook (``jupyterlab-rise`` reads them from the metadata).
RISE = {"scroll": True, "theme": "white"}

HEADING_LINE = re.compile(r"^#{1,6}\s")
FENCE = re.compile(r"^\s*(```|~~~)")
#: "SPEC §4", "SPEC §8.2", "SPEC §4 rule 1" (a line may break at any space of it).
SPEC = re.compile(r"SPEC(\s+)§(\d+)(\.\d+)?(?:(\s+)rule(\s+)(\d+))?")
#: A citation already linked to the theory (unlinked first, so linking twice changes nothing).
LINKED = re.compile(r"\[(SPEC\s+§[^\]]*)\]\(" + re.escape(THEORY) + r"#[^)]*\)")
#: A code cell that checks an exercise, and the name it checks.
CHECKED = re.compile(r'check_answer\("([\w-]+)", answer\)')
#: An exercise's question: a paragraph "**Exercise 2.** ...", up to a blank line or the cell's end.
ASKED = re.compile(r"^\*\*Exercise \d+\.\*\* .*?(?=\n[ \t]*\n|\Z)", re.M | re.S)


def link_spec(markdown: str) -> str:
    """``markdown`` with each "SPEC §n" linked to its section of the theory."""

    def link(match: re.Match[str]) -> str:
        section, rule = match.group(2), match.group(6)
        anchor = f"s{section}-rule-{rule}" if rule else f"s{section}"
        return f"[{match.group(0)}]({THEORY}#{anchor})"

    return SPEC.sub(link, LINKED.sub(r"\1", markdown))


def question(number: int, name: str) -> str:
    """Exercise ``name``'s paragraph, the notebook's ``number``-th: "**Exercise 2.** ..." and the
    checker's question (markdown, one line: a wrapped line could start a list)."""
    return f"**Exercise {number}.** {EXERCISES[name].question}"


def ask(markdown: str, number: int, name: str) -> str:
    """``markdown`` (the cell before exercise ``name``'s check) with its one "**Exercise k.**"
    paragraph asking ``question(number, name)``."""
    found = ASKED.findall(markdown)
    assert len(found) == 1, (
        f"{name}: the cell before its check has {len(found)} exercise paragraphs"
    )
    return ASKED.sub(lambda _: question(number, name), markdown)


def heading_lines(markdown: str) -> list[int]:
    """The indices of the lines of ``markdown`` that are headings (not in a fenced code block)."""
    found, fenced = [], False
    for i, line in enumerate(markdown.split("\n")):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and HEADING_LINE.match(line):
            found.append(i)
    return found


def split_at_headings(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """A markdown cell cut before each heading that is not its first line: the first piece keeps
    the cell's id, the others take ``<id>-1``, ``<id>-2``, ...; each piece without the blank
    lines at its ends."""
    if cell["cell_type"] != "markdown":
        return [cell]
    lines = cell["source"].split("\n")
    cuts = [i for i in heading_lines(cell["source"]) if "".join(lines[:i]).strip()]
    if not cuts:
        return [cell]
    assert not cell.get("attachments"), f"cell {cell['id']}: attachments would need splitting too"
    pieces = []
    for k, (start, end) in enumerate(zip([0, *cuts], [*cuts, len(lines)])):
        piece = copy.deepcopy(cell)
        piece["source"] = "\n".join(lines[start:end]).strip("\n")
        piece["id"] = cell["id"] if k == 0 else f"{cell['id']}-{k}"
        pieces.append(piece)
    return pieces


def normalise(notebook: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``notebook`` (nbformat 4, sources as strings) as the course saves it."""
    notebook = copy.deepcopy(notebook)
    notebook["metadata"]["kernelspec"] = dict(KERNELSPEC)
    notebook["metadata"]["rise"] = dict(RISE)
    cells: list[dict[str, Any]] = []
    number = 0  # the exercises checked so far
    for cell in notebook["cells"]:
        checked = CHECKED.search(cell["source"]) if cell["cell_type"] == "code" else None
        if checked:
            number, asked = number + 1, cells[-1]
            assert asked["cell_type"] == "markdown", f"{checked.group(1)}: no question before it"
            asked["source"] = link_spec(ask(asked["source"], number, checked.group(1)))
        for piece in split_at_headings(cell):
            if piece["cell_type"] == "markdown":
                piece["source"] = link_spec(piece["source"])
            kind = slide_type(piece, cells[-1] if cells else None)
            piece["metadata"].pop("slideshow", None)
            if kind != "-":
                piece["metadata"]["slideshow"] = {"slide_type": kind}
            cells.append(piece)
    notebook["cells"] = cells
    return notebook


def main() -> None:
    import nbformat

    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        before = nbformat.read(path, as_version=4)
        after = nbformat.from_dict(normalise(before))
        nbformat.validate(after)
        if after != before:
            nbformat.write(after, path)
            print(f"rewrote {path.name}")


if __name__ == "__main__":
    main()
