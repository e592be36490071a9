"""docs/ holds the theory the course cites as "SPEC §n" (issue 25, item 7).

Three things are pinned: every "SPEC §n" (and "SPEC §n rule m") cited in the notebooks, in the
package's source and in README.md names a section (or rule) that docs/theory.md has; the formulas
and figures docs/theory.md states are the ones the package computes (each claim is looked up in the
docs' text, so a claim edited away fails too); and every relative link in docs/ resolves.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from placement_edu import (
    ModelSpec,
    State,
    TransformerSpec,
    analyze,
    check,
    get_precision,
    get_strategy,
)
from placement_edu.faults import FAULTS
from placement_edu.units import GB, GiB
from placement_edu.schedule import OP_COSTS, pipeline_bubble
from placement_edu.precision import PRESETS
from placement_edu.composition import RULES
from placement_edu.timing import flops_per_token, ring_steps

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
THEORY = DOCS / "theory.md"
README = ROOT / "README.md"
#: The manual's pages, moved out of README into docs/ (issue 38): docs/NAME.md each.
MANUAL = ("cli", "python", "reliability", "peak", "time", "calibration", "measured")

#: The sections the course cites, with the titles the code's comments use (issue 25, item 7).
SECTIONS = {
    1: "Training states and their sizes",
    2: "The five placement modes",
    3: "Memory derivation",
    4: "Communication derivation",
    5: "Correctness",
    6: "Composition",
    7: "Measured versus predicted",
    8: "Things published sources get wrong",
    9: "Time",
}

SECTION_HEADING = re.compile(r"^## (\d+)\. (.+?)\s*$", re.MULTILINE)
SUBSECTION_HEADING = re.compile(r"^### (\d+)\.(\d+)\b", re.MULTILINE)
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)
SECTION_REF = r"§\d+(?:\.\d+)?"
#: "SPEC §4", "SPEC §5, §7", "SPEC §3–§4", "SPEC §4 rule 1", "SPEC §6 rules 1 and 3".
CITATION = re.compile(
    rf"SPEC ({SECTION_REF}(?:\s*(?:,|–|-|and|or)\s*{SECTION_REF})*)"
    r"(?:,? rules? (\d+(?:\s*(?:,|and|or|–)\s*\d+)*))?"
)
#: A rule cited without "SPEC" ("SPEC §5; §4 rule 1"): only this theory numbers rules.
RULE_CITATION = re.compile(r"§(\d+),? rules? (\d+(?:\s*(?:,|and|or|–)\s*\d+)*)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


# --- what the course cites -------------------------------------------------------------------
def _strings(node: object) -> Iterator[str]:
    """Every string in a notebook's JSON: cell sources, outputs, metadata."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)


def course_texts() -> Iterator[tuple[str, str]]:
    """(where, text) for the notebooks, the package's source, README.md and the other pages of
    docs/ (the manual moved there from README, issue 38)."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        yield path.name, "\n".join(_strings(json.loads(path.read_text(encoding="utf-8"))))
    for path in sorted((ROOT / "placement_edu").rglob("*")):
        if path.suffix in {".py", ".md", ".json", ".txt", ".toml"} and path.is_file():
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        if path != THEORY:
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def citations(text: str) -> Iterator[tuple[str, int | None]]:
    """("4", None), ("4.2", None), ("4", 1) ...: each section, subsection or rule ``text`` cites."""
    for match in CITATION.finditer(text):
        refs = re.findall(r"§(\d+(?:\.\d+)?)", match.group(1))
        if "–" in match.group(1) and len(refs) == 2 and "." not in "".join(refs):
            refs = [str(n) for n in range(int(refs[0]), int(refs[1]) + 1)]  # a range: §3–§4
        for ref in refs:
            yield ref, None
        if match.group(2):
            for rule in re.findall(r"\d+", match.group(2)):
                yield refs[0], int(rule)
    for match in RULE_CITATION.finditer(text):
        for rule in re.findall(r"\d+", match.group(2)):
            yield match.group(1), int(rule)


def cited() -> dict[tuple[str, int | None], list[str]]:
    found: dict[tuple[str, int | None], list[str]] = {}
    for where, text in course_texts():
        for key in citations(text):
            found.setdefault(key, [])
            if where not in found[key]:
                found[key].append(where)
    return found


# --- what the docs have ----------------------------------------------------------------------
def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens ("4. Communication derivation" -> "4-communication-derivation")."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every fragment a link into ``text`` may name: its explicit ids and its headings'."""
    return set(ANCHOR.findall(text)) | {github_anchor(h) for h in HEADING.findall(text)}


def documented(text: str) -> set[tuple[str, int | None]]:
    """The sections ("4"), subsections ("4.2") and rules (("4", 1)) ``text`` has."""
    have: set[tuple[str, int | None]] = {(n, None) for n, _ in SECTION_HEADING.findall(text)}
    have |= {(f"{a}.{b}", None) for a, b in SUBSECTION_HEADING.findall(text)}
    for anchor in ANCHOR.findall(text):
        rule = re.fullmatch(r"s(\d+)-rule-(\d+)", anchor)
        if rule:
            have.add((rule.group(1), int(rule.group(2))))
    return have


def missing(cites: dict[tuple[str, int | None], list[str]], text: str) -> list[str]:
    have = documented(text)
    return [
        f"SPEC §{ref}{f' rule {rule}' if rule else ''} (cited in {', '.join(where[:3])}) is not "
        f"in docs/theory.md"
        for (ref, rule), where in sorted(cites.items(), key=str)
        if (ref, rule) not in have
    ]


def theory() -> str:
    return THEORY.read_text(encoding="utf-8")


def flat(text: str) -> str:
    """Whitespace collapsed, so a claim may wrap across lines in the Markdown."""
    return re.sub(r"\s+", " ", text)


def section(n: int) -> str:
    """The text of section ``n`` of docs/theory.md, up to the next ``## `` heading."""
    text = theory()
    start = re.search(rf"^## {n}\. .*$", text, re.MULTILINE)
    assert start, f"docs/theory.md has no section {n}"
    end = re.search(r"^## ", text[start.end() :], re.MULTILINE)
    return text[start.end() : start.end() + end.start() if end else len(text)]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row of ``text`` (header and rule lines included)."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]


def claim(n: int, words: str) -> None:
    """``words`` is stated in section ``n`` of docs/theory.md (wrapped lines allowed)."""
    assert flat(words) in flat(section(n)), f"docs/theory.md §{n} no longer says {words!r}"


# --- every cited section exists --------------------------------------------------------------
def test_docs_has_the_nine_sections_the_course_cites_with_their_titles() -> None:
    headings = {int(n): title for n, title in SECTION_HEADING.findall(theory())}
    assert headings == SECTIONS
    have = anchors(theory())
    for n, title in SECTIONS.items():
        assert {f"s{n}", github_anchor(f"{n}. {title}")} <= have
    assert github_anchor("4. Communication derivation") == "4-communication-derivation"


def test_the_course_cites_sections_rules_and_the_sections_all_exist() -> None:
    cites = cited()
    # The course cites every section, and the rules of §4 and §6 by number (the count today: ~380).
    assert {ref for ref, rule in cites if rule is None} >= {str(n) for n in SECTIONS}
    assert ("4", 1) in cites and ("6", 3) in cites
    assert missing(cites, theory()) == []


def test_a_section_missing_from_the_docs_is_reported() -> None:
    cites = cited()
    without_9 = re.sub(r"^## 9\. Time$", "## Time", theory(), flags=re.MULTILINE)
    without_rule = theory().replace('<a id="s4-rule-5"></a>', "")
    assert any(m.startswith("SPEC §9 ") for m in missing(cites, without_9))
    assert any(m.startswith("SPEC §4 rule 5 ") for m in missing(cites, without_rule))
    assert missing({("2.2", None): ["made up"]}, theory()) == [
        "SPEC §2.2 (cited in made up) is not in docs/theory.md"
    ]


def test_citations_are_read_in_every_form_the_course_writes() -> None:
    text = "SPEC §5, §7; SPEC §3–§4; SPEC §4 rule 1; SPEC §6 rules 1 and 3; SPEC §8.2; §4 rule 2"
    assert set(citations(text)) == {
        ("5", None),
        ("7", None),
        ("3", None),
        ("4", None),
        ("4", 1),
        ("4", 2),
        ("6", None),
        ("6", 1),
        ("6", 3),
        ("8.2", None),
    }


# --- relative links resolve ------------------------------------------------------------------
def link_problems(path: Path, text: str | None = None) -> list[str]:
    """Each relative link of the page at ``path`` (its text, or ``text``) whose file, or whose
    ``#anchor`` in a Markdown file, does not exist."""
    text = path.read_text(encoding="utf-8") if text is None else text
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:: not checked here
        file, _, fragment = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            problems.append(f"{path.relative_to(ROOT)}: {target} -> no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
            problems.append(f"{path.relative_to(ROOT)}: {target} -> no such anchor")
    return problems


def test_relative_links_in_docs_resolve_to_files_and_anchors() -> None:
    pages = sorted(DOCS.glob("*.md"))
    assert {p.name for p in pages} >= {"README.md", "theory.md"}
    assert [problem for page in pages for problem in link_problems(page)] == []
    # ...and the check fails on a broken one.
    assert github_anchor("5. Correctness") in anchors(theory())
    assert "no-such-section" not in anchors(theory())


def test_readme_and_contributing_link_to_docs_and_every_relative_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = {t.partition("#")[0] for t in LINK.findall(readme) if t.startswith("docs/")}
    # the manual's pages, each linked from README (issue 38)
    assert targets >= {f"docs/{page}.md" for page in MANUAL}, "README.md misses a docs/ page"
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md"]
    assert [problem for page in pages for problem in link_problems(page)] == []
    # ...a link to a missing page, or to an anchor theory.md does not have, is reported
    broken = ROOT / "docs" / "cli.md"
    text = "[x](theory.md#s10) [y](no-such-page.md) [z](theory.md#s4-rule-1) [w](https://a.b/c)"
    assert link_problems(broken, text) == [
        "docs/cli.md: theory.md#s10 -> no such anchor",
        "docs/cli.md: no-such-page.md -> no such file",
    ]


def test_docs_readme_says_spec_n_is_section_n_of_theory() -> None:
    text = flat((DOCS / "README.md").read_text(encoding="utf-8"))
    assert '"SPEC §n"' in text and "refers to section n of [theory.md](theory.md)" in text


# --- README: the front page (issue 38) ------------------------------------------------------
def first_paragraph(markdown: str) -> str:
    """The first block of text that is not a heading, a badge or a fenced block, unwrapped."""
    for block in markdown.split("\n\n"):
        block = block.strip()
        if block and not block.startswith(("#", "[![", "```", "<")):
            return flat(block)
    return ""


def test_readme_is_a_front_page_that_says_first_what_this_is_and_for_whom() -> None:
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    first = first_paragraph(readme)
    assert "placement_edu" in first and "distributed" in first, first
    for reader in ("learners", "lecturers", "practitioners"):
        assert reader in first, first
    assert first_paragraph("# Title\n\n[![badge](b.svg)](u)\n\nplacement_edu teaches") == (
        "placement_edu teaches"
    )
    # ...and the manual is in docs/, each page with its title and what it covers first
    for name in MANUAL:
        page = (DOCS / f"{name}.md").read_text(encoding="utf-8")
        assert page.startswith("# "), name
        assert len(first_paragraph(page)) > 150, name


# --- the docs' formulas are the package's ----------------------------------------------------
PSI = 7_500_000_000  # ZeRO Table 1's model


def test_s1_precision_table_is_the_packages_presets() -> None:
    claim(1, "2 + 2 + 12 = 16 bytes per parameter")
    rows = [r for r in table_rows(section(1)) if r[0].startswith("`")]
    table = {r[0].strip("`"): (r[1], r[2]) for r in rows}
    assert set(table) == set(PRESETS)
    for name, (split, total) in table.items():
        p = get_precision(name)
        assert split == f"{p.params} / {p.grads} / {p.optimizer}"
        assert total == f"{p.model_state} B"
    # ZeRO §3.1: K = 12 for mixed-precision Adam, 16Ψ in all; Megatron's main_grad 18; Playbook 20.
    assert [get_precision(n).model_state for n in ("mixed_adam", "mixed_adam_fp32_grads")] == [
        16,
        18,
    ]
    assert get_precision("mixed_adam_fp32_accum").model_state == 20


def test_s3_strategy_table_placements_and_formulas() -> None:
    rows = [r for r in table_rows(section(3)) if r[0].startswith("`") and len(r) == 6]
    assert [r[0].split()[0].strip("`") for r in rows] == ["dp", "zero1", "zero2", "zero3"]
    for name, p, g, o, _, _ in rows:
        pl = get_strategy(name.split()[0].strip("`")).placement
        modes = [str(pl.mode(s, "data")) for s in (State.PARAMS, State.GRADS, State.OPTIMIZER)]
        assert modes == [p, g, o]
    for words in ("4Ψ + 12Ψ/N", "2Ψ + 14Ψ/N", "| 16Ψ/N | (2 + 2 + K)Ψ/N |"):
        claim(3, words)
    for n in (1, 2, 8, 64, 1000):
        got = [analyze(s, PSI, n).memory.model_state for s in ("dp", "zero1", "zero2", "zero3")]
        K = 12  # ZeRO §5.1: (2 + 2 + K)Ψ, K = 12 for mixed-precision Adam
        assert got == [
            (2 + 2 + K) * PSI,
            4 * PSI + Fraction(K * PSI, n),
            2 * PSI + Fraction((2 + K) * PSI, n),
            Fraction((2 + 2 + K) * PSI, n),
        ]


def test_s3_check_figures_are_the_packages() -> None:
    # ZeRO Table 1 (7.5B, N = 64: 120 / 31.4 / 16.6 / 1.88 GB printed) and the placement-semantics
    # paper's 70B example (arXiv 2601.02311: 1120 GB -> 140 GB at N = 8).
    rows = [r for r in table_rows(section(3)) if re.match(r"[\d.]+e9, \d+", r[0])]
    assert len(rows) == 2
    for row in rows:
        psi, n = row[0].split()[0].rstrip(","), int(row[0].split()[1])
        got = [
            Fraction(analyze(s, int(float(psi)), n).memory.model_state) / GB
            for s in ("dp", "zero1", "zero2", "zero3")
        ]
        assert got == [Fraction(v) for v in row[1:]]


@pytest.mark.parametrize(
    ("words", "recompute", "sp"),
    [
        ("s·b·h·(10 + 24/t + 5·a·s/(h·t))", "none", False),
        ("s·b·h·(34/t + 5·a·s/(h·t))", "none", True),
        ("s·b·h·(10 + 24/t)", "selective", False),
        ("s·b·h·34/t", "selective", True),
        ("2·s·b·h", "full", False),
        ("2·s·b·h/t", "full", True),
    ],
)
def test_s3_korthikanti_activation_bytes(words: str, recompute: str, sp: bool) -> None:
    # Korthikanti et al. 2022, Table 2: 16-bit activations, bytes per layer, one micro-batch.
    claim(3, words)
    s, b, h, a, t = 2048, 2, 1024, 16, 8
    spec = TransformerSpec(
        layers=1, hidden=h, heads=a, seq=s, vocab=1000, micro_batch=b,
        recompute=recompute, sequence_parallel=sp,
    )  # fmt: skip
    # The docs' formula, evaluated exactly (Fractions) at these widths.
    names = {k: Fraction(v) for k, v in {"s": s, "b": b, "h": h, "a": a, "t": t}.items()}
    assert spec.activation_bytes_per_layer(t) == eval(words.replace("·", "*"), {}, names)


def test_s3_korthikanti_without_parallelism() -> None:
    claim(3, "s·b·h·(34 + 5·a·s/h)")
    s, b, h, a = 2048, 1, 1024, 16
    spec = TransformerSpec(layers=1, hidden=h, heads=a, seq=s, vocab=1000, micro_batch=b)
    assert spec.activation_bytes_per_layer(1) == s * b * h * (34 + Fraction(5 * a * s, h))


@pytest.mark.parametrize("n", [2, 3, 8, 64, 1000])
def test_s4_cost_table_ring_and_zero_conventions(n: int) -> None:
    for words in ("| all-reduce | 2(N − 1)/N · S | 2S |", "(N − 1)/N · S | S |", "| S, counted"):
        claim(4, words)
    assert OP_COSTS["all_reduce"].ring(n) == Fraction(2 * (n - 1), n)
    assert (
        OP_COSTS["all_gather"].ring(n) == OP_COSTS["reduce_scatter"].ring(n) == Fraction(n - 1, n)
    )
    assert OP_COSTS["send"].ring(n) == 1
    zero = {op: OP_COSTS[op].zero for op in ("all_reduce", "all_gather", "reduce_scatter", "send")}
    assert zero == {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "send": 1}


@pytest.mark.parametrize("n", [2, 3, 8, 64, 1000])
def test_s4_result_dp_2psi_zero3_3psi_is_1_5x_in_both_conventions(n: int) -> None:
    claim(4, "`dp` 2Ψ, `zero1` 2Ψ, `zero2` 2Ψ, `zero3` 3Ψ. ZeRO-3 moves exactly 1.5× the bytes")
    reports = {s: analyze(s, PSI, n) for s in ("dp", "zero1", "zero2", "zero3")}
    # ZeRO §7.2: DP, P_os and P_os+g move 2Ψ; P_os+g+p 3Ψ, 1.5x.
    assert [r.volume_psi for r in reports.values()] == [2, 2, 2, 3]
    # DP's ring all-reduce of 2-byte gradients: 2(N-1)/N · 2Ψ bytes per device.
    assert reports["dp"].ring_bytes == Fraction(2 * (n - 1), n) * 2 * PSI
    assert reports["zero3"].ring_bytes / reports["dp"].ring_bytes == Fraction(3, 2)


def test_s4_rule_1_the_other_zero1_schedule_is_3psi() -> None:
    claim(4, "costs 2Ψ + Ψ = 3Ψ")
    other = analyze("zero1_allreduce", 10**9, 8)  # PyTorch ZeroRedundancyOptimizer under DDP
    # One all-reduce of the gradients, then each of the 8 owners broadcasts its updated slice.
    assert [o.op for o in other.schedule.collectives] == ["all_reduce"] + ["broadcast"] * 8
    assert other.volume_psi == 3
    assert analyze("zero1", 10**9, 8).volume_psi == 2  # ZeRO §7.2.1


def test_s4_rule_3_kept_through_backward_gathers_once() -> None:
    claim(
        4, "Kept through backward instead (`False`, FSDP `SHARD_GRAD_OP`), it costs one all-gather"
    )
    kept = analyze("fsdp_grad_op", 10**9, 8)  # a bare Ψ = 1e9: GPT-2 XL's 48 layers
    ops = [(o.op, o.phase) for o in kept.schedule.collectives]
    assert ops == [("all_gather", "forward")] * 48 + [("reduce_scatter", "backward")]
    assert kept.volume_psi == 2


def test_s4_rule_5_reductions_per_micro_batch_multiply_by_m() -> None:
    claim(4, "(zero3 at m = 8: 24Ψ)")
    claim(4, "`zero2` at m = 8 costs 9Ψ")
    at_8 = {
        s: analyze(dataclasses.replace(get_strategy(s), micro_batches=8), 10**9, 8).volume_psi
        for s in ("zero1", "zero2", "zero3")
    }
    assert at_8 == {"zero1": 2, "zero2": 9, "zero3": 24}


def test_s4_tensor_parallel_4_all_reduces_per_layer_of_b_s_h() -> None:
    claim(4, "so 4 all-reduces per layer per micro-batch")
    s, b, h, layers = 512, 2, 1024, 4
    model = TransformerSpec(layers=layers, hidden=h, heads=16, seq=s, vocab=1000, micro_batch=b)
    ops = [o for o in analyze("tp", model, 4).schedule.collectives if o.axis == "tensor"]
    assert [o.op for o in ops] == ["all_reduce"] * (4 * layers)
    assert {o.payload_bytes for o in ops} == {b * s * h * 2}  # b·s·h, 16-bit


def test_s4_pipeline_bubble_in_both_conventions() -> None:
    claim(4, "(p − 1)/m of the ideal time, or (p − 1)/(m + p − 1) of the total time")
    p, m = 4, 8
    # Narayanan et al. 2021 §2.2: (p-1)/m; GPipe (Huang et al. 2019): (p-1)/(m+p-1).
    assert pipeline_bubble(p, m) == {"of_ideal": Fraction(3, 8), "of_total": Fraction(3, 11)}


def test_s5_faults_table_is_the_packages() -> None:
    rows = [r for r in table_rows(section(5)) if r[0].startswith("`")]
    table = {r[0].strip("`"): r[2].replace(" ", "_") for r in rows}
    assert table == {name: fault.condition for name, fault in FAULTS.items()}
    assert check("zero2", fault="skip-grad-reduce").broken == ["gradient_integrity"]
    assert check("zero1", fault="skip-param-sync").broken == ["state_consistency"]
    assert check("zero3", fault="stale-gather").broken == ["state_consistency"]


def test_s6_rules_are_numbered_as_the_checker_numbers_them() -> None:
    numbered = re.findall(r"^(\d)\. \*\*(.+?)\.\*\*", section(6), re.MULTILINE)
    assert {int(n): name.lower() for n, name in numbered} == RULES


def test_s7_offload_moves_2_psi_over_n_each_way_on_the_host_link() -> None:
    claim(7, "(2Ψ/N bytes per device) and the updated fp16 parameter slice back up (2Ψ/N)")
    psi, n = 10**9, 8
    off = analyze("zero2_offload", psi, n)
    assert off.schedule.host_link_bytes == Fraction(2 * psi, n) + Fraction(2 * psi, n)
    assert off.volume_psi == 2  # ZeRO-Offload: the network traffic stays ZeRO-2's


def test_s8_zero3_is_n_times_and_the_8x_is_zero2s_limit() -> None:
    claim(8, "exactly N× (8× at N = 8: the 70B example's 1120 GB → 140 GB)")
    claim(8, "16/(2 + 14/N)")
    for n in (2, 8, 64, 1000):
        dp = analyze("dp", PSI, n).memory.model_state
        assert dp / analyze("zero3", PSI, n).memory.model_state == n
        zero2 = Fraction(dp) / analyze("zero2", PSI, n).memory.model_state
        assert zero2 == Fraction(16) / (2 + Fraction(14, n)) < 8  # ZeRO §5.2's "8x": a limit


def test_s8_140_gb_is_130_39_gib_and_zero3_can_peak_above_zero2() -> None:
    claim(8, "140e9 / 2^30 = 130.39 GiB")
    assert round(140 * GB / GiB, 2) == 130.39
    claim(8, "ZeRO-3 can peak above ZeRO-2 on small models")
    one_unit = ModelSpec(10**6)  # gathered whole; a bare Ψ is gathered a layer at a time
    z2, z3 = analyze("zero2", one_unit, 2).memory, analyze("zero3", one_unit, 2).memory
    assert z3.model_state < z2.model_state and z3.peak > z2.peak


def test_s9_compute_and_ring_steps() -> None:
    claim(9, "about 6·Ψ·tokens FLOPs (2Ψ forward, 4Ψ backward per token), 8·Ψ·tokens with full")
    psi = 10**9
    assert flops_per_token(psi) == {"forward": 2 * psi, "backward": 4 * psi, "step": 0}
    assert sum(flops_per_token(psi, "full").values()) == 8 * psi
    claim(9, "N − 1 steps for an all-gather or a reduce-scatter and 2(N − 1) for an all-reduce")
    for n in (2, 8, 64):
        assert ring_steps("all_gather", n) == ring_steps("reduce_scatter", n) == n - 1
        assert ring_steps("all_reduce", n) == 2 * (n - 1)


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number, line) of each line outside fenced blocks: a command's output is shown as wide as
    it is printed."""
    fenced = False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield i, line


def test_docs_lines_are_within_100_characters_outside_tables() -> None:
    long = [
        f"{page.name}:{i}"
        for page in sorted(DOCS.glob("*.md"))
        for i, line in prose_lines(page.read_text(encoding="utf-8"))
        if len(line) > 100 and not line.startswith("|")
    ]
    assert long == []
    assert [i for i, _ in prose_lines("a\n```console\n" + "x" * 101 + "\n```\nb")] == [1, 5]


def _limit_value(text: str) -> int:
    """'10^15' or '2^40' or '4096', as docs/reliability.md's limits table writes them."""
    base, _, power = text.partition("^")
    return int(base) ** int(power) if power else int(base)


def test_the_limits_table_is_every_limit_of_errors_py_with_its_value():
    import placement_edu.errors as errors

    section = (DOCS / "reliability.md").read_text().split("## The limits", 1)[1].split("\n## ")[0]
    rows = re.findall(r"^\| `(MAX_\w+)` \| ([\d^]+) \|", section, flags=re.M)
    defined = {
        name: value
        for name, value in vars(errors).items()
        if name.startswith("MAX_") and name != "MAX_EXACT_FLOAT"  # (a float's, not a limit)
    }
    assert {name: _limit_value(text) for name, text in rows} == defined


def test_every_count_of_the_courses_notebooks_is_the_number_of_notebooks() -> None:
    """README's "a 16-notebook course", CONTRIBUTING's "16 notebooks": each count of the course's
    notebooks in the pages a reader opens first is the number in notebooks/ (a chapter added
    without the sentence beside it fails here)."""
    count = len(list((ROOT / "notebooks").glob("*.ipynb")))
    found = []
    for page in ("README.md", "CONTRIBUTING.md", "docs/index.md", "docs/instructors.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        found += [(page, int(n)) for n in re.findall(r"\b(\d+)[- ]notebooks?\b", text)]
    assert found and all(n == count for _, n in found), (count, found)
