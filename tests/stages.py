"""The whole suite in stages, the quick one first: ``python -m tests.stages [STAGE ...] [-- ARGS]``.

1. ``fast``: the pure tests (``-m fast``, about a minute). A failure here stops the run: nothing
   later starts ranks, notebooks or a browser for a tree that already fails its quick checks.
2. ``runtime``: the tests that start ranks or PyTorch's trackers, and every notebook
   (``-m "runtime or notebook"``).
3. ``browser``: JupyterLab, the website and the slides in Chromium (``-m browser``).

Each stage is one pytest run on every core (pytest-xdist: ``-n auto --dist loadfile``, a file whole
on one worker, the long files first: ``conftest.HANDED_OUT_FIRST``). Run whole (no stage named), the
runtime and browser stages are one pytest run after the fast one (``RUN``): the browser's files then
run beside the ranks' and the notebooks' on the two cores, as they did before the stages, and CI
stays under its 10 minutes (run apart, the browser's two minutes came after the rest). Name stages
to run only those, each on its own (``python -m tests.stages runtime browser``); arguments after
``--`` go to every pytest run (``-- -x``). The exit status is the first failing stage's, else 0.
This is README's test command and CI's (``.ci/run``); a plain ``python -m pytest`` runs everything
in one process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

#: Each stage: its name and its test selection (pytest's ``-m`` expression).
STAGES = {
    "fast": "fast",
    "runtime": "runtime or notebook",
    "browser": "browser",
}
#: The whole suite: the fast stage, then the others in one pytest run.
RUN = (("fast",), ("runtime", "browser"))
#: How every stage spreads its files over the cores (CONTRIBUTING.md, "The test tiers").
PARALLEL = ["-n", "auto", "--dist", "loadfile", "--no-loadscope-reorder"]
#: The stages that start ranks, kernels and a browser spend much of their time waiting (a signal's
#: ending, a rank's timeout, a page's load): one worker more than the cores keeps both cores busy
#: meanwhile (on 2 cores, 1,046 s of these tests' time took 546 s on 2 workers).
WAITING = ("runtime", "browser")


def workers(stages: tuple[str, ...]) -> str:
    """pytest-xdist's ``-n`` for ``stages``: every core ("auto"), one more where they wait."""
    return str((os.cpu_count() or 1) + 1) if set(stages) & set(WAITING) else "auto"


#: pytest's exit status when a selection holds no test (not a failure of the stage).
NO_TESTS = 5


def command(stages: tuple[str, ...], extra: list[str]) -> list[str]:
    """The pytest command line of ``stages`` run together (their selections or-ed)."""
    selection = " or ".join(STAGES[s] for s in stages)
    parallel = [workers(stages) if arg == "auto" else arg for arg in PARALLEL]
    return [sys.executable, "-m", "pytest", "-m", selection, *parallel, *extra]


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    names = argv[: argv.index("--")] if "--" in argv else argv
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        print(f"unknown stage {unknown[0]!r}; the stages: {', '.join(STAGES)}", file=sys.stderr)
        return 2
    for group in [(n,) for n in names] or list(RUN):
        label = " + ".join(group)
        start = time.monotonic()
        print(f"== stage {label}: pytest -m {' or '.join(STAGES[s] for s in group)!r}", flush=True)
        status = subprocess.call(command(group, extra))
        print(f"== stage {label}: exit {status} in {time.monotonic() - start:.0f} s", flush=True)
        if status not in (0, NO_TESTS):
            print(f"== stopped: stage {label} failed; the later stages did not run", flush=True)
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
