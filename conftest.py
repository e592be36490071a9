"""Test tiers. Each test file names its tier with a module-level ``pytestmark``:

- ``fast``: pure, in this process (no process group, no notebook, no browser); ``pytest -m fast``
  runs them all in well under 90 s;
- ``runtime``: starts ranks (torch.distributed process groups) or PyTorch's trackers;
- ``browser``: JupyterLab in Chromium (tests/test_browser.py);
- ``notebook``: every cell nbval executes, marked here (a notebook has no ``pytestmark``).

``slow`` marks single cases of any tier that take more than ~20 s. ``tests/test_tiers.py`` checks
that every test file names exactly one tier.

The suite runs in stages (``tests/stages.py``: fast first, then runtime and the notebooks, then
the browser), each on every core (pytest-xdist: ``-n auto --dist loadfile``): a runtime test
mostly waits (for ranks to meet, for a timeout to pass), and another test's work fills
that wait. A file runs whole on one worker -- a notebook's cells share one kernel, a file's fixtures
(a JupyterLab, a warm pool) are made once -- so long-running cases are spread over several files
(the tracker's: ``tests/tracker_cases.py``). A plain ``pytest`` (no ``-n``) runs everything in
this process.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # (torch is imported by the fixture, for the files that ask for it)
    from placement_edu.runtime.measurement.peak_tracker import TrackerProcess

# The suite starts hundreds of Python processes (commands, kernels, rank servers, xdist's
# workers) from the environment its set-up made, which compiles nothing ahead (compiling every
# module of every package took 19 s of a fresh clone's set-up, most of it modules no test imports).
# Each module is then compiled once, by the first process that imports it -- unless the environment
# says never to write compiled files (PYTHONDONTWRITEBYTECODE, which this machine sets): then every
# process would compile torch again. Not for the suite.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


#: The files handed out first, in this order: the long ones, so that the short files even the two
#: workers out at the end (xdist gives each worker a whole file at a time in collection order,
#: ``--dist loadfile --no-loadscope-reorder``; its default order, most tests first, left a long file
#: of few tests last), and among them each file that mostly waits -- on ranks' timeouts, a killed
#: process's end -- placed to run beside one that computes: two waiting at once left a core idle for
#: a minute (a fresh clone's CI run, 2026-12-07). Then the other notebooks, then the rest. Seconds:
#: one worker of 3 in a full run of the suite here (``--durations``, 2026-12-07).
HANDED_OUT_FIRST = (
    "test_command_endings.py",  # 165 s, waits (every signal at every phase of short runs)
    "test_browser.py",  # 128 s, computes (JupyterLab, Chromium, kernels, RISE)
    "test_runtime_endings.py",  # 70 s, waits (timeouts, ends of killed commands)
    "test_peak_axes.py",  # 79 s, computes (PyTorch's trackers on tensor and pipeline meshes)
    "test_binder_limits.py",  # 57 s, waits
    "test_peak_tracker.py",  # 71 s, computes (66 s once the activation profiles are cached)
    "test_pool.py",  # 43 s, waits (its 10 s timeouts)
    "test_site.py",  # 50 s, computes (Sphinx builds the website, Chromium opens every page)
    "test_mesh_tracker.py",  # 32 s, computes
    "test_course_browser.py",  # 21 s (a fresh venv from the wheel, JupyterLab, Chromium)
    "test_torch_reference.py",  # 26 s
    "test_peak_tracker_hf.py",  # 14 s, computes
    "test_peak_tracker_llama_1b.py",  # 16 s, computes
    "09_activations_and_recomputation.ipynb",  # 15 s
    "test_torch_ref_one_gpu.py",  # 17 s
    "05_materialized.ipynb",  # 14 s
    "test_static_checks.py",  # 17 s with no mypy cache; 2 s with one
    "test_runtime.py",  # 14 s
    "14_mixture_of_experts.ipynb",  # 11 s
    "15_precision_and_the_roofline.ipynb",  # 10 s (a gloo launch, 300 toy steps)
    "test_slides.py",  # 12 s (16 reveal.js decks, one opened)
)


def _hand_out_order(item: pytest.Item) -> tuple[int, int]:
    name = item.path.name
    if name in HANDED_OUT_FIRST:
        return (0, HANDED_OUT_FIRST.index(name))
    return (1, 0) if item.path.suffix == ".ipynb" else (2, 0)


#: Activation profiles the suite's tests read (tiny shapes, other b, s and policies than the
#: package ships), measured once under FakeTensorMode and kept here: a fresh clone's cache starts
#: with them, so CI does not measure them again (about 90 s of its 10 minutes). Their names hash
#: the measuring code and torch's version (``profile_store.profile_key``): after a change there a
#: stale file is never read, the profile is measured as before, and
#: ``python -m tests.seed_profiles`` would keep the new ones.
SUITE_PROFILES = Path(__file__).parent / "tests" / "profiles"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The cache holds the suite's profiles before any test runs (each copied atomically: the
    xdist workers start together)."""
    from placement_edu.profile_store import cache_dir, use_cache

    if not use_cache():
        return
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for kept in SUITE_PROFILES.glob("*.json"):
        if not (cache / kept.name).exists():
            part = cache / f".{kept.name}.{os.getpid()}"
            shutil.copyfile(kept, part)
            os.replace(part, cache / kept.name)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebook)
    items.sort(key=_hand_out_order)  # (stable: a file's tests keep their order)


@pytest.fixture
def run_tmpdir() -> Iterator[Path]:
    """An empty folder, with a short path, to be a run's TMPDIR. Python's forkserver listens on a
    Unix socket at TMPDIR/pymp-…/listener-…, and such a path holds at most 107 bytes: pytest's own
    ``tmp_path``, one level deeper under each xdist worker, comes too close."""
    path = Path(tempfile.mkdtemp(prefix="pe-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def tracker() -> Iterator[TrackerProcess]:
    """One process that measures a test file's tracker cases one after another
    (``peak_tracker.TrackerProcess``; ``tests/tracker_cases.py``): each case in a fake process group
    of its own, and every case after the first without a fresh process's ~2 s warm-up."""
    from placement_edu.runtime.measurement.peak_tracker import TrackerProcess

    with TrackerProcess() as process:
        yield process
