"""torchtitan's published Llama 3.1 8B memory and throughput, quoted with their sources (issue 39,
item 5; issue 42, items 2 and 3).

torchtitan's benchmarks/llama3_h100_202412_torchtitan.md (Grand Teton, H100 96 GB HBM2e, torch
1963fc8, torchtitan 9dec370, 2024-12-26), Tables 1 and 3, the rows without torch.compile or
Float8: "1D Parallelism (FSDP). Llama 3.1 8B model. 8 [128] GPUs. Local batch size 2, global batch
size 16 [256]. Selective activation checkpointing." Its memory column is the caching allocator's
*max reserved* bytes (torchtitan/metrics.py: ``reserved_bytes.all.peak``, printed in GiB).

The launch settings the tables do not print are read from torchtitan's own configuration at the
commit the table names (``SETTINGS``: each with the file it comes from). Nothing here is computed
by the package: these are the yardstick ``compare.py --memory`` measures ``fit`` and ``time``
against, and ``compare.py --table torchtitan`` the roofline (``THROUGHPUT``: every row of Tables 1
and 3, with torch.compile and Float8).

The hardware, from the benchmark's own "Hardware" section (``HARDWARE``): Grand Teton hosts of 8
H100s "fully connected with NVLink", each "equipped with 96GB HBM2e with 2.4 TB/sec peak memory
bandwidth", hosts joined by "backend RDMA network with 400 Gb/s per GPU", at "the default 500W power
limit" -- not the 80 GB HBM3 SXM part (3.35 TB/s, 700 W) the datasheet peak belongs to; its
footnote 2: "the actual peak TFLOPs number is between SXM and NVL, and we don't know its exact
value". The benchmark does not report MFU: "when Float8 is enabled (on `nn.Linear` modules), both
BFLOAT16 Tensor Core and FP8 Tensor Core are involved in model training, but they have different
peak FLOPS and the definition of MFU under such scenario is not well-defined"; without Float8,
"33% to 39% MFU".
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = (
    "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md"
)
COMMIT = "9dec370ad26b5f8e9a7333a0e36165018262644b"

#: What torchtitan ran, read from its configuration at ``COMMIT`` (file: the value there).
SETTINGS = {
    "seq": (8192, "train_configs/llama3_8b.toml: [training] seq_len = 8192"),
    "recompute": (
        "torchtitan-op",
        "train_configs/llama3_8b.toml: [activation_checkpoint] mode = 'selective', "
        "selective_ac_option = 'op' (torchtitan/parallelisms/parallelize_llama.py: _save_list, "
        "every second mm recomputed)",
    ),
    "precision": (
        "fsdp2_bf16",
        "torchtitan/config_manager.py: mixed_precision_param = 'bfloat16', "
        "mixed_precision_reduce = 'float32' (defaults), applied by apply_fsdp's "
        "MixedPrecisionPolicy",
    ),
    "attention": ("sdpa", "torchtitan/models/llama/model.py: F.scaled_dot_product_attention"),
    "optimizer": (
        "adam-foreach",
        "train_configs/llama3_8b.toml: [optimizer] name = 'AdamW'; torchtitan/optimizer.py: "
        "foreach = not fused, fused defaults to False",
    ),
    "compile": (
        "per block",
        "torchtitan/parallelisms/parallelize_llama.py: apply_compile compiles each "
        "TransformerBlock (torch.compile(transformer_block, fullgraph=True)); the loss and the "
        "optimizer stay eager (train.py: loss_fn not compiled; AdamW foreach)",
    ),
    "float8": (
        "tensorwise, float8 all-gather, precomputed scales",
        "docs/float8.md: --float8.enable_float8_linear --float8.enable_fsdp_float8_all_gather "
        "--float8.precompute_float8_dynamic_scale_for_fsdp (the launch line it gives; the table "
        "does not print its flags); torchtitan/config_manager.py: scaling_type_input, "
        "scaling_type_weight, scaling_type_grad_output = 'dynamic' (tensorwise); "
        "torchtitan/float8.py: module_filter_fn=lambda mod, fqn: fqn != 'output'",
    ),
    "allocator": (
        "expandable_segments:True",
        'run_llama_train.sh: PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" torchrun ... '
        "(multinode_trainer.slurm sets none; the benchmark does not say which launched the "
        "128-GPU run)",
    ),
    "model": (
        "llama-8b",
        "torchtitan/models/llama/__init__.py '8B': dim 4096, 32 layers, 32 heads, 8 kv heads, "
        "ffn_dim_multiplier 1.3, multiple_of 1024 (ffn 14336); vocab 128256, untied output",
    ),
}


@dataclass(frozen=True)
class MemoryRun:
    """One published row: ``gpus`` H100s of FSDP (``data_parallel_shard_degree`` = gpus), local
    batch ``micro_batch``, and the published max reserved memory in GiB (2^30 bytes)."""

    table: str
    gpus: int
    micro_batch: int
    reserved_gib: float
    tokens_per_s_per_gpu: int


RUNS = (
    MemoryRun("Table 1, FSDP (8 GPUs)", 8, 2, 82.4, 5_762),
    MemoryRun("Table 3, FSDP (128 GPUs)", 128, 2, 67.0, 5_605),
)


#: The Grand Teton H100 (the benchmark's "Hardware" section, quoted in the module docstring).
HARDWARE = {
    "hbm_bytes_per_s": (2.4e12, "96GB HBM2e with 2.4 TB/sec peak memory bandwidth"),
    "hbm": (96, "96GB HBM2e (GB as NVIDIA names an H100's HBM: 80GB is 80 GiB)"),
    "network_bytes_per_s": (50e9, "backend RDMA network with 400 Gb/s per GPU"),
    "power_w": (500, "the default 500W power limit"),
}


@dataclass(frozen=True)
class ThroughputRun:
    """One published row of Tables 1 and 3: ``gpus`` H100s of FSDP, local batch 2, selective
    (op) activation checkpointing, with or without torch.compile and Float8, and its tokens per
    second per GPU ("TPS/GPU")."""

    table: str
    gpus: int
    compile: bool
    float8: bool
    tokens_per_s_per_gpu: int

    @property
    def techniques(self) -> str:
        """The row's label in the table."""
        return (
            "FSDP"
            + (" + torch.compile" if self.compile else "")
            + (" + Float8" if self.float8 else "")
        )


THROUGHPUT = (
    ThroughputRun("Table 1", 8, False, False, 5_762),
    ThroughputRun("Table 1", 8, True, False, 6_667),
    ThroughputRun("Table 1", 8, True, True, 8_532),
    ThroughputRun("Table 3", 128, False, False, 5_605),
    ThroughputRun("Table 3", 128, True, False, 6_514),
    ThroughputRun("Table 3", 128, True, True, 8_380),
)
