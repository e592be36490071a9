"""The website's sources, without building it: the theory split into chapters, the links moved to
where the stage puts their targets, every "SPEC §n" made a link (``placement_edu.course.site``).
Sphinx is only started, to fail (``tests/test_site.py`` builds the site and opens every page)."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from placement_edu.course import notebooks
from placement_edu.course.site import (
    CITATION,
    HEADING,
    SPANS,
    WIDGET_NOTE,
    Places,
    course_markdown,
    github_anchor,
    link_spec,
    link_spec_in_docstring,
    relink,
    saved_widget_views,
    split_theory,
    stage,
)
from placement_edu import PUBLIC_MODULES, TOPIC_MODULES
from placement_edu.errors import PlacementError

pytestmark = pytest.mark.fast

REPO = "https://github.com/placement-edu/placement_edu"
ROOT = Path(__file__).resolve().parents[1]
THEORY = """# The theory

See [§1](#1-sizes) and [rule 1](#s2-rule-1).

## Notation

Ψ is the parameter count.

<a id="s1"></a>

## 1. Sizes

### Activations of a layer

<a id="s2"></a>

## 2. Modes

<a id="s2-rule-1"></a>

**Rule 1.** As [§1 says](#1-sizes), and [this rule](#s2-rule-1).

## References
"""


def places() -> Places:
    _, chapters = split_theory(THEORY)
    staged = {
        "docs/index.md": "index.md",
        "docs/theory.md": "docs/theory.md",
        "docs/cli.md": "docs/cli.md",
        "notebooks/02_replicated.ipynb": "notebooks/02_replicated.ipynb",
    }
    return Places(staged, {a: c.name for c in chapters for a in c.anchors}, REPO)


def test_the_theory_is_split_into_one_chapter_per_section_headed_by_it() -> None:
    intro, chapters = split_theory(THEORY)
    assert intro.startswith("# The theory") and "## " not in intro
    assert [c.name for c in chapters] == ["notation", "s1", "s2", "references"]
    s1, s2 = chapters[1], chapters[2]
    # the section's heading is the page's title; its subsections move up one level too
    assert s1.text.startswith("(s1)=\n\n# 1. Sizes\n\n## Activations of a layer\n")
    assert s1.anchors == {"s1", "1-sizes", "activations-of-a-layer"}
    # an explicit anchor becomes a MyST target, which Sphinx resolves from any page
    assert "(s2-rule-1)=\n\n**Rule 1.**" in s2.text and '<a id="' not in s2.text
    assert s2.anchors == {"s2", "s2-rule-1", "2-modes"}


def test_a_link_into_the_theory_leads_to_the_chapter_that_holds_its_anchor() -> None:
    p = places()
    text = "[a](../docs/theory.md#s2-rule-1) [b](../docs/theory.md#1-sizes) [c](../docs/theory.md)"
    assert relink(text, "notebooks/02_replicated.ipynb", "notebooks/02_replicated.ipynb", p) == (
        "[a](../docs/theory/s2.md#s2-rule-1) [b](../docs/theory/s1.md#1-sizes) "
        "[c](../docs/theory.md)"
    )
    # from the guides (docs/), and from the landing page, which the stage moves to the root
    assert relink("[r](theory.md#s2)", "docs/cli.md", "docs/cli.md", p) == "[r](theory/s2.md#s2)"
    assert relink(
        "[0](../notebooks/02_replicated.ipynb) [t](theory.md#notation)",
        "docs/index.md",
        "index.md",
        p,
    ) == ("[0](notebooks/02_replicated.ipynb) [t](docs/theory/notation.md#notation)")


def test_inside_a_chapter_an_anchor_of_the_whole_theory_finds_its_chapter() -> None:
    _, chapters = split_theory(THEORY)
    s2 = chapters[2]
    moved = relink(s2.text, "docs/theory.md", "docs/theory/s2.md", places())
    assert "[§1 says](s1.md#1-sizes)" in moved  # another chapter
    assert "[this rule](#s2-rule-1)" in moved  # this one


def test_a_file_the_site_does_not_carry_is_linked_in_the_repository() -> None:
    p = places()
    text = (
        "[readme](../README.md) [src](../placement_edu/timing.py#L3) [web](https://example.org/a.md)"
        " `[code](../README.md)` ![figure](figure.png)"
    )
    assert relink(text, "docs/cli.md", "docs/cli.md", p) == (
        f"[readme]({REPO}/blob/main/README.md) [src]({REPO}/blob/main/placement_edu/timing.py#L3)"
        " [web](https://example.org/a.md) `[code](../README.md)` ![figure](figure.png)"
    )


def test_every_plain_spec_citation_becomes_a_link_and_code_is_left_alone() -> None:
    text = (
        "Both (SPEC §4 rule\n1) and SPEC §3's check; [SPEC §5](x.md#s5) stays;"
        " `SPEC §6` is code.\n```python\n# SPEC §7\n```\n"
    )
    assert link_spec(text, "../docs/theory.md") == (
        "Both ([SPEC §4 rule 1](../docs/theory.md#s4-rule-1)) and "
        "[SPEC §3](../docs/theory.md#s3)'s check; [SPEC §5](x.md#s5) stays;"
        " `SPEC §6` is code.\n```python\n# SPEC §7\n```\n"
    )
    # ... and then, moved with the other links, to the chapter (§3's anchor is "s3" there)
    p = places()
    assert course_markdown("SPEC §2 rule 1", "docs/cli.md", p) == (
        "[SPEC §2 rule 1](theory/s2.md#s2-rule-1)"
    )


def test_a_docstring_cites_the_theory_by_reference_but_not_in_its_literals() -> None:
    lines = ["Time (SPEC §9): ``SPEC §9`` stays, and SPEC §4 rule 2's rule."]
    link_spec_in_docstring(None, "module", "m", None, None, lines)
    assert lines == [
        "Time (:ref:`SPEC §9 <s9>`): ``SPEC §9`` stays, and "
        ":ref:`SPEC §4 rule 2 <s4-rule-2>`'s rule."
    ]


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The course's real sources, staged as the site builds them (no Sphinx)."""
    into = tmp_path_factory.mktemp("stage")
    stage(into, REPO)
    return into


def anchors(markdown: str) -> set[str]:
    """The fragments a page has: its MyST targets and its headings' anchors."""
    return set(re.findall(r"(?m)^\(([^)]+)\)=$", markdown)) | {
        github_anchor(title) for title in HEADING.findall(markdown)
    }


def _markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


def test_the_staged_course_cites_the_theory_only_by_links_that_resolve(staged: Path) -> None:
    pages = sorted([*staged.rglob("*.md"), *staged.rglob("*.ipynb")])
    assert len(list(staged.glob("notebooks/*.ipynb"))) == 16
    assert {p.stem for p in staged.glob("docs/theory/*.md")} >= {"notation", "references"} | {
        f"s{n}" for n in range(1, 10)
    }
    unlinked, broken, links = [], [], 0
    for page in pages:
        text = _markdown(page)
        plain = SPANS.sub("", text)  # without code, links and images
        unlinked += [f"{page.name}: {m.group()}" for m in CITATION.finditer(plain)]
        for span in SPANS.finditer(text):
            target = span["target"] or ""
            if target.startswith(f"{REPO}/blob/main/"):
                path = target.removeprefix(f"{REPO}/blob/main/").partition("#")[0]
                if not (ROOT / path).exists() or (staged / path).exists():
                    broken.append(f"{page.name}: {target} (not in the repository, or on the site)")
            if span["code"] or "theory" not in target or target.startswith("http"):
                continue
            links += 1
            file, _, fragment = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.is_file():
                broken.append(f"{page.name}: {target}")
            elif fragment and fragment not in anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{page.name}: {target} (no anchor)")
    assert unlinked == [] and broken == []
    assert links > 80  # the notebooks cite the theory throughout


def test_each_chapter_with_saved_widgets_says_they_recompute_only_live(staged: Path) -> None:
    for path in notebooks():
        source = json.loads(path.read_text(encoding="utf-8"))
        page = json.loads((staged / "notebooks" / path.name).read_text(encoding="utf-8"))
        notes = [c for c in page["cells"] if c["source"] == WIDGET_NOTE]
        assert len(notes) == (1 if saved_widget_views(source) else 0), path.name
        assert [page["cells"].index(n) for n in notes] in ([], [1])  # under the title
        assert len(page["cells"]) == len(source["cells"]) + len(notes)
        assert saved_widget_views(page) == saved_widget_views(source) > 0


def test_the_api_reference_documents_every_public_module_the_topics_on_the_roots_page(
    staged: Path,
) -> None:
    """The reference is generated from the docstrings (autodoc): one page per public module, the
    core's topics (``TOPIC_MODULES``) as sections of the root's page, each module once."""
    pages = {p.stem: p.read_text(encoding="utf-8") for p in (staged / "api").glob("placement_*.md")}
    documented = {m: page for page in pages for m in re.findall(r"automodule:: (\S+)", pages[page])}
    assert sorted(documented) == sorted(PUBLIC_MODULES)
    assert {m for m, page in documented.items() if page != m} == set(TOPIC_MODULES)
    assert {documented[m] for m in TOPIC_MODULES} == {"placement_edu"}


def test_a_failed_build_says_so_in_one_line_naming_its_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("sphinx", reason="the site needs the [site] extra")
    from placement_edu.course import site

    settings = site.configuration
    monkeypatch.setattr(
        site, "configuration", lambda *args: {**settings(*args), "extensions": ["no_such_module"]}
    )
    with pytest.raises(PlacementError) as raised:
        site.build(tmp_path / "out")
    message = str(raised.value)
    assert "\n" not in message and "no_such_module" in message
    log = Path(message.rpartition("Sphinx's log: ")[2])
    assert log.parent.parent == Path(tempfile.gettempdir())
    assert "no_such_module" in log.read_text(encoding="utf-8")  # the stage is kept, for a look
    shutil.rmtree(log.parent)
