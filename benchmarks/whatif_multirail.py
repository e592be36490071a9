"""What if a group spanning nodes ran on every NIC its members hold? (issue 27, for the next step)

The time model prices a group that spans nodes at one network link, the slowest its ring crosses
(``Hardware.axis_link``): 50 GB/s on the ``*-nvlink-ib`` presets' InfiniBand NDR, however many of
the group's ranks share a node. A DGX H100 has one 400 Gb/s NIC per GPU, and NCCL splits a
collective over several channels, each ring crossing a node boundary on its own NIC: a group with
k members in each node moves k times one NIC's bytes across nodes at once (capped here at the
node link). This script patches ``axis_link`` that way, in this process only, and prints Megatron's
published tables (``benchmarks/published``) both ways.

What it shows: the H100 weak-scaling rows without a pipeline whose data groups hold several ranks
a node (7.1B at t = 2: 4 a node; 16B at t = 4: 2) come within 5 % of published (1.014, 0.959),
where the package predicts them 7-13 % slow; 1.7B (t = 1: 8 a node) rises from 1.050 to 1.124;
32B (t = 8: one a node) and every pipelined row do not move, nor does the strong-scaling drop.
Not adopted: it would move every figure of a data group across nodes (golden figures, plan,
notebook 11's lesson on where groups sit), and wants NCCL's own measured bus bandwidth on such a
cluster as its source.

Run: .venv/bin/python benchmarks/whatif_multirail.py
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import placement_edu.timing as timing  # noqa: E402
from benchmarks.published.compare import compare, mfu_drop  # noqa: E402
from placement_edu.pricing import comm_seconds, overlap_streams  # noqa: E402
from placement_edu.mesh import Mesh, as_mesh  # noqa: E402

ONE_LINK = timing.Hardware.axis_link


def every_rail(self: timing.Hardware, mesh: Mesh | str, axis: str) -> timing.Link:
    """``axis_link``, with a group across nodes at k × the network link (k: its ranks a node)."""
    link = ONE_LINK(self, mesh, axis)
    mesh = as_mesh(mesh)
    if link is not self.network_link or self.gpus_per_node is None:
        return link
    stride = mesh.stride(axis)
    k = max(1, min(mesh.degree(axis), self.gpus_per_node // stride))
    return replace(link, bandwidth=min(self.node_link.bandwidth, k * link.bandwidth))


def show(title: str) -> None:
    print(title)
    for name in ("h100_weak", "a100_2021", "h100_strong"):
        e, rows = compare(name)
        ratios = " ".join(f"{r.run.name} {r.ratio:.3f}" for r in rows if r.ratio is not None)
        print(f"  {name} (e = {e:.4f}): {ratios}")
        if name == "h100_strong":
            print(f"    MFU drop 96 -> 4,608 GPUs: {mfu_drop(rows) * 100:.1f} points")


if __name__ == "__main__":
    show("one network link a group (the package):")
    timing.Hardware.axis_link = every_rail  # type: ignore[method-assign]
    comm_seconds.cache_clear()  # (the planner keeps each priced collective: price them again)
    overlap_streams.cache_clear()
    show("every rail a group holds (what if):")
