"""The course as files: the notebooks and the theory, where a checkout or an installed wheel keeps
them, and what ``placement-edu course`` does with them (copy, open, build the site and the slides).

A checkout (or an editable install) keeps them at the repository's root, ``notebooks/`` and
``docs/``; a wheel carries the same two folders in ``placement_edu/course/content/`` (``setup.py``
copies them there when it builds the wheel, choosing them with ``course_files``).

The learner's copy mirrors the two folders, so a notebook's link ``../docs/theory.md#s4`` opens
the theory wherever the course is: in a checkout, on Binder and in ``placement-edu course DIR``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from itertools import count
from pathlib import Path

from placement_edu.errors import PlacementError

#: Where a wheel carries the course (``notebooks/`` and ``docs/``), copied there when it is built.
PACKAGED = Path(__file__).resolve().parent / "content"
#: A checkout's root: ``notebooks/`` and ``docs/`` beside the package.
CHECKOUT = Path(__file__).resolve().parents[2]
#: The course's folders, kept side by side wherever the course goes.
FOLDERS = ("notebooks", "docs")
#: Never part of the course: what Jupyter, Python and a site build leave beside its files (a
#: path with any part matching one of these is left out).
LEFT_OUT = (".*", "__pycache__", "_build")
#: The notebook the course opens on.
FIRST = "notebooks/00_start_here.ipynb"
#: The server settings of every place the course runs (idle kernels shut down): read by
#: ``placement-edu course`` and copied by Binder's ``binder/postBuild``.
SERVER_CONFIG = Path(__file__).resolve().parent / "jupyter_server_config.py"
#: The package's name on PyPI (its metadata carries the repository's URL).
DISTRIBUTION = "placement-edu"
#: The repository's branch that Binder builds.
BRANCH = "main"
#: The Python that runs the course's kernels, as ipykernel reports it in a notebook's
#: ``language_info.version`` (JupyterLab writes that value on open).
PYTHON = sys.version.split()[0]


def content_root() -> Path:
    """The folder holding ``notebooks/`` and ``docs/``: the wheel's copy, else the checkout's."""
    return PACKAGED if (PACKAGED / "notebooks").is_dir() else CHECKOUT


def notebooks() -> list[Path]:
    """The course's notebooks, in reading order (00 first)."""
    return sorted((content_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def course_files(root: Path | None = None) -> list[str]:
    """Every file of the course under ``root`` (default ``content_root()``): paths relative to it,
    with ``/``, sorted -- ``notebooks/00_start_here.ipynb``, ``docs/theory.md``, ... -- less what
    ``LEFT_OUT`` names (checkpoints, caches, a site's build)."""
    root = content_root() if root is None else root
    return sorted(
        path.relative_to(root).as_posix()
        for folder in FOLDERS
        for path in (root / folder).rglob("*")
        if path.is_file()
        and not any(Path(part).match(p) for part in path.relative_to(root).parts for p in LEFT_OUT)
    )


# --- where the course lives online ----------------------------------------------------------
def repository() -> str:
    """The course's repository, as ``[project.urls] Repository`` in pyproject.toml names it (the
    one place it is written): read from pyproject.toml in a checkout -- an installed copy's
    metadata may be older than the file -- else from the installed package's metadata."""
    if content_root() == CHECKOUT and (CHECKOUT / "pyproject.toml").is_file():
        project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))
        return str(project["project"]["urls"]["Repository"])
    for entry in metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if label.strip() == "Repository":
            return url.strip()
    raise LookupError(f"{DISTRIBUTION}'s metadata names no Repository URL")


def binder_url(notebook: str) -> str:
    """Binder's link that opens ``notebook`` (``"03_sharded.ipynb"``, or without ``.ipynb``) in
    JupyterLab, on the repository's ``BRANCH``, in a container of its own."""
    github = repository().removeprefix("https://github.com/").strip("/")
    name = notebook if notebook.endswith(".ipynb") else f"{notebook}.ipynb"
    return f"https://mybinder.org/v2/gh/{github}/{BRANCH}?urlpath=lab/tree/notebooks/{name}"


# --- what a command needs beyond the core ---------------------------------------------------
#: The modules a command may need that the plain install (numpy) lacks: module -> (what it is,
#: the extra of pyproject.toml that brings it).
NEEDS: dict[str, tuple[str, str]] = {
    "jupyterlab": ("JupyterLab", "course"),
    "torch": ("PyTorch", "course"),
    "nbconvert": ("nbconvert", "course"),
    "sphinx": ("Sphinx", "site"),
    "transformers": ("transformers", "hf"),
}


def require(module: str, command: str) -> None:
    """Return if ``module`` (a key of ``NEEDS``) is installed; else raise a PlacementError that
    says, in one line, that ``command`` needs it and which extra installs it. Looked up without
    importing it (torch takes seconds to import)."""
    if importlib.util.find_spec(module) is None:
        what, extra = NEEDS[module]
        raise PlacementError(f"{command!r} needs {what}: pip install '{DISTRIBUTION}[{extra}]'")


# --- the learner's copy -------------------------------------------------------------------
#: In a copy of the course: each file's SHA-256 as the last copy wrote it. A file that still has
#: it is the learner's unedited copy (refreshed by the next copy); one that differs was edited.
RECORD = ".placement-edu-course.json"


@dataclass(frozen=True)
class Copied:
    """What ``copy_course`` did in ``dest``: the files it wrote (new, or refreshed from an older
    copy the learner had not edited) and those it kept because the learner had edited them (paths
    relative to ``dest``)."""

    dest: Path
    written: tuple[str, ...]
    kept: tuple[str, ...]


def for_this_python(path: Path) -> bytes:
    """A course file's bytes as the course copies them. A notebook is saved as run by ``PYTHON``
    (its ``language_info.version``): JupyterLab writes the running kernel's version there when it
    opens a notebook, and would mark one saved under any other Python modified before the learner
    typed a key. Everything else is the file as shipped."""
    data = path.read_bytes()
    if path.suffix != ".ipynb":
        return data
    notebook = json.loads(data)
    info = notebook["metadata"].get("language_info")
    if info is None or info.get("version") == PYTHON:
        return data
    info["version"] = PYTHON
    # nbformat's own layout, so an unchanged notebook saves to the same bytes
    return (json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def stamp_notebooks(folder: str | Path) -> None:
    """Save every notebook in ``folder`` as run by ``PYTHON`` (``for_this_python``): what Binder's
    ``binder/postBuild`` does to the repository's notebooks, whose Python is the newest 3.11."""
    for notebook in sorted(Path(folder).glob("*.ipynb")):
        notebook.write_bytes(for_this_python(notebook))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def copy_course(dest: Path) -> Copied:
    """Copy the course (``course_files``) into ``dest``, the two folders side by side, each
    notebook saved as run by this Python (``for_this_python``). A file that
    is already there as shipped, or as an earlier copy wrote it, is refreshed; one the learner
    edited is never overwritten (``Copied.kept``). A ``dest`` that is a file, or that cannot be
    written, raises a PlacementError in one line."""
    root = content_root()
    if dest.exists() and not dest.is_dir():
        raise PlacementError(f"{dest} is a file, not a folder: give a folder for the course")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        try:
            record = json.loads((dest / RECORD).read_text())
        except (OSError, ValueError):
            record = {}
        written, kept = [], []
        for name in course_files(root):
            target, data = dest / name, for_this_python(root / name)
            shipped = _digest(data)
            if target.exists():
                now = _digest(target.read_bytes())
                if now == shipped:
                    record[name] = shipped
                    continue
                if now != record.get(name):
                    kept.append(name)
                    continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            record[name] = shipped
            written.append(name)
        (dest / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    except OSError as error:
        raise PlacementError(
            f"cannot write the course into {dest}: {error.strerror or error}"
        ) from None
    return Copied(dest, tuple(written), tuple(kept))


def fresh_folder(dest: Path) -> Path:
    """The first of ``DEST-2``, ``DEST-3``, ... that does not exist: where a fresh copy can go
    (``.`` and ``..`` are named by their absolute paths)."""
    base = dest if dest.name not in ("", "..") else dest.resolve()
    return next(p for n in count(2) if not (p := base.with_name(f"{base.name}-{n}")).exists())
