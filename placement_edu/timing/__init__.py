"""Time: when does communication volume matter? (SPEC §9)

SPEC §4 counts bytes; this module turns them into seconds. Read top to bottom:

- ``Link`` and ``Hardware``: the numbers a time needs (achieved FLOP/s, device memory, and per mesh
  axis a latency α and a bandwidth W), with named presets in ``HARDWARE``, each citing its sources.
- ``ring_steps``       SPEC §9: how many latency-bound steps a ring collective takes
- ``op_time``          SPEC §9: α·steps + ring bytes / W for one operation of a derived schedule
- ``comm_time``        the seconds of a whole schedule, per phase (forward, backward, step)
- ``flops_per_token``  SPEC §9: 6Ψ per token (2 forward + 4 backward) + attention's 12·L·h·s,
                       plus what recomputation replays (``FLOP_CONVENTION`` names the count)
- ``compute_time``     those FLOPs at the device's achieved FLOP/s, per pass (at the
                       model's matmul shapes when the hardware has a ``gemm_curve``)
- ``on_critical_path`` SPEC §9: tensor parallelism's collectives, which compute waits for
- ``overlapped``       the collectives "bucketed" overlaps unit by unit, with their units
- ``exposed``          the overlap models, "none", "per_pass", "per_pass+tp" and "bucketed"
- ``step_time``        compute + exposed communication + the pipeline bubble, as a ``StepTime``
- ``compute_bound_tokens``  the tokens per device above which a strategy is compute-bound

Units: seconds, bytes, bytes per second, FLOP/s. Every time is a float (a time is a model, not an
exact count: the bytes it starts from stay exact in ``schedule``). Two views of the same step, side
by side (SPEC §9): *volume* (``Schedule.ring_bytes``, exact) and *time* (this module, a model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Mapping, Sequence

from placement_edu.experts import has_experts
from placement_edu.errors import PlacementError, expect, positive_int
from placement_edu.gemm import GemmCurve, check_curve, gemm_factor
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import (
    Model,
    TransformerSpec,
    as_model,
    every_kth,
    stage_units,
    tensor_divides_heads,
)
from placement_edu.placement import BATCH_AXES, GATHERED, PHASES, State
from placement_edu.precision import Precision, get_precision
from placement_edu.schedule import (
    BROADCASTS,
    HOST_TRANSFERS,
    LIBRARIES,
    OP_COSTS,
    REDUCTIONS,
    Op,
    Schedule,
    derive_schedule,
    model_axis_degree,
    pipeline_bubble,
    ring_bytes,
    sent_bytes,
)
from placement_edu.strategies import Strategy, get_strategy

#: The passes a step's time is split into: the step's phases; "step" is the optimizer step (its
#: compute is not modelled).
PASSES: tuple[str, ...] = PHASES
#: How communication may hide under compute (SPEC §9). "none": every collective waits for compute
#: and compute for it; "per_pass": each pass's collectives run under that pass's compute, except
#: tensor parallelism's, which the next matmul waits for (``on_critical_path``); "per_pass+tp":
#: those hide too, as Megatron's ``--tp-comm-overlap`` (Transformer Engine) arranges. "bucketed"
#: (and "bucketed+tp"): between the two extremes -- gradient reductions and parameter gathers
#: run unit by unit beside one micro-batch's compute, the last reduction bucket and the first
#: gathered unit exposed (``overlapped``, ``bucketed_exposed``).
OVERLAPS: tuple[str, ...] = ("none", "per_pass", "per_pass+tp", "bucketed", "bucketed+tp")
#: PyTorch DDP's default gradient bucket: ``bucket_cap_mb=25``, read as MiB
#: (``DistributedDataParallel``: ``bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)``).
#: Megatron-LM's default is max(40e6, 1e6·d) parameters per bucket (``DistributedDataParallelConfig
#: .bucket_size``); this model uses DDP's for every strategy whose parameters are whole on the
#: data axis (dp, zero1, zero2).
BUCKET_BYTES = 25 * 2**20


# --- the hardware ------------------------------------------------------------------------------
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
            isinstance(self.bandwidth, (int, float))
            and math.isfinite(self.bandwidth)
            and self.bandwidth > 0,
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
    #: work beside the matmuls runs: eager attention's softmax and dropout over the b·a·s² scores
    #: (``eager_attention_bytes_per_token``). None, as in every preset: not priced (0 s).
    memory_bandwidth: float | None = None

    def __post_init__(self) -> None:
        check_curve(self.gemm_curve, f"hardware {self.name!r}: gemm_curve")
        expect(
            self.memory_bandwidth is None
            or (
                isinstance(self.memory_bandwidth, (int, float))
                and math.isfinite(self.memory_bandwidth)
                and self.memory_bandwidth > 0
            ),
            f"hardware {self.name!r}: memory_bandwidth is bytes per second > 0 (e.g. 2.039e12, "
            f"an A100-80GB's HBM2e) or None, got {self.memory_bandwidth!r}",
        )
        expect(
            self.collectives in LIBRARIES,
            f"hardware {self.name!r}: collectives is one of {', '.join(LIBRARIES)} (the library "
            f"whose algorithms price the collectives), got {self.collectives!r}",
        )
        expect(
            isinstance(self.flops, (int, float)) and math.isfinite(self.flops) and self.flops > 0,
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

#: Dense bf16 peak FLOP/s of the GPUs the presets model (NVIDIA datasheets, SXM parts); a preset's
#: achieved FLOP/s is this peak × the MFU its source names.
PEAK_FLOPS: dict[str, float] = {"A100": 312e12, "H100": 989e12, "H200": 989e12}
#: Device memory bandwidth, bytes per second (NVIDIA datasheets, SXM parts): A100 80GB 2,039 GB/s
#: (HBM2e), H100 3.35 TB/s (HBM3), H200 4.8 TB/s (HBM3e). No preset carries it
#: (``Hardware.memory_bandwidth``); ``benchmarks/published/compare.py`` gives it to the A100 runs.
HBM_BANDWIDTH: dict[str, float] = {"A100": 2.039e12, "H100": 3.35e12, "H200": 4.8e12}


#: An "80GB" A100 or H100 has 80 GiB of HBM: 85.9e9 bytes (nvidia-smi shows 81,559 MiB usable).
HBM_80GB = 80 * 2**30
#: The H200's "141GB", read the same way: 141 GiB (nvidia-smi shows 143,771 MiB usable).
HBM_141GB = 141 * 2**30


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


# --- collectives: α·steps + bytes / W (SPEC §9) -----------------------------------------------
def ring_steps(op: str, n: int, library: str | None = None) -> int:
    """SPEC §9: the latency-bound steps of ``op`` over a group of ``n`` (``library``: a broadcast
    as that library runs it, ``schedule.BROADCASTS``: NCCL's ring N-1, gloo's tree ⌈log2 N⌉).

    all-reduce 2(N-1) (a reduce-scatter then an all-gather); all-gather, reduce-scatter N-1;
    send 1 (one message); recv 0 (the transfer is priced once, at the sender, as its bytes are:
    SPEC §4); broadcast N-1 (a ring broadcast passes the message down N-1 hops, and every member
    of the group waits for it, root or not); a host transfer (h2d, d2h) 1, one message over the
    host link, on a "group" of one device. Local ops (scale, optimizer_step) and collectives over
    one device take none. The steps are a column of the core's one cost table,
    ``schedule.OP_COSTS``."""
    if op not in OP_COSTS or (n <= 1 and op not in HOST_TRANSFERS):
        return 0
    if op == "broadcast" and library is not None:
        return BROADCASTS[library].steps(n)
    return OP_COSTS[op].steps(n)


def op_time(op: Op, link: Link, library: str | None = None) -> float:
    """Seconds one device spends on ``op`` over ``link``: α·steps + bytes / W (SPEC §9).

    The bytes are the ones this device sends (``schedule.sent_bytes``: the ring bytes of SPEC §4;
    a host transfer: its payload over the host link). A broadcast: as ``library`` runs it (NCCL's
    ring: every member waits N-1 hops and S/W; gloo's binomial tree: ⌈log2 N⌉ rounds of α + S/W),
    or with None the star the schedule counts (the root sends (N-1)·S). Start-up ops (once, not
    per step: ``startup_time``) and local ops cost 0 s."""
    return 0.0 if op.once else _alpha_beta(op, link, library)


def _alpha_beta(op: Op, link: Link, library: str | None) -> float:
    sent = sent_bytes(op.op, op.group, op.payload_bytes, op.root, library)
    return link.alpha_s * ring_steps(op.op, op.group, library) + float(sent) / link.bandwidth


def op_link(op: Op, hw: Hardware, mesh: Mesh) -> Link | None:
    """The link ``op`` runs over: the host link for h2d/d2h; for a collective, the link of its
    axis' groups on ``mesh`` (``Hardware.axis_link``: where the ranks sit); None for a local op."""
    if op.op in HOST_TRANSFERS:
        expect(
            hw.host_link is not None,
            f"hardware {hw.name!r} has no host link, but the schedule moves offloaded state "
            f"({op.op}); give it host_link=Link(...) (PCIe)",
        )
        return hw.host_link
    if op.is_collective and op.axis is not None:
        return hw.axis_link(mesh, op.axis)
    return None


def on_critical_path(op: Op) -> bool:
    """SPEC §9: tensor parallelism's collectives of activations (Megatron's g and f all-reduces,
    sequence parallelism's all-gathers and reduce-scatters) sit on the critical path: the next
    matmul needs their result, so no compute of the same micro-batch runs under them, unless the
    implementation splits the matmuls to overlap them (Megatron's ``--tp-comm-overlap``: the
    "per_pass+tp" overlap model). Gradient reductions and parameter gathers can run beside the
    compute of other layers. On a context axis, Ulysses' all-to-alls wait the same way (attention
    needs the head-split Q, K, V; the next matmul the output sent back), while ring attention's
    K/V chunks travel under the blockwise attention of the chunk in hand (Liu et al. 2023, §3:
    the rounds overlap compute), so they hide like the others. On the expert axis, the MoE
    all-to-alls wait too: the experts need the dispatched tokens, the next layer the combined
    outputs (nothing of the same micro-batch is left to run under them)."""
    if op.state is not State.ACTIVATIONS:
        return False
    return op.axis in ("tensor", "expert") or (op.axis == "context" and op.op == "all_to_all")


def comm_time(
    schedule: Schedule, hw: Hardware, mesh: Mesh | str, critical: bool | None = None
) -> dict[str, float]:
    """Seconds of communication per phase ("forward", "backward", "step") of one optimizer step on
    one device of ``mesh``: the sum of ``op_time`` over the schedule's per-step operations, in that
    phase, each on the link of its axis' groups (``op_link``). ``critical``: True sums only the
    ops ``on_critical_path``, False only the others, None all.

    A step repeats the same operation many times (each layer, each micro-batch): identical
    operations (same op, axis, phase, group and bytes) are priced once and counted -- an operation
    of a repeated micro-batch pass (``Schedule.counted``) with its count."""
    counts: dict[tuple, list] = {}
    for op, times in schedule.counted():
        if op.once or (critical is not None and on_critical_path(op) != critical):
            continue
        size = op.elements  # an int or a Fraction: both have numerator and denominator
        key = (
            op.op,
            op.axis,
            op.phase,
            op.group,
            size.numerator,
            size.denominator,
            op.element_bytes,
            op.root,
        )
        if key in counts:
            counts[key][1] += times
        else:
            counts[key] = [op, times]
    out = {phase: 0.0 for phase in PASSES}
    mesh = as_mesh(mesh)
    for op, count in counts.values():
        link = op_link(op, hw, mesh)
        if link is not None:
            out[op.phase] = out.get(op.phase, 0.0) + count * op_time(op, link, hw.collectives)
    return out


def startup_time(schedule: Schedule, hw: Hardware, mesh: Mesh | str) -> float:
    """Seconds of the start-up operations (SPEC §4 rule 4: replicated parameters broadcast once,
    so that the replicas start identical), booked once per run, never per step: ``comm_time``
    and ``step_time`` leave them out, each priced as ``hw``'s library runs it."""
    mesh = as_mesh(mesh)
    once = [op for op, _ in schedule.counted() if op.once]
    return sum(
        _alpha_beta(op, link, hw.collectives) for op in once if (link := op_link(op, hw, mesh))
    )


# --- compute: 6Ψ per token, and attention (SPEC §9) --------------------------------------------
#: The FLOP count the compute time uses, named (as published figures must say which): PaLM's
#: model FLOPs, 6N + 12·L·h·s per token (Chowdhery et al. 2022, Appendix B: N every parameter,
#: 12·L·H·Q·T the attention scores' matmuls, forward and backward, H·Q = h, T = s), plus what
#: recomputation replays (hardware FLOPs). Megatron-LM's ``num_floating_point_operations`` counts
#: the same attention term and only the matmuls' weights (no biases, norms or position embeddings):
#: ``megatron_flops_per_token``. An abstract model (no sequence) has no attention term: 6Ψ.
FLOP_CONVENTION = "PaLM's 6Ψ + 12·L·h·s per token (model FLOPs), plus recomputation (hardware)"


def attention_flops_per_token(model) -> dict[str, int]:
    """FLOPs of attention's two s² matmuls for one token, per pass, that 6Ψ leaves out (they have
    no parameters): per layer, QKᵀ (2·s·h: the token's query against s keys of h values) and
    attention over V (2·s·h). Forward 4·L·h·s, backward twice that: 12·L·h·s in all (PaLM's
    12·L·H·Q·T; Narayanan et al. 2021 eq. 3's s/(6h) term). No causal halving, as both count.
    0 for a model without a sequence."""
    model = as_model(model)
    if not isinstance(model, TransformerSpec) and not has_experts(model):
        return {"forward": 0, "backward": 0, "step": 0}
    forward = 4 * model.layers * model.hidden * model.seq
    return {"forward": forward, "backward": 2 * forward, "step": 0}


def flops_per_token(psi_or_model, recompute: str = "none") -> dict[str, int]:
    """SPEC §9: hardware FLOPs of one token through a dense model, per pass (``FLOP_CONVENTION``).

    Forward 2Ψ (a multiply and an add per parameter), backward 4Ψ (the gradients of the
    activations and of the weights, 2Ψ each): 6Ψ in all; a transformer adds attention's
    12·L·h·s (``attention_flops_per_token``). Recomputation replays forward work inside backward:
    "full" the whole forward (2Ψ + 4·L·h·s; 8Ψ in all for an abstract model); "selective" only
    QKᵀ and attention over V, 4·b·s²·h per layer and micro-batch = 4·L·h·s per token
    (Korthikanti et al. 2022, §4.2 and eq. 8; softmax and dropout are elementwise, not counted).
    Model FLOPs (what MFU counts): ``model_flops_per_token``."""
    expect(
        recompute in TransformerSpec.RECOMPUTE or every_kth(recompute),
        f"recompute must be one of {', '.join(TransformerSpec.RECOMPUTE)} or layer:K, got "
        f"{recompute!r}",
    )
    model = as_model(psi_or_model)
    # a mixture of experts runs each token through its k experts only: Ψ_active (experts.py); a
    # Llama's untied input embedding is a lookup, no FLOPs (``TransformerSpec.lookup_params``)
    psi = model.active_psi if has_experts(model) else model.psi
    psi -= getattr(model, "lookup_params", 0)
    attention = attention_flops_per_token(psi_or_model)
    forward = 2 * psi + attention["forward"]
    replayed = replayed_share(model, recompute, forward, attention["forward"])
    return {"forward": forward, "backward": 4 * psi + attention["backward"] + replayed, "step": 0}


def replayed_share(model: object, recompute: str, forward: int, attention: int) -> int:
    """Forward FLOPs recomputation replays in backward, per token: none; core attention's under
    "selective"; the whole ``forward`` under "full"; under torchtitan's layer:K the checkpointed
    layers' share of it, L // K of the L layers (rounded down to a whole FLOP)."""
    every = every_kth(recompute)
    if every:
        layers = getattr(model, "layers", 1)
        return forward * (layers // every) // layers
    return {"none": 0, "selective": attention, "full": forward}[recompute]


def palm_flops_per_token(psi_or_model) -> int:
    """PaLM's convention (Chowdhery et al. 2022, Appendix B): model FLOPs of one token, forward +
    backward, nothing replayed -- 6N + 12·L·H·Q·T with N = Ψ every parameter, H·Q = h, T = s:
    6Ψ + 12·L·h·s. What MFU divides by the peak; hardware FLOPs (HFU) add what recomputation
    replays: ``flops_per_token``."""
    return sum(flops_per_token(psi_or_model).values())


def model_flops_per_token(psi_or_model) -> int:
    """Model FLOPs of one token in the package's convention, ``FLOP_CONVENTION``: PaLM's
    (``palm_flops_per_token``)."""
    return palm_flops_per_token(psi_or_model)


def megatron_layer_matmul_weights(model: TransformerSpec) -> int:
    """Weights of one layer's matmuls, as Megatron counts them: Q and the output projection h²
    each, K and V h·K·h/a each (grouped-query attention), the MLP 2hf (3hf with SwiGLU: Megatron's
    ``gated_linear_multiplier`` 3/2 on a Llama block). No biases or norms."""
    h = model.hidden
    mlp = 3 if model.llama else 2
    return 2 * h * h + 2 * h * model.kv_width + mlp * h * model.ffn


def megatron_attention_forward_per_token(model: TransformerSpec, causal: bool = False) -> int:
    """Core attention's forward FLOPs for one token as Megatron counts them: QKᵀ and attention over
    V, 2·s·h each per layer, 4·L·h·s (``attention_flops_per_token``'s forward) -- halved with
    ``causal`` (only half of the causal mask is non-zero), as Megatron-LM's main branch counts
    since it added that factor (seen at commit 001b00c of megatron/training/training.py); the
    papers (Narayanan et al. 2021 eq. 3, Korthikanti et al. 2022) and PaLM do not halve."""
    forward = attention_flops_per_token(model)["forward"]
    return forward // 2 if causal else forward


def megatron_flops_per_token(model: TransformerSpec, causal: bool = False) -> int:
    """Megatron-LM's ``num_floating_point_operations`` (megatron/training/training.py,
    ``transformer_flops`` for a dense GPT without SwiGLU or MoE), per token: model FLOPs, 3 GEMMs
    per weight (forward, backward's data and weight gradients) × 2 FLOPs × the matmuls' weights --
    L layers of ``megatron_layer_matmul_weights`` and the logit layer V·h -- plus 3 × core
    attention's forward (``megatron_attention_forward_per_token``). For K = a and f = 4h:
    72·L·h²·(1 + s/(6h) + V/(12hL)) (Narayanan et al. 2021, eq. 3 without its recomputation;
    Korthikanti et al. 2022, eq. 7). It leaves out biases, norms and position embeddings, which
    PaLM's 6Ψ counts."""
    weights = model.layers * megatron_layer_matmul_weights(model) + model.vocab * model.hidden
    return 6 * weights + 3 * megatron_attention_forward_per_token(model, causal)


def megatron_hardware_flops_per_token(
    model: TransformerSpec, recompute: str = "none", causal: bool = False
) -> int:
    """``megatron_flops_per_token`` plus the forward work recomputation replays (hardware FLOPs):
    "full" every layer's forward -- 2·L·(layer weights) + core attention, not the logit layer --
    "selective" core attention's forward (Korthikanti et al. 2022, §4.2). With "full" and K = a,
    f = 4h: 96·L·h²·(1 + s/(6h) + V/(16hL)) per token, Narayanan et al. 2021 eq. (3)."""
    expect(
        recompute in TransformerSpec.RECOMPUTE or every_kth(recompute),
        f"recompute must be one of {', '.join(TransformerSpec.RECOMPUTE)} or layer:K, got "
        f"{recompute!r}",
    )
    attention = megatron_attention_forward_per_token(model, causal)
    layers = 2 * model.layers * megatron_layer_matmul_weights(model) + attention
    replayed = replayed_share(model, recompute, layers, attention)
    return megatron_flops_per_token(model, causal) + replayed


def logit_flops_per_token(model) -> dict[str, int]:
    """FLOPs of one token through a transformer's logit layer (the output projection onto the
    vocabulary, V·h weights), per pass: forward 2·V·h, backward 4·V·h; 0 for a model without a
    vocabulary. Already in 6Ψ (Ψ counts the tied V·h embedding); what a pipeline's last stage does
    besides its layers (``compute_time``). Never recomputed: recomputation replays layers."""
    model = as_model(model)
    if not isinstance(model, TransformerSpec):
        return {"forward": 0, "backward": 0, "step": 0}
    forward = 2 * model.vocab * model.hidden
    return {"forward": forward, "backward": 2 * forward, "step": 0}


def compute_time(
    psi_or_model,
    tokens: float | Fraction,
    hw: Hardware,
    recompute: str = "none",
    tensor: int = 1,
    stages: int = 1,
) -> dict[str, float]:
    """Seconds of compute per pass ("forward", "backward", "step") for ``tokens`` tokens through a
    model (Ψ, or a transformer: attention counted) on one device of ``hw`` at its achieved FLOP/s
    (``flops_per_token``: hardware FLOPs, recomputation included). The optimizer step's own
    compute is not modelled (0 s).

    Per device of a mesh: the step's FLOPs spread evenly, so a device does 6Ψ × (tokens per
    device) whatever the mesh -- a tensor or pipeline group of k devices shares k times the tokens
    and 1/k of the parameters (and of the heads or layers) each. One exception: a pipeline of
    ``stages`` p > 1 runs at the pace of its slowest stage, the last, which computes the logit
    layer (``logit_flops_per_token``) for the whole pipeline besides its L/p layers: p times its
    even share, (p - 1) × the logits' FLOPs more per token of the device (Megatron-LM puts the
    embedding on the first stage and the output layer and loss on the last). A split that counts
    the logit layer as work (``Strategy.balanced_stages``) evens this out: give ``stages`` = 1.
    The first stage's embedding lookup has no FLOPs.

    With a ``gemm_curve``, a transformer's FLOPs run at ``flops`` × ``gemm.gemm_factor``: the
    curve over the matmuls a device runs at tensor degree ``tensor`` (1 without a curve)."""
    expect(
        isinstance(tokens, (int, float, Fraction)) and not isinstance(tokens, bool) and tokens >= 0,
        f"tokens is a number of tokens >= 0, got {tokens!r}",
    )
    achieved = hw.flops * gemm_factor(hw.gemm_curve, psi_or_model, tensor)
    logits = logit_flops_per_token(psi_or_model)
    extra = positive_int("stages", stages) - 1
    seconds = {
        phase: (f + extra * logits[phase]) * float(tokens) / achieved
        for phase, f in flops_per_token(psi_or_model, recompute).items()
    }
    if hw.memory_bandwidth is not None:
        for phase, b in eager_attention_bytes_per_token(psi_or_model, recompute).items():
            seconds[phase] += b * float(tokens) / hw.memory_bandwidth
    return seconds


#: Bytes each of eager attention's b·a·s² scores moves through device memory outside the
#: matmuls, per pass, with 2-byte (fp16/bf16) activations, as Megatron-LM computes attention
#: (megatron/model/transformer.py, ParallelAttention.forward at commit fda81a21, May 2021:
#: ``torch.baddbmm`` writes the scores, ``FusedScaleMaskSoftmax`` -- one fused kernel up to
#: s = 2048 -- reads them and writes the probabilities, ``torch.nn.Dropout`` reads those and
#: writes its output and a 1-byte mask, ``torch.bmm`` multiplies by V). Forward: the softmax
#: 2 + 2, the dropout 2 + 2 + 1 = 9.
#: Backward: the dropout's gradient reads the incoming 2 and the mask 1 and writes 2, the
#: softmax's reads that 2 and its saved output 2 and writes 2 = 11. The matmuls' own reads and
#: writes of the scores are left in their FLOPs. Dao et al. 2022 ("FlashAttention", §2.2,
#: Algorithm 0): standard attention materializes S and P in HBM, and its softmax, masking and
#: dropout are memory-bound; flash attention keeps them on chip: nothing to price.
EAGER_ATTENTION_BYTES: dict[str, int] = {"forward": 9, "backward": 11}
#: The same without dropout (a Llama block): the softmax alone, forward 2 + 2, backward 2 + 2 + 2.
SOFTMAX_BYTES: dict[str, int] = {"forward": 4, "backward": 6}


def eager_attention_bytes_per_token(model: object, recompute: str = "none") -> dict[str, int]:
    """Bytes per token, per pass, that eager attention's softmax and dropout move through device
    memory (``EAGER_ATTENTION_BYTES`` per score): a token meets a·s scores in each of L layers, so
    L·a·s × 9 forward and × 11 backward, plus the forward's 9 again under recomputation ("full"
    and "selective" both replay the softmax and dropout). Like the FLOPs, the tokens a device
    handles carry its share: b·(a/t)·s² scores per layer on a tensor slice, m·b·s/(t·p) tokens.
    0 for flash attention and for a model that is not a dense transformer."""
    if not isinstance(model, TransformerSpec) or model.attention != "eager":
        return {"forward": 0, "backward": 0, "step": 0}
    scores = model.layers * model.heads * model.seq
    moved = SOFTMAX_BYTES if model.llama else EAGER_ATTENTION_BYTES
    forward = moved["forward"] * scores
    replayed = (
        forward
        if recompute in ("full", "selective")
        else replayed_share(model, recompute, forward, 0)
        if every_kth(recompute)
        else 0
    )
    return {
        "forward": forward,
        "backward": moved["backward"] * scores + replayed,
        "step": 0,
    }


# --- overlap and the step ---------------------------------------------------------------------
def overlaps_by_unit(op: Op) -> bool:
    """Whether "bucketed" overlaps ``op`` unit by unit: a gradient reduction (all-reduce or
    reduce-scatter of gradients) or a parameter all-gather, on a batch axis (data, replica)."""
    return op.axis in BATCH_AXES and (
        (op.state is State.GRADS and op.op in REDUCTIONS)
        or (op.state is State.PARAMS and op.op == "all_gather")
    )


@dataclass(frozen=True)
class Overlapped:
    """One kind of collective "bucketed" overlaps unit by unit: ``op`` on ``axis`` in ``phase``
    (as the schedule has it), ``seconds`` per step, run ``runs`` times per step (1, or m: once
    per micro-batch) in ``units`` units each -- buckets of ``BUCKET_BYTES``, or the gather units
    (layers) on rank 0's pipeline stage where the parameters are gathered (FSDP, ZeRO-3)."""

    op: str
    axis: str
    phase: str
    seconds: float
    runs: int
    units: int
    unit: str = "bucket"  # or "layer": a gather unit

    @property
    def hides_under(self) -> str:
        """The pass whose compute it runs beside: its own; for the optimizer step's parameter
        all-gather (ZeRO-1/2), the next step's first forward, where Megatron-LM's
        ``--overlap-param-gather`` moves it."""
        return "forward" if self.phase == "step" else self.phase

    @property
    def unit_s(self) -> float:
        """Seconds of one unit in each run, summed over the runs (A/u): what stays exposed --
        the first unit gathered before any compute, the last bucket reduced after it."""
        return self.seconds / self.units


def units_on_stage(model, stages: int) -> int:
    """Gather units (FSDP's wrapped layers) on rank 0's pipeline stage (``stage_units``)."""
    units, layers = getattr(model, "gather_units", 1), getattr(model, "layers", 1)
    return stage_units(units, layers, stages, 0)


def overlapped(
    strategy: str | Strategy,
    model,
    mesh: Mesh | str,
    precision: str | Precision,
    hw: str | Hardware,
    schedules: tuple[Schedule, Schedule] | None = None,
) -> tuple[Overlapped, ...]:
    """The collectives of one step that "bucketed" overlaps unit by unit (``overlaps_by_unit``),
    one ``Overlapped`` per (op, axis, phase). Seconds are affine in m (as
    ``planner.comm_seconds``): priced at m = 1 and m = 2 (``schedules``: those two, already
    derived) and extended; a kind whose seconds double from m = 1 to 2 runs once per
    micro-batch (ZeRO-2/3's reductions, resharded gathers), else once per step (dp and ZeRO-1's
    reduction after the last micro-batch, fsdp_grad_op's first forward gather, the step's
    all-gather). Units: the gather units on rank 0's stage (``units_on_stage``) where the
    parameters are gathered on that axis (FSDP reduce-scatters and gathers unit by unit), else
    ⌈bytes of one run / ``BUCKET_BYTES``⌉ (DDP's buckets; Megatron-LM's distributed optimizer
    gathers the parameters bucket by bucket too)."""
    strategy, model, mesh = get_strategy(strategy), as_model(model), as_mesh(mesh)
    precision, hw = get_precision(precision), get_hardware(hw)
    m = strategy.micro_batches
    if schedules is None:
        schedules = (
            derive_schedule(strategy.with_(micro_batches=1), model, mesh, precision),
            derive_schedule(strategy.with_(micro_batches=2), model, mesh, precision),
        )
    seconds: list[dict[tuple[str, str, str], float]] = [{}, {}]
    payload: dict[tuple[str, str, str], Fraction] = {}
    for at, schedule in zip(seconds, schedules):
        for op, times in schedule.counted():
            link = None if op.once or not overlaps_by_unit(op) else op_link(op, hw, mesh)
            if link is None:
                continue
            key = (op.op, op.axis or "", op.phase)
            at[key] = at.get(key, 0.0) + times * op_time(op, link, hw.collectives)
            if at is seconds[0]:  # m = 1: one run
                payload[key] = payload.get(key, Fraction(0)) + times * op.payload_bytes
    one, two = seconds
    stages = model_axis_degree(strategy, mesh, "pipeline")
    out = []
    for key in sorted(one, key=lambda k: (PASSES.index(k[2]), k)):
        s1, s2 = one[key], two.get(key, 0.0)
        layers = strategy.placement.mode(State.PARAMS, key[1]) in GATHERED
        if layers:
            units = units_on_stage(model, stages)
        else:
            units = max(1, math.ceil(payload[key] / BUCKET_BYTES))
        runs = m if s2 > 1.5 * s1 else 1
        unit = "layer" if layers else "bucket"
        out.append(Overlapped(*key, s1 + (m - 1) * (s2 - s1), runs, units, unit))
    return tuple(out)


def bucketed_exposed(
    seconds: float, unit_s: float, units: int | None, compute_s: float, other_s: float = 0.0
) -> float:
    """Seconds exposed in one micro-batch's pass under "bucketed": ``seconds`` of unit-wise
    collectives in ``units`` units (None: none), of which ``unit_s`` (the first unit gathered, the
    last bucket reduced) cannot overlap ``compute_s`` of compute, and ``other_s`` of the pass's
    other overlappable collectives, which may run beside any of it.

    Derivation, one reduction of A seconds in k buckets of A/k behind backward compute of B
    seconds in k chunks of B/k (bucket j is ready when chunk j ends, and one stream sends the
    buckets in turn): the last bucket ends at max over j of (j·B/k + (k - j + 1)·A/k) =
    max(B + A/k, B/k + A), so the exposed time is A/k + max(0, (A - B)·(k - 1)/k): the last
    bucket alone while A <= B; k = 1 exposes all of A ("none"), k -> ∞ leaves max(0, A - B)
    ("per_pass"). Gathers are the mirror image: the first unit before any compute, unit j + 1
    beside chunk j. With other collectives beside them, two bounds: the unit-wise rest fits
    in the compute after the first chunk, and everything left fits in all of it --
    unit_s + max(0, seconds - unit_s - compute_s·(1 - 1/k), seconds - unit_s + other_s -
    compute_s); k the fewest units of the pass's unit-wise collectives."""
    if units is None:
        return max(0.0, seconds + other_s - compute_s)
    rest = seconds - unit_s
    return unit_s + max(0.0, rest - compute_s * (1 - 1 / units), rest + other_s - compute_s)


def bucketed_by_pass(
    compute: Mapping[str, float],
    comm: Mapping[str, float],
    waited: Mapping[str, float],
    streams: Sequence[Overlapped],
    m: int,
) -> dict[str, float]:
    """ "bucketed"'s exposed seconds per pass (``exposed`` sums them): m micro-batches of compute
    C/m each. A kind run once per micro-batch puts A/m beside each; one run once per step
    (``runs`` = 1) sits beside one micro-batch's compute only (the last backward, the first
    forward); the pass's other overlappable collectives spread A/m over each, hidden as
    "per_pass" hides them; ``waited`` (on the critical path) stays exposed."""
    out: dict[str, float] = {}
    moved = sum(s.seconds for s in streams if s.phase != s.hides_under)
    for p in sorted(set(comm) | set(compute)):  # one order: the same float every run
        if p not in ("forward", "backward"):  # the step: no compute; what is not moved waits
            out[p] = max(0.0, comm.get(p, 0.0) - (moved if p == "step" else 0.0))
            continue
        mine = [s for s in streams if s.hides_under == p]
        every = [s for s in mine if s.runs == m]
        once = [s for s in mine if s.runs != m]
        wait = waited.get(p, 0.0)
        other = comm.get(p, 0.0) - wait - sum(s.seconds for s in mine if s.phase == p)
        c, o = compute.get(p, 0.0) / m, other / m
        a = sum(s.seconds for s in every) / m
        tail = sum(s.unit_s for s in every) / m
        regular = bucketed_exposed(a, tail, min((s.units for s in every), default=None), c, o)
        if not once:
            out[p] = wait + m * regular
            continue
        last = bucketed_exposed(
            a + sum(s.seconds for s in once),
            tail + sum(s.unit_s for s in once),
            min(s.units for s in every + once),
            c,
            o,
        )
        out[p] = wait + (m - 1) * regular + last
    return out


def exposed(
    compute: Mapping[str, float],
    comm: Mapping[str, float],
    overlap: str,
    critical: Mapping[str, float] | None = None,
    streams: Sequence[Overlapped] = (),
    micro_batches: int = 1,
) -> float:
    """Seconds of communication not hidden under compute (SPEC §9). ``critical``: per pass, the
    seconds of ``comm`` that are ``on_critical_path`` (tensor parallelism's; none if not given).

    "none": all of it. "per_pass": the critical seconds, plus in each pass what the rest exceeds
    that pass's compute, max(0, comm - critical - compute); the step phase has no compute, so its
    collectives (zero1/zero2's parameter all-gather) stay exposed. "per_pass+tp": the critical
    seconds hide too, max(0, comm - compute).

    "bucketed" (``streams``: ``overlapped``'s collectives; ``micro_batches``: m): each micro-batch's
    pass hides its collectives as ``bucketed_exposed`` says, the first gathered unit and the last
    reduced bucket exposed; a reduction run once per step hides under the last micro-batch's
    backward only, and the step's parameter all-gather moves into the next step's first forward.
    Sources: PyTorch DDP (buckets of ``bucket_cap_mb`` = 25 all-reduced as backward fills them,
    the last one after backward; Li et al. 2020, "PyTorch Distributed", §3.2.3); Megatron-LM's
    ``--overlap-grad-reduce`` (only in the last micro-batch's backward) and
    ``--overlap-param-gather`` (the distributed optimizer's all-gather, bucket by bucket, in the
    next forward); FSDP's backward and forward prefetch (Zhao et al. 2023, "PyTorch FSDP", §3.3:
    unit by unit, the first unit's all-gather and the last unit's reduce-scatter exposed).
    "bucketed+tp": the critical seconds hide too, as under "per_pass+tp"."""
    expect(overlap in OVERLAPS, f"unknown overlap model {overlap!r}; known: {', '.join(OVERLAPS)}")
    if overlap == "none":
        return sum(comm.values())
    waited = {} if critical is None or overlap.endswith("+tp") else critical
    if overlap.startswith("bucketed"):
        m = positive_int("micro_batches", micro_batches)
        return sum(bucketed_by_pass(compute, comm, waited, streams, m).values())
    return sum(
        waited.get(p, 0.0) + max(0.0, comm.get(p, 0.0) - waited.get(p, 0.0) - compute.get(p, 0.0))
        for p in sorted(set(comm) | set(compute))  # one order: the same float every run
    )


def bubble_time(
    compute_s: float,
    stages: int,
    micro_batches: int,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
) -> float:
    """Seconds a pipeline stage idles: (p-1)/m of the ideal (bubble-free) time (``pipeline_bubble``,
    the of_ideal convention, Narayanan et al. 2021 §2.2); (p-1)/(v·m) under interleaved 1F1B
    (§2.2.2), (p-1)/(3m) under zero bubble (Qi et al. 2024, ZB-H1)."""
    bubble = pipeline_bubble(stages, micro_batches, schedule, virtual_stages)["of_ideal"]
    return float(bubble) * compute_s if stages > 1 else 0.0


@dataclass(frozen=True)
class StepTime:
    """One optimizer step on one device, in seconds.

    ``compute_s``: FLOPs ÷ achieved FLOP/s (forward + backward). ``comm_s``: every collective's
    α·steps + bytes/W, hidden or not. ``exposed_comm_s``: the part of comm_s not hidden under
    compute by the ``overlap`` model. ``bubble_s``: pipeline idle time. ``total_s`` = compute_s +
    exposed_comm_s + bubble_s. ``by_pass``: {pass: (compute, comm)} seconds."""

    compute_s: float
    comm_s: float
    exposed_comm_s: float
    bubble_s: float
    total_s: float
    overlap: str
    by_pass: tuple[tuple[str, float, float], ...] = ()


def tokens_of(model: Model, strategy: Strategy, mesh: Mesh) -> Fraction | None:
    """Tokens per device a transformer's shape fixes: m micro-batches of b sequences of s tokens on
    each data replica, shared by its t·p devices (m·b·s/(t·p)); None for a model without a
    sequence."""
    if not isinstance(model, TransformerSpec):
        return None
    share = model_axis_degree(strategy, mesh, "tensor") * model_axis_degree(
        strategy, mesh, "pipeline"
    )
    return Fraction(strategy.micro_batches * model.micro_batch * model.seq, share)


def step_time(
    strategy: str | Strategy,
    model,
    mesh: Mesh | str,
    precision: str | Precision,
    hw: str | Hardware,
    tokens_per_device: float | Fraction | None = None,
    overlap: str = "none",
    micro_batches: int | None = None,
    schedule: Schedule | None = None,
) -> StepTime:
    """Seconds of one optimizer step on rank 0 of ``mesh`` (SPEC §9).

    ``tokens_per_device``: the global batch's tokens ÷ the number of devices (the JAX scaling
    book's B/N). For a TransformerSpec its shape fixes them (``tokens_of``); give None to use
    that, or the same number. ``micro_batches``: m (default: the strategy's). ``schedule``: an
    already derived schedule for exactly these arguments (the planner reuses one)."""
    strategy, model, mesh = get_strategy(strategy), as_model(model), as_mesh(mesh)
    tensor_divides_heads(model, model_axis_degree(strategy, mesh, "tensor"))
    precision, hw = get_precision(precision), get_hardware(hw)
    if micro_batches is not None:
        strategy = strategy.with_(micro_batches=micro_batches)
    fixed = tokens_of(model, strategy, mesh)
    if tokens_per_device is None:
        if fixed is None:
            raise PlacementError(
                "give tokens_per_device: an abstract model has no sequence to count tokens from"
            )
        tokens_per_device = fixed
    elif fixed is not None:
        share = model_axis_degree(strategy, mesh, "tensor") * model_axis_degree(
            strategy, mesh, "pipeline"
        )
        expect(
            math.isclose(float(tokens_per_device), float(fixed), rel_tol=1e-12),
            "this transformer's shape fixes the tokens per device: m·b·s/(t·p) = "
            f"{strategy.micro_batches}·{model.micro_batch}·{model.seq}/{share} = {float(fixed):g}, "
            f"got tokens_per_device={tokens_per_device!r}; change micro_batch or micro_batches, or "
            "leave tokens_per_device out",
        )
    schedule = schedule or derive_schedule(strategy, model, mesh, precision)
    recompute = getattr(model, "recompute", "none")
    tensor = model_axis_degree(strategy, mesh, "tensor")
    paced = 1 if strategy.balanced_stages else model_axis_degree(strategy, mesh, "pipeline")
    compute = compute_time(model, tokens_per_device, hw, recompute, tensor, paced)
    comm = comm_time(schedule, hw, mesh)
    streams = (
        overlapped(strategy, model, mesh, precision, hw) if overlap.startswith("bucketed") else ()
    )
    return combine(
        compute,
        comm,
        overlap,
        model_axis_degree(strategy, mesh, "pipeline"),
        strategy.micro_batches,
        comm_time(schedule, hw, mesh, critical=True),
        streams,
        strategy.pipeline_schedule,
        strategy.virtual_stages,
    )


def combine(
    compute: Mapping[str, float],
    comm: Mapping[str, float],
    overlap: str,
    stages: int = 1,
    micro_batches: int = 1,
    critical: Mapping[str, float] | None = None,
    streams: Sequence[Overlapped] = (),
    pipeline_schedule: str = "1f1b",
    virtual_stages: int = 1,
) -> StepTime:
    """A StepTime from per-pass compute and comm seconds: compute + exposed comm + bubble.
    ``critical``: the per-pass comm seconds ``on_critical_path``; ``streams``: what "bucketed"
    overlaps unit by unit (``exposed``); ``pipeline_schedule``, ``virtual_stages``: the bubble's
    (``bubble_time``)."""
    compute_s, comm_s = sum(compute.values()), sum(comm.values())
    hidden_or_not = exposed(compute, comm, overlap, critical, streams, micro_batches)
    bubble = bubble_time(compute_s, stages, micro_batches, pipeline_schedule, virtual_stages)
    passes = tuple((p, compute.get(p, 0.0), comm.get(p, 0.0)) for p in PASSES)
    return StepTime(
        compute_s,
        comm_s,
        hidden_or_not,
        bubble,
        compute_s + hidden_or_not + bubble,
        overlap,
        passes,
    )


# --- the compute-bound threshold ---------------------------------------------------------------
def compute_bound_tokens(
    strategy: str | Strategy,
    model,
    mesh: Mesh | str,
    precision: str | Precision,
    hw: str | Hardware,
    overlap: str = "none",
) -> float:
    """Tokens per device above which ``strategy`` is compute-bound (SPEC §9), for a strategy
    whose communication does not grow with the tokens (dp, zero1/2/3 on an abstract model: the
    bytes are Ψ's, whatever the batch). Returns math.inf when no token count is enough.

    "none": compute-bound when compute time >= communication time (more than half the step is
    compute): 6Ψ·T/F >= comm, T* = comm·F/(6Ψ). "per_pass": when every pass hides its own
    collectives, 2Ψ·T/F >= forward comm and 4Ψ·T/F >= backward comm; the step phase has no
    compute to hide under, so under this model zero1/zero2's parameter all-gather stays exposed
    at any T -- a property of the overlap model, not of ZeRO. "bucketed": the same, with the
    step's all-gather moved into the next forward (Megatron-LM's ``--overlap-param-gather``),
    where it hides; compute-bound then means only the first gathered unit and the last reduced
    bucket stay exposed.

    With α = 0 and N large: dp 2/3·F/W (none), F/W (per_pass); zero3 F/W under both -- under
    per-pass overlap ZeRO-3's 1.5× volume costs nothing more than dp's. Tensor parallelism's
    traffic grows with the tokens as its compute does: see ``tp_compute_bound``."""
    strategy, model, mesh = get_strategy(strategy), as_model(model), as_mesh(mesh)
    hw = get_hardware(hw)
    expect(
        tokens_of(model, strategy, mesh) is None and model.boundary_elements == 0,
        "compute_bound_tokens is for communication that does not grow with tokens (dp, zero1/2/3 "
        "on an abstract ModelSpec); for tensor parallelism use tp_compute_bound",
    )
    comm = comm_time(derive_schedule(strategy, model, mesh, get_precision(precision)), hw, mesh)
    per_token = {
        p: f / hw.flops
        for p, f in flops_per_token(model.psi, getattr(model, "recompute", "none")).items()
    }
    if overlap == "none":
        return sum(comm.values()) / sum(per_token.values())
    expect(overlap in OVERLAPS, f"unknown overlap model {overlap!r}; known: {', '.join(OVERLAPS)}")
    if overlap.startswith("bucketed"):  # the step's all-gather moves into forward
        streams = overlapped(strategy, model, mesh, precision, hw)
        moved = sum(s.seconds for s in streams if s.phase != s.hides_under)
        comm = {**comm, "forward": comm["forward"] + moved}
    needed = [comm[p] / per_token[p] for p in ("forward", "backward") if comm[p] > 0]
    return max(needed, default=0.0)


def tp_compute_bound(model: TransformerSpec, tensor: int, hw: str | Hardware) -> dict[str, float]:
    """Tensor parallelism (Megatron, degree t) per layer and micro-batch, bandwidth terms only:
    forward compute 2·(12h²)·bs/t FLOPs against two all-reduces of b·s·h 16-bit activations,
    2·2(t-1)/t·2bsh bytes. Both grow with the tokens b·s, so tokens cannot make TP compute-bound:
    the condition is on the width, h >= (t-1)/3 · F/W (the JAX scaling book's model-parallel
    rule). Compute-bound is not hidden: the next matmul waits for these all-reduces
    (``on_critical_path``), so only an implementation that overlaps them ("per_pass+tp") hides
    them, and only when h is this wide. Returns {"h_needed": (t-1)/3·F/W, "h": h, "ratio":
    comm/compute}."""
    hw = get_hardware(hw)
    t, h = tensor, model.hidden
    w = hw.axis_link(Mesh.of(tensor=t), "tensor").bandwidth  # t consecutive ranks
    # per token b·s: two all-reduces of h 16-bit values against 2·(12h²)/t FLOPs
    comm_s = 2 * float(ring_bytes("all_reduce", t, 2 * h)) / w
    ratio = comm_s / (24 * h * h / t / hw.flops)
    return {"h_needed": (t - 1) / 3 * hw.flops / w, "h": float(h), "ratio": ratio}


#: The public names (a notebook imports only these).
__all__ = [
    "HARDWARE",
    "HBM_80GB",
    "HBM_141GB",
    "PEAK_FLOPS",
    "Hardware",
    "IB_HDR",
    "IB_NDR",
    "Link",
    "NVLINK3",
    "NVLINK4",
    "OVERLAPS",
    "PASSES",
    "BUCKET_BYTES",
    "Overlapped",
    "bucketed_by_pass",
    "bucketed_exposed",
    "overlapped",
    "overlaps_by_unit",
    "units_on_stage",
    "PCIE4",
    "PCIE5",
    "StepTime",
    "bubble_time",
    "combine",
    "comm_time",
    "compute_bound_tokens",
    "compute_time",
    "FLOP_CONVENTION",
    "palm_flops_per_token",
    "megatron_layer_matmul_weights",
    "megatron_attention_forward_per_token",
    "megatron_hardware_flops_per_token",
    "attention_flops_per_token",
    "exposed",
    "flops_per_token",
    "megatron_flops_per_token",
    "model_flops_per_token",
    "on_critical_path",
    "get_hardware",
    "op_link",
    "op_time",
    "ring_steps",
    "startup_time",
    "step_time",
    "tokens_of",
    "tp_compute_bound",
]
