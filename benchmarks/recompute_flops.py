"""The FLOPs each recomputation policy charges one step (issue 39, item 3): GPT-2's and
Llama-3-8B's shapes, one micro-batch of b = 2 sequences of s = 8,192 tokens, flash attention (SDPA),
the whole model on one device.

Per policy: the forward's FLOPs, the backward's with what the policy replays, and the replayed
FLOPs alone (``timing.flops_per_token``: PaLM's count, 6Ψ + 12·L·h·s, plus recomputation;
torchtitan-op's replay is ``TransformerSpec.torchtitan_op_recomputed``, which
``tests/test_torchtitan_op_flops.py`` measures with ``FlopCounterMode``). GPT-2 at s = 8,192 is
the formula's shape (a position table of 8,192 rows; the module's holds 1,024).

Run: ``.venv/bin/python benchmarks/recompute_flops.py``
"""

from __future__ import annotations

from placement_edu.architectures import get_architecture
from placement_edu.timing import flops_per_token

B, S = 2, 8192
POLICIES = ("none", "selective", "torchtitan-op", "layer:2", "full")


def main() -> None:
    tokens = B * S
    print(f"FLOPs of one step: b = {B}, s = {S:,} ({tokens:,} tokens), flash attention")
    print(f"{'model':<10} {'policy':<14} {'forward':>22} {'backward':>22} {'replayed':>22}")
    for name in ("gpt2", "llama-8b"):
        spec = get_architecture(name).formula(S, B, "flash")
        kept = flops_per_token(spec)["backward"]
        for policy in POLICIES:
            f = flops_per_token(spec, policy)
            replayed = f["backward"] - kept
            print(
                f"{name:<10} {policy:<14} {f['forward'] * tokens:>22,} "
                f"{f['backward'] * tokens:>22,} {replayed * tokens:>22,}"
            )


if __name__ == "__main__":
    main()
