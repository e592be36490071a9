"""``placement-edu course``: the copy a learner gets (never over their edits), the line that says
what was kept and where a fresh copy can go, the JupyterLab it starts, the one repository URL the
Binder links are built from, and the one line that names a missing extra."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from placement_edu import course
from placement_edu.cli import main
from placement_edu.cli.course import kept_line, lab_command
from placement_edu.course import (
    FIRST,
    NEEDS,
    RECORD,
    SERVER_CONFIG,
    binder_url,
    copy_course,
    course_files,
    fresh_folder,
    repository,
    require,
)
from placement_edu.errors import PlacementError

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
EDITED = "notebooks/03_sharded.ipynb"


@pytest.fixture(scope="module")
def first_copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, course.Copied]:
    dest = tmp_path_factory.mktemp("learner") / "placement-edu-course"
    return dest, copy_course(dest)


def test_the_course_is_the_16_notebooks_and_the_docs_pages() -> None:
    files = course_files()
    notebooks = [f for f in files if f.startswith("notebooks/")]
    assert len(notebooks) == 16 and notebooks[0] == FIRST
    assert notebooks == [f"notebooks/{p.name}" for p in course.notebooks()]
    assert "docs/theory.md" in files
    assert all(f.startswith(("notebooks/", "docs/")) for f in files)
    assert not [f for f in files if "/." in f or "__pycache__" in f or "_build" in f]


def test_a_fresh_copy_mirrors_notebooks_and_docs(first_copy: tuple[Path, course.Copied]) -> None:
    dest, copied = first_copy
    assert copied.kept == () and copied.written == tuple(course_files())
    for name in course_files():
        assert (dest / name).read_bytes() == (ROOT / name).read_bytes(), name
    # every link of a notebook into docs/ (../docs/theory.md#s4) opens a page of the copy
    links = {
        link
        for notebook in (dest / "notebooks").glob("*.ipynb")
        for link in re.findall(r"\.\./docs/[\w./-]+?\.md", notebook.read_text())
    }
    assert "../docs/theory.md" in links
    assert [link for link in links if not (dest / "notebooks" / link).is_file()] == []
    record = json.loads((dest / RECORD).read_text())
    assert record[EDITED] == hashlib.sha256((ROOT / EDITED).read_bytes()).hexdigest()


def test_a_rerun_keeps_an_edited_notebook_and_names_it(tmp_path: Path) -> None:
    dest = tmp_path / "course"
    copy_course(dest)
    (dest / EDITED).write_text('{"my": "answers"}')
    (dest / "notebooks" / "my_own.ipynb").write_text("{}")  # not the course's: left alone
    again = copy_course(dest)
    assert again.kept == (EDITED,) and again.written == ()
    assert (dest / EDITED).read_text() == '{"my": "answers"}'
    assert (dest / "notebooks" / "my_own.ipynb").read_text() == "{}"
    assert kept_line(again) == (
        f"kept your edited 03_sharded.ipynb in {dest}; "
        f"for a fresh copy: placement-edu course {tmp_path / 'course-2'}"
    )


def test_several_edits_are_counted_and_the_fresh_folder_is_the_first_free_name(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "course"
    copy_course(dest)
    for name in (EDITED, "notebooks/05_materialized.ipynb", "docs/theory.md"):
        (dest / name).write_text("mine")
    (tmp_path / "course-2").mkdir()
    again = copy_course(dest)
    assert again.kept == ("docs/theory.md", EDITED, "notebooks/05_materialized.ipynb")
    assert fresh_folder(dest) == tmp_path / "course-3"
    assert kept_line(again) == (
        f"kept your edited theory.md (and 2 more) in {dest}; "
        f"for a fresh copy: placement-edu course {tmp_path / 'course-3'}"
    )


def test_an_unedited_older_copy_is_refreshed_and_a_deleted_file_comes_back(tmp_path: Path) -> None:
    dest = tmp_path / "course"
    copy_course(dest)
    # as an older release would have written it, and recorded it: the learner never touched it
    (dest / EDITED).write_text("an older release's 03")
    record = json.loads((dest / RECORD).read_text())
    record[EDITED] = hashlib.sha256(b"an older release's 03").hexdigest()
    (dest / RECORD).write_text(json.dumps(record))
    (dest / FIRST).unlink()
    again = copy_course(dest)
    assert again.kept == () and again.written == (FIRST, EDITED)
    assert (dest / EDITED).read_bytes() == (ROOT / EDITED).read_bytes()


def test_each_notebook_is_copied_as_run_by_this_python_and_a_new_python_refreshes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JupyterLab marks a notebook modified on open when its ``language_info.version`` is not the
    kernel's Python: the copy says the running Python, and differs from the shipped file in that
    value only. A later Python refreshes an untouched copy; an edited one is still kept."""
    monkeypatch.setattr(course, "PYTHON", "3.11.99")
    dest = tmp_path / "course"
    copy_course(dest)
    for name in course_files():
        if name.endswith(".ipynb"):
            copied, shipped = (json.loads((d / name).read_text()) for d in (dest, ROOT))
            assert copied["metadata"]["language_info"]["version"] == "3.11.99"
            copied["metadata"]["language_info"]["version"] = shipped["metadata"]["language_info"][
                "version"
            ]
            assert copied == shipped, name
        else:
            assert (dest / name).read_bytes() == (ROOT / name).read_bytes(), name
    assert copy_course(dest).written == ()  # the same Python: nothing to refresh
    (dest / EDITED).write_text('{"my": "answers"}')
    monkeypatch.setattr(course, "PYTHON", "3.12.1")
    again = copy_course(dest)
    assert again.kept == (EDITED,) and FIRST in again.written
    first = json.loads((dest / FIRST).read_text())
    assert first["metadata"]["language_info"]["version"] == "3.12.1"


def test_a_bad_dir_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)  # DIR as a learner types it (a long path is shortened)
    a_file = Path("notes.txt")
    a_file.write_text("not a folder")
    with pytest.raises(PlacementError, match=r"^notes.txt is a file, not a folder"):
        copy_course(a_file)
    with pytest.raises(PlacementError, match=r"^cannot write the course into notes.txt/course: "):
        copy_course(a_file / "course")
    assert main(["course", "notes.txt"]) == 2
    assert capsys.readouterr().err == (
        "placement-edu: error: notes.txt is a file, not a folder: give a folder for the course\n"
    )
    assert main(["course", "here", "--site", "site"]) == 2
    assert "give DIR (to open the course) or --site/--slides" in capsys.readouterr().err
    assert not Path("here").exists() and not Path("site").exists()


def test_jupyterlab_starts_on_the_copy_with_the_courses_server_settings(tmp_path: Path) -> None:
    command = lab_command(tmp_path, 8765, browser=False)
    assert command[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--config={SERVER_CONFIG}" in command and SERVER_CONFIG.is_file()
    assert f"--ServerApp.root_dir={tmp_path.resolve()}" in command
    assert {"--no-browser", "--port=8765", "--ServerApp.port_retries=0"} <= set(command)
    assert command[-1] == FIRST == "notebooks/00_start_here.ipynb"
    opened = lab_command(tmp_path, None, browser=True)
    assert not [a for a in opened if a.startswith(("--port", "--no-browser"))]


def test_the_repository_is_pyprojects_and_every_binder_link_is_built_from_it() -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert repository() == urls["Repository"] == "https://github.com/placement-edu/placement_edu"
    assert (
        binder_url("03_sharded")
        == binder_url("03_sharded.ipynb")
        == (
            "https://mybinder.org/v2/gh/placement-edu/placement_edu/main"
            "?urlpath=lab/tree/notebooks/03_sharded.ipynb"
        )
    )
    # README's Binder link (and any in docs/) is binder_url of its notebook: one value
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    links = [
        (page.name, link)
        for page in pages
        for link in re.findall(r"https://mybinder\.org/v2/gh/[^)\s\"'>]+", page.read_text())
    ]
    assert links, "README.md links the course on Binder"
    for page, link in links:
        notebook = re.search(r"notebooks/([^/&#]+\.ipynb)", link)
        assert notebook and link == binder_url(notebook.group(1)), (page, link)
    assert "OWNER" not in (ROOT / "README.md").read_text()


def test_a_missing_extra_is_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for module, (_, extra) in NEEDS.items():  # each module is in the extra the line names
        assert any(r.startswith(module) for r in extras["optional-dependencies"][extra]), module
    monkeypatch.setattr(course.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PlacementError) as error:
        require("torch", "run")
    assert str(error.value) == "'run' needs PyTorch: pip install 'placement-edu[course]'"
    assert main(["course", "anywhere"]) == 2
    assert capsys.readouterr().err == (
        "placement-edu: error: 'course' needs JupyterLab: pip install 'placement-edu[course]'\n"
    )
    assert main(["course", "--site", "out"]) == 2
    assert "'course --site' needs Sphinx: pip install 'placement-edu[site]'" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("flag", "module", "result", "printed"),
    [
        ("--site", "site", "index.html", r"^the website: \S+index.html \(built in \d+\.\d s\)$"),
        ("--slides", "slides", "decks", r"^2 slide decks in \S+out$"),
    ],
)
def test_site_and_slides_print_where_their_output_is(
    flag: str,
    module: str,
    result: str,
    printed: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """The handler's side of the interface: ``build(out)`` (here a stand-in, so that this test
    stays fast; the builders have their own tests) and the line that says where it went."""
    builder = pytest.importorskip(
        f"placement_edu.course.{module}", reason=f"placement_edu.course.{module} is not here yet"
    )
    out = tmp_path / "out"
    made = [out / "00_start_here.slides.html", out / "lecture.slides.html"]
    fake = (lambda o: o / "index.html") if module == "site" else (lambda o: made)
    monkeypatch.setattr(builder, "build", fake)
    assert main(["course", flag, str(out)]) == 0
    assert re.match(printed, capsys.readouterr().out.strip()), result


def test_the_command_imports_neither_jupyterlab_nor_torch_nor_sphinx_until_it_runs() -> None:
    code = (
        "import sys\nfrom placement_edu.cli import main\nmain(['course', '--help'])\n"
        "print(sorted(m for m in ('jupyterlab', 'torch', 'sphinx', 'nbconvert') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "JUPYTER_TOKEN" in done.stdout
    assert done.stdout.strip().endswith("[]"), done.stdout[-500:]
