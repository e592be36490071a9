"""The course as files: the notebooks and the theory, where a checkout or an installed wheel keeps
them, and what ``placement-edu course`` does with them (copy, open, build the site and the slides).

A checkout (or an editable install) keeps them at the repository's root, ``notebooks/`` and
``docs/``; a wheel carries the same two folders in ``placement_edu/course/content/``.
"""

from __future__ import annotations

from pathlib import Path

#: Where a wheel carries the course (``notebooks/`` and ``docs/``), copied there when it is built.
PACKAGED = Path(__file__).resolve().parent / "content"
#: A checkout's root: ``notebooks/`` and ``docs/`` beside the package.
CHECKOUT = Path(__file__).resolve().parents[2]


def content_root() -> Path:
    """The folder holding ``notebooks/`` and ``docs/``: the wheel's copy, else the checkout's."""
    return PACKAGED if (PACKAGED / "notebooks").is_dir() else CHECKOUT


def notebooks() -> list[Path]:
    """The course's notebooks, in reading order (00 first)."""
    return sorted((content_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))
