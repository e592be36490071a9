"""Test tiers. Each test file names its tier with a module-level ``pytestmark``:

- ``fast``: pure, in this process (no process group, no notebook, no browser); ``pytest -m fast``
  runs them all in well under 90 s;
- ``runtime``: starts ranks (torch.distributed process groups) or PyTorch's trackers;
- ``browser``: JupyterLab in Chromium (tests/test_browser.py);
- ``notebook``: every cell nbval executes, marked here (a notebook has no ``pytestmark``).

``slow`` marks single cases of any tier that take more than ~20 s. ``tests/test_tiers.py`` checks
that every test file names exactly one tier.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebook)
