"""Test tiers. Each test file names its tier with a module-level ``pytestmark``:

- ``fast``: pure, in this process (no process group, no notebook, no browser); ``pytest -m fast``
  runs them all in well under 90 s;
- ``runtime``: starts ranks (torch.distributed process groups) or PyTorch's trackers;
- ``browser``: JupyterLab in Chromium (tests/test_browser.py);
- ``notebook``: every cell nbval executes, marked here (a notebook has no ``pytestmark``).

``slow`` marks single cases of any tier that take more than ~20 s. ``tests/test_tiers.py`` checks
that every test file names exactly one tier.

The suite runs on every core (pytest-xdist: ``-n auto --dist loadfile`` in pyproject.toml): a
runtime test mostly waits (for ranks to meet, for a timeout to pass), and another test's work fills
that wait. A file runs whole on one worker -- a notebook's cells share one kernel, a file's fixtures
(a JupyterLab, a warm pool) are made once -- so long-running cases are spread over several files
(the tracker's: ``tests/tracker_cases.py``). ``-n 0`` runs everything in this process.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebook)


@pytest.fixture
def run_tmpdir() -> Iterator[Path]:
    """An empty folder, with a short path, to be a run's TMPDIR. Python's forkserver listens on a
    Unix socket at TMPDIR/pymp-…/listener-…, and such a path holds at most 107 bytes: pytest's own
    ``tmp_path``, one level deeper under each xdist worker, comes too close."""
    path = Path(tempfile.mkdtemp(prefix="pe-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
