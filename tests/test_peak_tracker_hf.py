"""The same checks through the ``transformers`` extra: HF's own GPT-2 and Llama modules, built from
a local config.json (``tests/tracker_cases.py``: the published configs' shaping fields; nothing is
downloaded), on their widths at ``BLOCKS`` blocks: HF's module repeats one block as the reference
model does, which the suite checks at full depth."""

from __future__ import annotations

import json

import pytest

from placement_edu.runtime.measurement.peak_tracker import TrackerProcess
from tests.tracker_cases import BLOCKS, HF_CONFIGS, SEQ, compare

pytestmark = pytest.mark.runtime


@pytest.mark.parametrize(
    "model, devices, rank, precision, recompute, blocks",
    [
        ("gpt2", 8, 7, "fsdp2_bf16", "none", BLOCKS),
        ("gpt2", 1, 0, "fp32", "none", BLOCKS),
        ("gpt2", 8, 0, "fsdp2_bf16", "selective", BLOCKS),  # HF's checkpointing, the same policy
        ("llama-1b", 8, 0, "fp32", "none", BLOCKS),
        ("llama-1b", 64, 63, "fsdp2_bf16", "none", BLOCKS),
    ],
)
def test_the_same_checks_pass_on_hfs_own_module_from_a_local_config(
    tracker: TrackerProcess, tmp_path, model, devices, rank, precision, recompute, blocks
) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / model / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(HF_CONFIGS[model]))
    SEQ[str(path)] = SEQ[model]
    compare(tracker, str(path), devices, rank, precision, recompute, blocks=blocks)


def test_measuring_a_profile_leaves_tmpdir_as_found(tmp_path) -> None:
    # issue 43, item 7: fit left $TMPDIR/torchinductor_<user> whenever it measured a profile
    import os
    import subprocess
    import sys

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), PLACEMENT_EDU_NO_CACHE="1")
    argv = ["fit", "--model", "gpt2", "--devices", "8", "--seq", "64"]
    done = subprocess.run(
        [sys.executable, "-m", "placement_edu.cli", *argv], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "peak" in done.stdout and list(scratch.iterdir()) == []
