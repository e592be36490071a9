"""Knowing the container (issue 28): the memory limit read from cgroup v1 and v2 as Linux lays them
out, the tightest of a cgroup and its parents, a run that would not fit refused in one line that
names the numbers, and the server settings Binder gets (idle kernels shut down)."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement_edu.errors import PlacementError
from placement_edu.implementations import TorchRefConfig
from placement_edu.units import GiB, MiB
from placement_edu.runtime.processes.container import (
    FORKSERVER_MIB,
    RANK_MIB,
    TORCH_REF_STATE_FACTOR,
    MemoryLimit,
    check_fits,
    memory_limit,
    rank_bytes,
    ranks_that_fit,
)

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
UNLIMITED_V1 = "9223372036854771712"  # what cgroup v1 writes for "no limit"


def _files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_cgroup_v1_limit_is_read_with_usage_less_inactive_page_cache(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("9:name=systemd:/\n4:memory:/binder/user\n0::/\n")
    fs = tmp_path / "fs"
    _files(
        fs,
        {
            "memory/memory.limit_in_bytes": UNLIMITED_V1,
            "memory/binder/memory.limit_in_bytes": UNLIMITED_V1,
            "memory/binder/user/memory.limit_in_bytes": str(2 * GiB),
            "memory/binder/user/memory.usage_in_bytes": str(700 * MiB),
            "memory/binder/user/memory.stat": f"cache 1\ntotal_inactive_file {200 * MiB}\n",
        },
    )
    limit = memory_limit(str(proc), str(fs))
    assert limit == MemoryLimit(
        2 * GiB, 500 * MiB, str(fs / "memory/binder/user/memory.limit_in_bytes")
    )
    assert limit.free == 1548 * MiB


def test_a_parents_tighter_limit_binds_and_no_limit_reads_as_none(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/binder/user\n")
    fs = tmp_path / "fs"
    _files(
        fs,
        {
            "memory/memory.limit_in_bytes": UNLIMITED_V1,
            "memory/binder/memory.limit_in_bytes": str(GiB),
            "memory/binder/memory.usage_in_bytes": str(300 * MiB),
            "memory/binder/user/memory.limit_in_bytes": str(2 * GiB),
        },
    )
    assert memory_limit(str(proc), str(fs)).limit == GiB
    (fs / "memory/binder/memory.limit_in_bytes").write_text(UNLIMITED_V1)
    (fs / "memory/binder/user/memory.limit_in_bytes").write_text(UNLIMITED_V1)
    assert memory_limit(str(proc), str(fs)) is None


def test_cgroup_v2_memory_max_is_read_and_max_means_no_limit(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("0::/user.slice/binder\n")
    fs = tmp_path / "fs"
    _files(
        fs,
        {
            "cgroup.controllers": "cpu memory\n",
            "user.slice/memory.max": "max\n",
            "user.slice/binder/memory.max": f"{GiB}\n",
            "user.slice/binder/memory.current": f"{400 * MiB}\n",
            "user.slice/binder/memory.stat": f"anon 1\ninactive_file {100 * MiB}\n",
        },
    )
    assert memory_limit(str(proc), str(fs)) == MemoryLimit(
        GiB, 300 * MiB, str(fs / "user.slice/binder/memory.max")
    )
    (fs / "user.slice/binder/memory.max").write_text("max\n")
    assert memory_limit(str(proc), str(fs)) is None
    assert (
        memory_limit(str(tmp_path / "absent"), str(fs)) is None
    )  # no /proc/self/cgroup: no limit known


def test_a_ddp_rank_of_notebook_02_is_estimated_from_its_model_state():
    config = TorchRefConfig("ddp", 2, model="mlp:64,1024,1024,1024,1024,1024,1024,16", steps=2)
    psi = 5_330_960  # notebook 02 prints this count
    assert rank_bytes([config]) == RANK_MIB * MiB + int(TORCH_REF_STATE_FACTOR * 32 * psi)
    assert 340 * MiB < rank_bytes([config]) < 380 * MiB  # measured: 347-350 MiB private per rank
    assert ranks_that_fit(GiB, rank_bytes([config])) == 2
    assert ranks_that_fit(2 * GiB, rank_bytes([config]), forkserver_running=True) == 5


def test_a_run_that_does_not_fit_is_refused_in_one_line_naming_each_number():
    limit = MemoryLimit(GiB, 400 * MiB, "/sys/fs/cgroup/memory/x/memory.limit_in_bytes")
    with pytest.raises(PlacementError) as error:
        check_fits(8, 100 * MiB, forkserver_running=False, limit=limit)
    message = str(error.value)
    assert "\n" not in message
    assert message == (
        f"not enough memory for 8 ranks: they need about {800 + FORKSERVER_MIB} MiB (100 MiB a "
        f"rank + {FORKSERVER_MIB} MiB to start them), and this container's limit is 1024 MiB with "
        "400 MiB in use (/sys/fs/cgroup/memory/x/memory.limit_in_bytes); run 3 ranks or fewer, or "
        "shut down other notebooks' kernels"
    )
    check_fits(
        3, 100 * MiB, forkserver_running=False, limit=limit
    )  # 399 MiB left after the server: fits
    with pytest.raises(PlacementError, match="no run of 2 ranks or more fits"):
        check_fits(2, 400 * MiB, forkserver_running=False, limit=limit)


def test_binder_shuts_down_idle_kernels_even_with_their_tab_open():
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(
        "jupyter_server_config.py", str(ROOT / "placement_edu" / "course")
    ).load_config()
    culling = config.MappingKernelManager
    assert culling.cull_idle_timeout == 600 and culling.cull_interval == 60
    assert culling.cull_connected is True and culling.cull_busy is False
    postbuild = (ROOT / "binder" / "postBuild").read_text()
    assert "placement_edu/course/jupyter_server_config.py" in postbuild


def test_notebook_02s_ddp_run_narrows_its_mlp_to_fit_a_1_gib_binder_and_says_so(
    monkeypatch, capsys
):
    # Issue 28: at 1 GiB with the kernel's ~250 MiB in use, 2 DDP ranks of notebook 02's MLP need
    # about 2 x 361 + 225 MiB (refused); halving each hidden width (Psi 5,330,960 -> 1,354,768)
    # needs about 2 x 107 + 225 MiB: it runs, and the cell says so.
    from placement_edu.runtime.processes import container, forkserver
    from placement_edu.runtime.measurement import torch_ref_result

    monkeypatch.setattr(forkserver, "running", lambda: False)  # (its 225 MiB still to start)

    config = TorchRefConfig("ddp", 2, model="mlp:64,1024,1024,1024,1024,1024,1024,16", steps=2)
    limit = MemoryLimit(GiB, 250 * MiB, "memory.limit_in_bytes")
    monkeypatch.setattr(container, "memory_limit", lambda: limit)
    [narrow] = torch_ref_result.narrowed_to_fit([config])
    assert narrow == TorchRefConfig("ddp", 2, model="mlp:64,512,512,512,512,512,512,16", steps=2)
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and "774 MiB free" in line and "mlp:64,512," in line
    monkeypatch.setattr(container, "memory_limit", lambda: None)  # no limit: the run as asked
    assert torch_ref_result.narrowed_to_fit([config]) == [config]
    tight = MemoryLimit(GiB, 900 * MiB, "memory.limit_in_bytes")  # not even 64 wide fits
    monkeypatch.setattr(container, "memory_limit", lambda: tight)
    assert torch_ref_result.narrowed_to_fit([config]) == [config]  # the launch refuses it
