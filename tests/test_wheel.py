"""The package as a learner installs it: the sdist and the wheel built from this tree carry the
course (every notebook, the theory, the vendored scripts, ``py.typed``), and the wheel installed
alone into a fresh venv -- numpy, nothing else -- answers the core's commands and names the extra
``placement-edu course`` needs, in one line.

Built once for the module (``python -m build --no-isolation``: the sdist, then the wheel from the
sdist, so the sdist is checked too), from a copy of the tree's sources, so that nothing is written
into the checkout. Installed with uv, whose cache links the packages instead of copying them; each
package at the version this environment has (``constraints``), so nothing new is fetched.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import placement_edu
from placement_edu.course import course_files

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[1]
#: The repository's notebooks: the wheel carries each of them (16 with chapter 15).
COURSE = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: What a build reads from the tree: the sdist's sources (MANIFEST.in says the rest).
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "CHANGELOG.md")
SOURCE_FOLDERS = ("placement_edu", "notebooks", "docs")
LEFT_BEHIND = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "_build")
VENDOR = sorted(
    p.relative_to(ROOT).as_posix()
    for p in (ROOT / "placement_edu" / "course" / "vendor").rglob("*")
    if p.is_file()
)


def build_wheel(work: Path) -> tuple[Path, Path]:
    """(the sdist, the wheel built from it) of this tree, built in ``work`` from a copy of its
    sources (nothing written into the checkout)."""
    pytest.importorskip("build", reason="build is not installed (it is in the test extra)")
    source = work / "source"
    source.mkdir(parents=True)
    for name in SOURCES:
        shutil.copy2(ROOT / name, source / name)
    for folder in SOURCE_FOLDERS:
        shutil.copytree(ROOT / folder, source / folder, ignore=LEFT_BEHIND)
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(work / "dist")],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = (work / "dist").glob("*.tar.gz")
    (wheel,) = (work / "dist").glob("*.whl")
    return sdist, wheel


def uv(*args: str, timeout: float = 300) -> None:
    """``uv ARGS`` from this environment, with this machine's folder of wheels (PIP_FIND_LINKS,
    torch's CPU build) as uv's too, as ``.ci/run`` sets it."""
    pytest.importorskip("uv", reason="uv is not installed (it is in the test extra)")
    env = dict(os.environ)
    if env.get("PIP_FIND_LINKS") and not env.get("UV_FIND_LINKS"):
        env["UV_FIND_LINKS"] = env["PIP_FIND_LINKS"]
    done = subprocess.run(
        [sys.executable, "-m", "uv", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def fresh_venv(path: Path, *requirements: str) -> Path:
    """A new venv at ``path`` with ``requirements`` installed, each dependency at the version this
    environment has (a constraint: uv links it from its cache, nothing new is fetched); its bin/."""
    constraints = path.with_name(f"{path.name}-constraints.txt")
    constraints.write_text(
        "\n".join(
            sorted(
                {
                    f"{d.metadata['Name']}=={d.version}"
                    for d in importlib.metadata.distributions()
                    if d.metadata["Name"] and d.metadata["Name"] != "placement-edu"
                }
            )
        )
        + "\n"
    )
    uv("venv", "--quiet", "--python", sys.executable, str(path))
    uv("pip", "install", "--quiet", "--python", str(path), "-c", str(constraints), *requirements)
    return path / "bin"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_wheel(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def plain(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv's bin/ with the wheel alone: the core, numpy."""
    return fresh_venv(tmp_path_factory.mktemp("plain") / "venv", str(built[1]))


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # (run outside the checkout: python -c would import the checkout's placement_edu first)
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_wheel_carries_the_course_the_vendored_files_and_the_types(
    built: tuple[Path, Path],
) -> None:
    sdist, wheel = built
    assert wheel.name == f"placement_edu-{placement_edu.__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    content = "placement_edu/course/content/"
    notebooks = sorted(n for n in names if n.startswith(f"{content}notebooks/"))
    assert len(notebooks) == len(COURSE) and notebooks[0].endswith("00_start_here.ipynb")
    assert {f"{content}{name}" for name in course_files()} <= names
    assert f"{content}docs/theory.md" in names
    assert {"placement_edu/py.typed", "placement_edu/course/jupyter_server_config.py"} <= names
    assert set(VENDOR) <= names
    assert [n for n in names if n.startswith("placement_edu/data/profiles/")]
    info = f"placement_edu-{placement_edu.__version__}.dist-info/"
    assert f"{info}licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{info}METADATA").decode()
    core = [
        line
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and ";" not in line
    ]
    assert core == ["Requires-Dist: numpy>=1.24"]
    assert "Project-URL: Repository, https://github.com/placement-edu/placement_edu" in metadata
    # the sdist has what a wheel built from it needs
    members = {m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m}
    assert {*course_files(), "LICENSE", "CHANGELOG.md", "setup.py", *VENDOR} <= members


def test_the_plain_install_imports_and_answers_without_torch(plain: Path, tmp_path: Path) -> None:
    code = (
        "import importlib.util, placement_edu, placement_edu.course as c\n"
        "print(placement_edu.__version__)\n"
        "print([m for m in ('torch', 'matplotlib', 'ipywidgets', 'jupyterlab')"
        " if importlib.util.find_spec(m)])\n"
        "print(c.content_root() == c.PACKAGED, len(c.notebooks()), c.repository())"
    )
    done = run([str(plain / "python"), "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        placement_edu.__version__,
        "[]",  # numpy alone came with it
        f"True {len(COURSE)} https://github.com/placement-edu/placement_edu",
    ]
    table = run(
        [str(plain / "placement-edu"), "table", "--params", "7.5e9", "--devices", "64"], tmp_path
    )
    assert table.returncode == 0, table.stderr[-3000:]
    assert "120 GB" in table.stdout  # dp's model state: 16 B × 7.5e9 (ZeRO's Table 1)
    check = run([str(plain / "placement-edu"), "check", "zero3"], tmp_path)
    assert check.returncode == 0 and "gradient integrity: holds" in check.stdout, check.stdout


def test_the_plain_install_names_the_course_extra_in_one_line(plain: Path, tmp_path: Path) -> None:
    done = run([str(plain / "placement-edu"), "course", "X"], tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "placement-edu: error: 'course' needs JupyterLab: pip install 'placement-edu[course]'\n"
    )
    assert not (tmp_path / "X").exists()  # refused before anything was copied
    run_ = run([str(plain / "placement-edu"), "run", "zero3", "--world-size", "2"], tmp_path)
    assert (run_.returncode, run_.stderr) == (
        2,
        "placement-edu: error: 'run' needs PyTorch: pip install 'placement-edu[course]'\n",
    )
