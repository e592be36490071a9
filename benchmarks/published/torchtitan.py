"""torchtitan's published Llama 3.1 8B memory, quoted with its sources (issue 39, item 5).

torchtitan's benchmarks/llama3_h100_202412_torchtitan.md (Grand Teton, H100 96 GB HBM2e, torch
1963fc8, torchtitan 9dec370, 2024-12-26), Tables 1 and 3, the rows without torch.compile or
Float8: "1D Parallelism (FSDP). Llama 3.1 8B model. 8 [128] GPUs. Local batch size 2, global batch
size 16 [256]. Selective activation checkpointing." Its memory column is the caching allocator's
*max reserved* bytes (torchtitan/metrics.py: ``reserved_bytes.all.peak``, printed in GiB).

The launch settings the tables do not print are read from torchtitan's own configuration at the
commit the table names (``SETTINGS``: each with the file it comes from). Nothing here is computed
by the package: these are the yardstick ``compare.py --memory`` measures ``fit`` and ``time``
against.
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
