"""The hardware a time needs (SPEC §9): ``Link`` (a latency α and a bandwidth W) and ``Hardware``
(achieved FLOP/s, device memory, and the links between devices, inside a node and across nodes),
with named presets in ``HARDWARE``, each citing its sources; ``get_hardware`` resolves a name."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from placement_edu.errors import PlacementError, expect, positive_int
from placement_edu.gemm import GemmCurve, check_curve
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.schedule import LIBRARIES


# --- the hardware ------------------------------------------------------------------------------
def is_rate(value: object) -> bool:
    """A finite number above 0: a rate (bytes or FLOPs per second) or a speed-up."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class Link:
    """One kind of link between devices.

    ``alpha_s``: latency per ring step, seconds. ``bandwidth``: W, bytes per second one device sends
    on this link (one direction; a ring sends and receives at once, each at W)."""

    alpha_s: float
    bandwidth: float
    source: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        expect(
            isinstance(self.alpha_s, (int, float))
            and math.isfinite(self.alpha_s)
            and self.alpha_s >= 0,
            f"a link's latency alpha_s is seconds >= 0, got {self.alpha_s!r}",
        )
        expect(
            is_rate(self.bandwidth),
            "a link's bandwidth is bytes per second > 0 (e.g. 450e9 for NVLink 4), got "
            f"{self.bandwidth!r}",
        )


@dataclass(frozen=True)
class Hardware:
    """A device, its links, and how many devices share a node.

    ``flops``: *achieved* FLOP/s per device (peak × the MFU assumed; ``source`` says which).
    ``memory_bytes``: device memory, bytes. ``node_link``: the link between the devices of one
    node (NVLink). ``network_link``: the link between nodes (InfiniBand), never faster than the
    node link. ``gpus_per_node``: devices per node; ranks fill nodes in order, rank r in node
    r // gpus_per_node (``mesh.LAYOUT`` says where each rank sits on a mesh). None, with no
    network link: every device sits in one node. ``host_link``: the device-host link (PCIe), for
    offloaded state's h2d/d2h transfers.

    A group's link is decided by where its ranks sit, never by its axis' name (SPEC §9):
    ``group_link`` for one group, ``axis_link`` for every group of a mesh axis."""

    name: str
    flops: float
    memory_bytes: int
    node_link: Link
    network_link: Link | None = None
    gpus_per_node: int | None = None
    source: str = ""
    host_link: Link | None = None
    #: The collective library whose algorithms price its collectives (``schedule.LIBRARIES``):
    #: "nccl" on GPUs, "gloo" where the runtime ran on CPUs; they differ in the broadcast (NCCL's
    #: ring, gloo's binomial tree: ``schedule.BROADCASTS``).
    collectives: str = "nccl"
    #: How the achieved FLOP/s varies with the matmul shapes (``gemm.GemmCurve``): points
    #: (arithmetic intensity, factor × ``flops``). Empty, as in every preset: ``flops`` for
    #: every matmul. ``placement-edu calibrate`` measures one (issue 27, item 3).
    gemm_curve: GemmCurve = ()
    #: Device memory bandwidth, bytes per second (``HBM_BANDWIDTH``), at which the memory-bound
    #: work beside the matmuls runs: a transformer is then priced op by op on the roofline
    #: (``roofline``: each op's max(FLOPs / rate, bytes / bandwidth)). None: the FLOP-only model
    #: (every FLOP at ``flops``, no memory-bound op priced).
    memory_bandwidth: float | None = None
    #: The FP8 tensor cores' dense peak over the bf16 one (2 on an H100 or H200: 1,979e12 against
    #: 989e12, ``float8.FP8_PEAK_FLOPS``): a float8 GEMM runs at ``flops`` × this. None: no FP8
    #: tensor cores (an A100), so a float8 precision is refused.
    fp8_speedup: float | None = None
    #: How a step runs on it, which the roofline prices (issue 42; switches, not the chip's facts):
    #: ``roofline`` -- each op of a transformer at max(FLOPs / rate, bytes / ``memory_bandwidth``)
    #: (``roofline``), which needs the bandwidth; False, as in every preset (the API's default):
    #: the FLOP-only model. ``time`` turns it on (``--no-roofline``: off). ``fused`` --
    #: torch.compile's fusion of the elementwise chains (``roofline.FUSED_CHAINS``, an
    #: approximation); False: eager, every op a kernel.
    roofline: bool = False
    fused: bool = False
    #: The optimizer step's kernels, on the roofline (``roofline.ADAMW_BYTES``): "foreach"
    #: (torch.optim.AdamW's default, torchtitan's) or "fused" (one kernel: Apex's and Transformer
    #: Engine's FusedAdam, Megatron-LM's; torch's fused=True). torch.compile of the blocks leaves
    #: the optimizer as it is.
    optimizer: str = "foreach"

    def __post_init__(self) -> None:
        expect(
            self.optimizer in ("foreach", "fused"),
            f"hardware {self.name!r}: optimizer is foreach or fused (the AdamW step's kernels), "
            f"got {self.optimizer!r}",
        )
        expect(
            not self.roofline or self.memory_bandwidth is not None,
            f"hardware {self.name!r}: the roofline prices memory-bound ops at the HBM bandwidth; "
            "give memory_bandwidth (bytes per second, e.g. 3.35e12 for an H100) or roofline=False",
        )
        check_curve(self.gemm_curve, f"hardware {self.name!r}: gemm_curve")
        expect(
            self.fp8_speedup is None or is_rate(self.fp8_speedup),
            f"hardware {self.name!r}: fp8_speedup is the FP8 peak over the bf16 peak (2 on an "
            f"H100) or None, got {self.fp8_speedup!r}",
        )
        expect(
            self.memory_bandwidth is None or is_rate(self.memory_bandwidth),
            f"hardware {self.name!r}: memory_bandwidth is bytes per second > 0 (e.g. 2.039e12, "
            f"an A100-80GB's HBM2e) or None, got {self.memory_bandwidth!r}",
        )
        expect(
            self.collectives in LIBRARIES,
            f"hardware {self.name!r}: collectives is one of {', '.join(LIBRARIES)} (the library "
            f"whose algorithms price the collectives), got {self.collectives!r}",
        )
        expect(
            is_rate(self.flops),
            f"hardware {self.name!r}: flops is achieved FLOP/s per device > 0 (e.g. 400e12), got "
            f"{self.flops!r}",
        )
        expect(
            isinstance(self.memory_bytes, int) and self.memory_bytes > 0,
            f"hardware {self.name!r}: memory_bytes is a whole number of bytes > 0 (e.g. 80 * "
            f"10**9), got {self.memory_bytes!r}",
        )
        for field_name in ("node_link", "network_link", "host_link"):
            value = getattr(self, field_name)
            expect(
                isinstance(value, Link) or (value is None and field_name != "node_link"),
                f"hardware {self.name!r}: {field_name} is a Link (e.g. NVLINK4), got {value!r}",
            )
        expect(
            (self.gpus_per_node is None) == (self.network_link is None),
            f"hardware {self.name!r}: give gpus_per_node and network_link together (nodes of "
            "gpus_per_node devices joined by the network link), or neither (every device in one "
            f"node); got gpus_per_node={self.gpus_per_node!r}, network_link={self.network_link!r}",
        )
        if self.gpus_per_node is not None:
            positive_int(f"hardware {self.name!r}: gpus_per_node", self.gpus_per_node)
        network = self.network_link
        if network is not None:
            expect(
                network.bandwidth <= self.node_link.bandwidth,
                f"hardware {self.name!r}: its network link ({network.bandwidth:g} B/s) is faster "
                f"than its node link ({self.node_link.bandwidth:g} B/s); expected the network to "
                "be the slower link",
            )

    def node(self, rank: int) -> int:
        """The node ``rank`` sits in: rank // gpus_per_node (0 when every device is in one)."""
        return 0 if self.gpus_per_node is None else rank // self.gpus_per_node

    def group_link(self, ranks: Sequence[int]) -> Link:
        """The link a ring over ``ranks`` runs at: the node link when every rank sits in one node;
        otherwise the ring crosses the network, the slowest link it crosses."""
        if len({self.node(r) for r in ranks}) <= 1 or self.network_link is None:
            return self.node_link
        return self.network_link

    def spans_nodes(self, mesh: Mesh, axis: str) -> bool:
        """Whether some group of ``axis`` on ``mesh`` spans nodes (``Mesh.group``'s groups).

        Along ``axis`` of degree n and stride s (``Mesh.stride``), the ranks form blocks of n·s
        consecutive ranks, each holding s groups. With nodes of g devices, every group stays
        inside a node exactly when n = 1, the whole mesh fits one node, or g is a multiple of n·s
        (no node boundary cuts a block); otherwise a boundary cuts some block, and a group of it
        has ranks on both sides. Computed, not searched: a mesh of 2^40 devices costs the same."""
        g, n = self.gpus_per_node, mesh.degree(axis)
        if g is None or n == 1 or mesh.world_size <= g:
            return False
        return g % (n * mesh.stride(axis)) != 0

    def axis_link(self, mesh: Mesh | str, axis: str) -> Link:
        """The link the groups of ``axis`` on ``mesh`` run at: the network link when any of them
        spans nodes (a step waits for its slowest group), else the node link."""
        mesh = as_mesh(mesh)
        if self.spans_nodes(mesh, axis) and self.network_link is not None:
            return self.network_link
        return self.node_link

    def with_links(self, node: Link | None = None, network: Link | None = None) -> "Hardware":
        """A copy with the node link or the network link replaced, e.g.
        ``hw.with_links(network=IB_HDR)``."""
        return replace(
            self,
            node_link=node or self.node_link,
            network_link=network or self.network_link,
        )


# Links, each with its source. W is the one-direction bandwidth a device sends at; α is an order
# of magnitude (NCCL's per-step latency is a few microseconds inside a node, more across nodes).
NVLINK3 = Link(
    3e-6,
    300e9,
    "A100 SXM NVLink 3: 600 GB/s total = 300 GB/s each direction (NVIDIA A100 "
    "datasheet); α ≈ 3 µs per ring step (order of NCCL's intra-node latency)",
    name="NVLink 3",
)
NVLINK4 = Link(
    3e-6,
    450e9,
    "H100 SXM NVLink 4: 900 GB/s total = 450 GB/s each direction (NVIDIA H100 "
    "datasheet); α ≈ 3 µs per ring step",
    name="NVLink 4",
)
IB_HDR = Link(
    10e-6,
    25e9,
    "InfiniBand HDR, 200 Gb/s = 25 GB/s per GPU (DGX A100: one HDR NIC per GPU); "
    "α ≈ 10 µs per ring step across nodes",
    name="InfiniBand HDR",
)
IB_NDR = Link(
    10e-6,
    50e9,
    "InfiniBand NDR, 400 Gb/s = 50 GB/s per GPU (DGX H100: one NDR NIC per GPU); "
    "α ≈ 10 µs per ring step across nodes",
    name="InfiniBand NDR",
)
PCIE4 = Link(10e-6, 25e9, "PCIe 4.0 x16: ~25 GB/s achievable each way (32 GB/s raw)", "PCIe 4")
PCIE5 = Link(10e-6, 50e9, "PCIe 5.0 x16: ~50 GB/s achievable each way (64 GB/s raw)", "PCIe 5")

_A100 = (
    "A100-80GB SXM: 312e12 bf16 dense FLOP/s peak (NVIDIA datasheet); achieved 50% MFU = 156e12, "
    "close to Megatron-LM's 163e12 (52%) at 1T parameters (Narayanan et al. 2021, Table 1)"
)
_H100 = (
    "H100-80GB SXM: 989e12 bf16 dense FLOP/s peak (NVIDIA datasheet); achieved 40% MFU = 395.6e12, "
    "a typical large-scale figure (Llama 3 reports 38-43% on H100, Dubey et al. 2024, Table 4)"
)
_H200 = (
    "H200-141GB SXM: 989e12 bf16 dense FLOP/s peak, the H100 SXM's compute with 141 GB of HBM3e "
    "and NVLink 4 at 900 GB/s = 450 GB/s each direction (NVIDIA H200 Tensor Core GPU datasheet); "
    "achieved 40% MFU = 395.6e12 assumed, as for the H100. Measured, not assumed (issue 23): HF "
    "GPT-2 1.5B in bf16, PyTorch eager, reached ~190e12 of 6Ψ·tokens per second on an H200 (19%), "
    "so this preset predicts that step 2× too fast; `placement-edu calibrate --device cuda` "
    "measures a step's MFU"
)

_GRAND_TETON = (
    "torchtitan's Grand Teton H100 (benchmarks/llama3_h100_202412_torchtitan.md): 'each H100 GPU "
    "is equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth', 'backend RDMA network "
    "with 400 Gb/s per GPU' (InfiniBand NDR's 50 GB/s), 'the default 500W power limit'; bf16 "
    "peak taken as the SXM part's 989e12 (its footnote: 'the actual peak TFLOPs number is between "
    "SXM and NVL, and we don't know its exact value'); achieved 35% MFU = 346.15e12, inside the "
    "'33% to 39% MFU' it reports for Llama 3.1 8B under FSDP"
)

#: Dense bf16 peak FLOP/s of the GPUs the presets model (NVIDIA datasheets, SXM parts); a preset's
#: achieved FLOP/s is this peak × the MFU its source names.
PEAK_FLOPS: dict[str, float] = {"A100": 312e12, "H100": 989e12, "H200": 989e12}
#: Dense FP8 peak FLOP/s (NVIDIA H100 and H200 datasheets, SXM: 1,979 TFLOPS without sparsity,
#: 3,958 with); an A100 has no FP8 tensor cores.
FP8_PEAK_FLOPS: dict[str, float] = {"H100": 1979e12, "H200": 1979e12}
#: Device memory bandwidth, bytes per second (NVIDIA datasheets, SXM parts): A100 80GB 2,039 GB/s
#: (HBM2e; the 40GB part 1,555), H100 3.35 TB/s (HBM3), H200 4.8 TB/s (HBM3e); torchtitan's
#: Grand Teton H100 (96GB HBM2e) 2.4 TB/s, its benchmark's "Hardware" section
#: (benchmarks/llama3_h100_202412_torchtitan.md).
HBM_BANDWIDTH: dict[str, float] = {"A100": 2.039e12, "H100": 3.35e12, "H200": 4.8e12}
GRAND_TETON_HBM_BANDWIDTH = 2.4e12


#: An "80GB" A100 or H100 has 80 GiB of HBM: 85.9e9 bytes (nvidia-smi shows 81,559 MiB usable).
HBM_80GB = 80 * 2**30
#: The H200's "141GB", read the same way: 141 GiB (nvidia-smi shows 143,771 MiB usable).
HBM_141GB = 141 * 2**30
#: The Grand Teton H100's "96GB HBM2e", read the same way: 96 GiB.
HBM_96GB = 96 * 2**30


def _device(name: str) -> dict[str, float | None]:
    """What a preset's GPU (its name's first word: "h100-nvlink-ib" -> H100) brings to the
    roofline: its HBM bandwidth (``HBM_BANDWIDTH``) and its FP8 peak over its bf16 peak."""
    gpu = name.split("-")[0].upper()
    fp8 = FP8_PEAK_FLOPS.get(gpu)
    return {
        "memory_bandwidth": HBM_BANDWIDTH.get(gpu),
        "fp8_speedup": None if fp8 is None else fp8 / PEAK_FLOPS[gpu],
    }


def _cluster(
    name: str,
    flops: float,
    source: str,
    inside: Link,
    across: Link,
    host: Link,
    memory_bytes: int = HBM_80GB,
) -> Hardware:
    """Nodes of 8 GPUs (DGX A100, DGX H100) on NVLink, joined by InfiniBand: a group of ranks
    inside one node runs on NVLink, one that spans nodes on InfiniBand."""
    return Hardware(
        name,
        flops,
        memory_bytes,
        inside,
        across,
        gpus_per_node=8,
        source=source + "; 8 GPUs per node on NVLink (DGX), nodes joined by InfiniBand",
        host_link=host,
        **_device(name),  # type: ignore[arg-type]
    )


def _one_node(
    name: str, flops: float, source: str, inside: Link, host: Link, memory_bytes: int = HBM_80GB
) -> Hardware:
    """Every device in one NVLink domain (a real node holds 8; past 8 an idealization)."""
    return Hardware(
        name,
        flops,
        memory_bytes,
        inside,
        source=source + "; every device in one node on NVLink (a real node holds 8 GPUs: past 8 "
        "an idealization, as if the network were NVLink)",
        host_link=host,
        **_device(name),  # type: ignore[arg-type]
    )


#: Named presets. A plain dict, so the other engineer's calibrated "this_machine" can be added to
#: it.
HARDWARE: dict[str, Hardware] = {
    "a100-nvlink-ib": _cluster(
        "a100-nvlink-ib", 0.5 * PEAK_FLOPS["A100"], _A100, NVLINK3, IB_HDR, PCIE4
    ),
    "h100-nvlink-ib": _cluster(
        "h100-nvlink-ib", 0.4 * PEAK_FLOPS["H100"], _H100, NVLINK4, IB_NDR, PCIE5
    ),
    "h200-nvlink-ib": _cluster(
        "h200-nvlink-ib", 0.4 * PEAK_FLOPS["H200"], _H200, NVLINK4, IB_NDR, PCIE5, HBM_141GB
    ),
    "a100-nvlink": _one_node("a100-nvlink", 0.5 * PEAK_FLOPS["A100"], _A100, NVLINK3, PCIE4),
    "h100-nvlink": _one_node("h100-nvlink", 0.4 * PEAK_FLOPS["H100"], _H100, NVLINK4, PCIE5),
    "h200-nvlink": _one_node(
        "h200-nvlink", 0.4 * PEAK_FLOPS["H200"], _H200, NVLINK4, PCIE5, HBM_141GB
    ),
    # torchtitan's benchmark machine (benchmarks/llama3_h100_202412_torchtitan.md, "Hardware"):
    # 8 H100s a host on NVLink, 96GB HBM2e at 2.4 TB/s, 400 Gb/s RDMA per GPU, 500 W.
    "h100-grand-teton": replace(
        _cluster(
            "h100-grand-teton",
            0.35 * PEAK_FLOPS["H100"],
            _GRAND_TETON,
            NVLINK4,
            IB_NDR,
            PCIE5,
            HBM_96GB,
        ),
        memory_bandwidth=GRAND_TETON_HBM_BANDWIDTH,
    ),  # fmt: skip
    # Measured, not published: `placement-edu calibrate` prints this line (docs/calibration.md).
    "this_machine": Hardware(
        "this_machine",
        3.22e10,
        25276203008,
        Link(3.94e-4, 1.17e9),
        source="fitted by `placement-edu calibrate` on this 2-core machine (shared with other "
        "jobs), 2026-12-03: gloo over loopback at N = 2, 4, payloads 1 KiB-4 MiB, median of 10 "
        "repeats, pooled over all-reduce, all-gather, reduce-scatter and send (rms relative error "
        "59%); spread (max-min)/median over repeats: median 179%, worst 1418%; flops: a float64 "
        "256x256 matmul, 2 ranks at once (the toy MLP's own step achieves ~0.07e9); memory: the "
        "machine's RAM, shared by every rank",
        host_link=Link(
            1.41e-5, 1.80e10, "a memory copy (CPU-only: the 'host link' of offloaded state)"
        ),
        collectives="gloo",
    ),
}


def get_hardware(hardware: str | Hardware) -> Hardware:
    """A preset by name, or a user-defined Hardware passed through."""
    if isinstance(hardware, Hardware):
        return hardware
    if hardware not in HARDWARE:
        raise PlacementError(
            f"unknown hardware {hardware!r}; known presets: {', '.join(HARDWARE)}; "
            "or pass Hardware(name, flops, memory_bytes, node_link, network_link, gpus_per_node)"
        )
    return HARDWARE[hardware]
