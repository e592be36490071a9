"""Megatron-LM's published training throughputs, quoted with their sources (issue 27, item 8).

Three tables, each a tuple of ``Run``; ``load(name)`` returns one, ``TABLES`` names them all:

- ``H100_WEAK``: the weak-scaling table of Megatron-LM's README (Megatron-Core r0.8.0 on H100s),
  nine GPT models from 1.7B to 462B on 48 to 6,144 GPUs.
- ``H100_STRONG``: the README's strong-scaling text: the 177B GPT ("GPT-3 175B ... slightly more
  than 175 billion parameters due to larger vocabulary size") on 96 to 4,608 H100s at 1,152
  sequences, MFU 47 % -> 42 %. Only the two ends carry a published figure.
- ``A100_2021``: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM" (SC '21, arXiv:2104.04473), Table 1, as Megatron-LM's README showed it
  from April 2021 to July 2024 (images/cases_april2021.png): ten GPT models, 1.7B to 1T, on 32 to
  3,072 A100-80GB GPUs.

Every figure a table prints is a ``Run`` field and is quoted; what the source does not print is an
assumption, named in ``Run.assumed`` (or in the table's ``ASSUMED``). Nothing here is computed by
the package: these are the yardstick ``compare.py`` measures the time model against.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Megatron-LM's README, section "Training Speed and Scalability" (commit 937571cf, 2024-07-15,
#: "Updated README with new scaling figures on H100 GPUs"; unchanged in the current README).
README_URL = (
    "https://github.com/NVIDIA/Megatron-LM/blob/main/README.md#training-speed-and-scalability"
)
#: The weak-scaling table is an image in that section (its text is not in the README).
H100_TABLE_URL = "https://github.com/NVIDIA/Megatron-LM/blob/main/images/model_table.png"
#: Narayanan et al. 2021, Table 1; the README image of it (removed by commit 937571cf).
A100_PAPER = (
    "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using "
    "Megatron-LM, arXiv:2104.04473, Table 1"
)
A100_TABLE_URL = (
    "https://github.com/NVIDIA/Megatron-LM/blob/937571cfd4^/images/cases_april2021.png"
    " (README before 2024-07-15)"
)


@dataclass(frozen=True)
class Run:
    """One published training run: the model, its placement and the throughput it reached.

    ``params_b``: the parameter count the source prints, in billions (a label, not recomputed).
    ``tensor``, ``pipeline``, ``data``: t, p, d (t·p·d = ``gpus``). ``global_batch``: sequences per
    optimizer step. ``tflops_per_gpu``: the source's achieved 10^12 FLOP/s per GPU, counted as
    ``flops`` says; ``mfu``: its percentage of the dense bf16 peak, as printed (None: not printed).
    ``micro_batch``, ``recompute``, ``heads`` and the t/p split may be assumptions: ``assumed``
    lists which fields the source does not print. ``overlap`` (one of ``timing.OVERLAPS``; empty:
    the table's, ``compare.SETUP``) and ``schedule`` (``placement-edu time --schedule``) say how
    the run overlapped its communication and ordered its pipeline, where a source says so."""

    name: str
    params_b: float
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    tensor: int
    pipeline: int
    data: int
    gpus: int
    global_batch: int
    tflops_per_gpu: float | None
    mfu: float | None
    micro_batch: int
    recompute: str
    hardware: str
    flops: str
    source: str
    assumed: tuple[str, ...] = ()
    overlap: str = ""
    schedule: str = "1f1b"

    def __post_init__(self) -> None:
        if self.tensor * self.pipeline * self.data != self.gpus:
            raise ValueError(f"{self.name}: t·p·d = {self.tensor}·{self.pipeline}·{self.data}")
        if self.global_batch % (self.data * self.micro_batch):
            raise ValueError(f"{self.name}: the batch does not split into d × b")

    @property
    def mesh(self) -> str:
        """The mesh as ``placement-edu time --mesh`` takes it."""
        return f"data={self.data},tensor={self.tensor},pipeline={self.pipeline}"


# --- H100: Megatron-Core r0.8.0 ---------------------------------------------------------------
#: What the README says of every H100 run: "All models use a vocabulary size of 131,072 and a
#: sequence length of 4096"; distributed optimizer and "fine-grained overlapping of data-parallel
#: (--overlap-grad-reduce --overlap-param-gather), tensor-parallel (--tp-comm-overlap) and
#: pipeline-parallel communication"; throughput "measured for end-to-end training". Its
#: teraFLOP/s are model FLOPs as Megatron counts them (``num_floating_point_operations``:
#: ``timing.megatron_flops_per_token``); its MFU divides them by the H100's 989e12 (408.8 / 989 =
#: 41.3 %, printed 41 %).
H100_ASSUMED = (
    "micro-batch 1 (not printed)",
    "flash attention (Transformer Engine; not printed) with selective recomputation standing "
    "for its backward: flash's backward recomputes QK^T from Q, K and the logsumexp (Dao 2023, "
    "Algorithm 2), selective replays core attention's forward (QK^T and PV); recompute 'none' "
    "would price no replay at all (1.7B: ratio 1.146 -> 1.199)",
    "sequence parallelism on the tensor axis (Megatron's usual pairing with t > 1; not printed)",
    "the interleaved 1F1B schedule where p > 1 (the README's overlapped pipeline communication "
    "needs it), in chunks of 4 layers or the nearest the stage's layers allow (``interleaving``; "
    "no depth is printed)",
    "the bucketed overlap with TP overlapped ('bucketed+tp'): the README's --overlap-grad-reduce "
    "--overlap-param-gather --tp-comm-overlap",
    "heads, hidden, layers, t, p, d as printed; ffn = 4h (not printed)",
)
_H100 = dict(seq=4096, vocab=131072, micro_batch=1, recompute="selective", hardware="h100")
_H100_SOURCE = f"{H100_TABLE_URL} (Megatron-Core r0.8.0)"
_H100_ASSUMED = ("micro_batch", "recompute", "schedule")

#: The H100 runs' pipeline schedule: interleaved. The README says pipeline-parallel communication
#: was overlapped ("PP (enabled by default)", Megatron's --overlap-p2p-communication), and Megatron
#: turns that overlap off unless the schedule is interleaved (megatron/training/arguments.py:
#: "Overlap P2P communication is disabled if not using the interleaved schedule"). The depth is
#: printed nowhere. The strong-scaling figure, whose runs differ only in d, picks 4 layers a chunk
#: (``STRONG_DEPTH``); a weak-scaling row whose stage does not split into chunks of 4 takes the
#: nearest chunk its layers allow: 70B 42 layers a stage in 14 chunks of 3, 119B 23 in 23 of 1,
#: 177B 16 in 4 of 4, 314B 12 in 3 of 4, 462B 7 in 7 of 1.
CHUNK_LAYERS = 4


def interleaving(layers: int, pipeline: int) -> str:
    """The schedule of a run of ``layers`` on ``pipeline`` stages: 1f1b without a pipeline, else
    interleaved into the chunks nearest ``CHUNK_LAYERS`` layers that divide a stage (the deeper
    on a tie), never one chunk a stage (the overlap needs interleaving)."""
    if pipeline == 1:
        return "1f1b"
    stage = layers // pipeline
    depths = [v for v in range(2, stage + 1) if stage % v == 0]
    return f"interleaved:{min(depths, key=lambda v: (abs(stage / v - CHUNK_LAYERS), -v))}"


def _h100(
    name: str, heads: int, hidden: int, layers: int, t: int, p: int, d: int, gpus: int,
    batch: int, tflops: float, mfu: float,
) -> Run:  # fmt: skip
    return Run(
        name, float(name.removesuffix("B")), layers, hidden, heads, tensor=t, pipeline=p, data=d,
        gpus=gpus, global_batch=batch, tflops_per_gpu=tflops, mfu=mfu, flops="megatron",
        source=_H100_SOURCE, assumed=_H100_ASSUMED, schedule=interleaving(layers, p),
        **_H100,  # type: ignore[arg-type]
    )  # fmt: skip


#: The README's table, row by row as printed: model size, attention heads, hidden size, layers,
#: tensor MP size, pipeline MP size, data-parallel size, GPUs, batch size, per-GPU teraFLOP/s, MFU.
#: (Its last column, aggregate petaFLOP/s, is per-GPU × GPUs: 408.8 × 48 = 19.6e3.)
H100_WEAK: tuple[Run, ...] = (
    _h100("1.7B", 16, 2048, 24, 1, 1, 48, 48, 192, 408.8, 0.41),
    _h100("7.1B", 32, 4096, 30, 2, 1, 48, 96, 192, 465.9, 0.47),
    _h100("16B", 48, 6144, 32, 4, 1, 48, 192, 192, 489.1, 0.49),
    _h100("32B", 56, 7168, 48, 8, 1, 48, 384, 192, 459.6, 0.46),
    _h100("70B", 64, 8192, 84, 8, 2, 48, 768, 384, 419.7, 0.42),
    _h100("119B", 80, 10240, 92, 8, 4, 48, 1536, 768, 420.5, 0.43),
    _h100("177B", 96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8, 0.44),
    _h100("314B", 128, 16384, 96, 8, 8, 48, 3072, 1536, 474.4, 0.48),
    _h100("462B", 144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9, 0.47),
)

#: The README's strong-scaling text: "We also strong scaled the standard GPT-3 model (our version
#: has slightly more than 175 billion parameters due to larger vocabulary size) from 96 H100 GPUs
#: to 4608 GPUs, using the same batch size of 1152 sequences throughout. Communication becomes more
#: exposed at larger scale, leading to a reduction in MFU from 47% to 42%." Its figure
#: (images/strong_scaling.png) plots aggregate petaFLOP/s at 96, 144, 288, 576, 1,152, 2,304,
#: 3,072 and 4,608 GPUs (read off its log axis) without printing them; only the ends' MFU is
#: quoted. Assumed: the model is the weak table's 177B row (96 layers, h = 12288, 96 heads), and
#: t = 8, p = 6 throughout, as in that row (2,304 GPUs = 8·6·48; every plotted count is 48·d).
#: The 2,304-GPU point is that row itself -- the same model, 1,152 sequences, 2,304 GPUs -- and is
#: quoted from it: 432.8 TFLOP/s, MFU 44 % (× 2,304 = 997 petaFLOP/s, where the figure plots its
#: point, on the 1,000 gridline).
#:
#: The pipeline schedule: interleaved (``CHUNK_LAYERS`` says why), 96 layers on 6 stages allowing
#: v = 2, 4, 8 or 16. Under the plain 1F1B schedule the published points are out of reach: at
#: 4,608 GPUs (m = 12 micro-batches of p = 6 stages) the bubble alone, (p - 1)/m = 5/12, would cap
#: MFU at 47 % / (1 + 5/12) = 33 %. The depth is printed nowhere; the table uses v = 4 (4 layers
#: a chunk): of those depths, the one whose predicted curve lies closest to the figure's eight
#: points (``STRONG_FIGURE_PFLOPS``; ``compare.py`` prints the root-mean-square distance of each).
#: Every depth from 4 up predicts the 47 % -> 42 % drop within 2 points; v = 2 does not.
STRONG_DEPTH = 4
STRONG_ASSUMED = (
    "the 177B model of the weak-scaling table",
    "t = 8, p = 6 at every size (the text does not say; the 177B weak-scaling row uses them)",
    "the interleaved 1F1B schedule (the README's overlapped pipeline communication needs it), "
    f"at depth {STRONG_DEPTH} (not printed; the depth closest to the figure, see above)",
    "the intermediate points read off the figure (STRONG_FIGURE_PFLOPS); their MFU is not "
    "printed, but at 2,304 GPUs, the weak-scaling table's 177B row",
)
STRONG_GPUS: tuple[int, ...] = (96, 144, 288, 576, 1152, 2304, 3072, 4608)
_STRONG_MFU = {96: 0.47, 2304: 0.44, 4608: 0.42}
#: Per-GPU TFLOP/s where a source prints it: the weak-scaling table's 177B row at 2,304 GPUs.
_STRONG_TFLOPS = {2304: 432.8}
#: Aggregate petaFLOP/s of each point, read off images/strong_scaling.png (git blob d8337c34,
#: 4,737 × 2,125 pixels): the centre of each green dot against the gridlines, both axes
#: logarithmic -- y: 1,000 at pixel row 593 and 50 at row 1,518 (710.98 rows a decade); x: 100
#: GPUs at column 647.5 and 5,000 at 4,631 (2,344.66 columns a decade). The dots' columns give
#: back the GPU counts within 0.1 % (96, 144, 288, 576, 1,152, 2,303, 3,071, 4,606). The reading
#: is checked where a number is printed: 96 GPUs read 46.5 % MFU (printed 47 %), 2,304 read
#: 435.0 TFLOP/s (the weak table's 432.8, +0.5 %), 4,608 read 41.9 % (printed 42 %).
STRONG_FIGURE_PFLOPS: dict[int, float] = {
    96: 44.1, 144: 66.2, 288: 131.7, 576: 262.1, 1152: 515.7, 2304: 1001.6, 3072: 1304.2,
    4608: 1908.1,
}  # fmt: skip
_STRONG_SOURCE = f"{README_URL} (strong-scaling text and figure, Megatron-Core r0.8.0)"
H100_STRONG: tuple[Run, ...] = tuple(
    Run(
        f"177B@{g}",
        177.0,
        96,
        12288,
        96,
        tensor=8,
        pipeline=6,
        data=g // 48,
        gpus=g,
        global_batch=1152,
        tflops_per_gpu=_STRONG_TFLOPS.get(g),
        mfu=_STRONG_MFU.get(g),
        flops="megatron",
        source=_STRONG_SOURCE,
        assumed=("tensor", "pipeline", "micro_batch", "recompute", "schedule"),
        schedule=interleaving(96, 6),
        **_H100,  # type: ignore[arg-type]
    )  # fmt: skip
    for g in STRONG_GPUS
)


# --- A100: Narayanan et al. 2021 --------------------------------------------------------------
#: What the source says of every A100 run (the README's 2021 text): "All models use a vocabulary
#: size of 51,200 and a sequence length of 2048", "Each cluster node has 8 NVIDIA 80GB A100 GPUs",
#: FLOPs "measured for end-to-end training". The paper counts FLOPs with its eq. 3, 96·B·s·l·h²·(1 +
#: s/(6h) + V/(16·l·h)) per step: hardware FLOPs under full activation recomputation (the 96 is
#: 72 × 4/3, the forward replayed); its "percentage of theoretical peak" divides by 312e12.
#:
#: How each run was launched is in Megatron-LM's sc21/run_table_1.sh (``SC21_SCRIPT``: "Table 1
#: showing weak-scaling throughput for GPT models ranging from 1 billion to 1 trillion parameters",
#: sc21/README.md), row by row: TP, PP, MBS (micro-batch), GBS, NLS (layers), HS (hidden), NAH
#: (heads), DDP ("torch" up to 18B, "local" from 39B), "--activations-checkpoint-method uniform"
#: (full recomputation; "--recompute-method uniform" in later copies) and "--fp16" on every row,
#: with "--num-layers-per-virtual-pipeline-stage" 5, 5, 3, 1 on the 76B, 145B, 310B and 530B rows (v
#: = layers / (p × that): 3, 2, 2, 3; none on the 1T row). DDP "torch" is PyTorch's
#: DistributedDataParallel, which all-reduces 25 MB buckets as backward fills them: the package's
#: "bucketed" model. DDP "local" is Megatron's own wrapper, which in 2021 all-reduced the gradients
#: after the last micro-batch's backward, overlapping nothing: megatron/training.py (commit
#: fda81a21, May 2021) calls forward_backward_func, then "# All-reduce if needed. if args.DDP_impl
#: == 'local': ... model_module.allreduce_gradients()" ("torch DDP is more efficient than local DDP
#: since it overlaps comms with backward ... the communication in local DDP doesn't do this",
#: NVIDIA/Megatron-LM issue #428, 2023; overlap came with --overlap-grad-reduce in September 2023,
#: issue #391): the package's "none".
SC21_SCRIPT = (
    "https://github.com/NVIDIA/Megatron-LM/blob/main/examples/academic_paper_scripts/sc21/"
    "run_table_1.sh (examples/sc21/ until it moved)"
)
A100_ASSUMED = (
    "full activation recomputation: run_table_1.sh's --recompute-method uniform (every layer); "
    "the paper's eq. 3 counts it",
    "t, p, micro-batch, heads, the DDP implementation and the interleaving depth from "
    "run_table_1.sh; the table prints only t·p (the README: 'For numbers larger than 8, "
    "typically tensor parallel of size 8 was used')",
    "DDP torch = 'bucketed' overlap, DDP local = 'none' (see above); no sequence parallelism "
    "(2022, after these runs)",
    "eager attention (flash attention came in 2022): the b·a·s² scores go through device memory "
    "between Megatron's baddbmm, fused scale-mask-softmax, dropout and bmm; their softmax and "
    "dropout priced at the A100-80GB's 2,039 GB/s (timing.EAGER_ATTENTION_BYTES, "
    "timing.HBM_BANDWIDTH; compare.SETUP)",
)
_A100_SOURCE = f"{A100_PAPER}; {A100_TABLE_URL}; launch: {SC21_SCRIPT}"
#: What the DDP implementation of run_table_1.sh means for the time model's overlap.
DDP_OVERLAP = {"torch": "bucketed", "local": "none"}


def _a100(
    name: str, hidden: int, layers: int, params_b: float, mp: int, gpus: int, batch: int,
    tflops: float, peak_pct: float, heads: int, t: int, mbs: int, ddp: str, layers_per_v: int,
) -> Run:  # fmt: skip
    p = mp // t
    v = layers // (p * layers_per_v) if layers_per_v else 1
    return Run(
        name, params_b, layers, hidden, heads, seq=2048, vocab=51200, tensor=t, pipeline=p,
        data=gpus // mp, gpus=gpus, global_batch=batch, tflops_per_gpu=tflops, mfu=peak_pct,
        micro_batch=mbs, recompute="full", hardware="a100", flops="narayanan_eq3",
        source=_A100_SOURCE, assumed=("overlap",), overlap=DDP_OVERLAP[ddp],
        schedule=f"interleaved:{v}" if v > 1 else "1f1b",
    )  # fmt: skip


#: The table row by row as printed: model size, hidden size, layers, parameters (billion),
#: model-parallel size, GPUs, batch size, achieved teraFLOP/s per GPU, percentage of theoretical
#: peak; then from run_table_1.sh: NAH, TP, MBS, DDP, --num-layers-per-virtual-pipeline-stage
#: (0: not given). Aggregate petaFLOP/s, the table's last column, is per-GPU × GPUs.
A100_2021: tuple[Run, ...] = (
    _a100("1.7B", 2304, 24, 1.7, 1, 32, 512, 137, 0.44, 24, 1, 16, "torch", 0),
    _a100("3.6B", 3072, 30, 3.6, 2, 64, 512, 138, 0.44, 32, 2, 16, "torch", 0),
    _a100("7.5B", 4096, 36, 7.5, 4, 128, 512, 142, 0.46, 32, 4, 16, "torch", 0),
    _a100("18B", 6144, 40, 18.4, 8, 256, 1024, 135, 0.43, 48, 8, 8, "torch", 0),
    _a100("39B", 8192, 48, 39.1, 16, 512, 1536, 138, 0.44, 64, 8, 4, "local", 0),
    _a100("76B", 10240, 60, 76.1, 32, 1024, 1792, 140, 0.45, 80, 8, 2, "local", 5),
    _a100("145B", 12288, 80, 145.6, 64, 1536, 2304, 148, 0.47, 96, 8, 2, "local", 5),
    _a100("310B", 16384, 96, 310.1, 128, 1920, 2160, 155, 0.50, 128, 8, 1, "local", 3),
    _a100("530B", 20480, 105, 529.6, 280, 2520, 2520, 163, 0.52, 128, 8, 1, "local", 1),
    _a100("1T", 25600, 128, 1008.0, 512, 3072, 3072, 163, 0.52, 160, 8, 1, "local", 0),
)

TABLES: dict[str, tuple[Run, ...]] = {
    "h100_weak": H100_WEAK,
    "h100_strong": H100_STRONG,
    "a100_2021": A100_2021,
}


def load(name: str) -> tuple[Run, ...]:
    """One table by name (``TABLES``); an unknown name raises KeyError naming those known."""
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    return TABLES[name]
