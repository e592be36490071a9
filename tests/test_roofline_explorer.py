"""The roofline explorer (notebook 15): every figure is the core's (``placement_edu.roofline``),
checked against hand calculations from Llama-3-8B's config.json (h = 4096, f = 14336, 8 kv heads
of 128: kv width 1024) and the H100 SXM and A100 datasheets (989e12 and 312e12 bf16 dense FLOP/s;
3.35e12 and 2.039e12 B/s of HBM)."""

from __future__ import annotations

import pytest

from placement_edu.presentation import RooflineExplorer, forward_shares, llama_at
from placement_edu.roofline import block_ops, memory_bound

pytestmark = pytest.mark.fast

H100_PEAK, H100_HBM = 989e12, 3.35e12
MEMORY_OPS = {
    "RMSNorm (attention)",
    "RoPE and GQA repeat",
    "attention transpose",
    "residual add + RMSNorm (ffn)",
    "SwiGLU silu * mul",
    "residual add",
    "final norm",
    "loss (fp32 logits)",
}


def test_llama_3_8b_on_an_h100_by_hand() -> None:
    explorer = RooflineExplorer(tokens=2048, gpu="H100")
    ops = {op.name: op for op in explorer.ops}
    bound = {name for name, op in ops.items() if memory_bound(op, H100_PEAK, H100_HBM)}
    assert bound == MEMORY_OPS
    # wk: 2·T·k·n FLOPs on 2·(T·k + k·n + T·n) bytes, T = 2048, k = 4096, n = 1024
    T, k, n = 2048, 4096, 1024
    assert ops["wk"].intensity() == pytest.approx(T * k * n / (T * k + k * n + T * n), rel=1e-12)
    assert round(ops["wk"].intensity()) == 585  # the thinnest GEMM, still right of 295
    assert "<td>wk</td><td>585</td><td>compute</td>" in explorer.readout.value
    assert "<td>RMSNorm (attention)</td><td>0</td><td>memory</td>" in explorer.readout.value


def test_the_memory_bound_share_does_not_move_with_the_tokens() -> None:
    # the GEMMs' seconds are FLOPs/peak and the memory ops' bytes/W, both per token: their shares
    # stay put however many tokens a call (notebook 15, §5); eager, 28.8% on an H100
    shares = []
    for tokens in (2048, 16384, 65536):
        ops = block_ops(llama_at(tokens))
        share = forward_shares(ops, tokens, H100_PEAK, H100_HBM)
        assert sum(share) == pytest.approx(1, rel=1e-12)
        shares.append(sum(s for op, s in zip(ops, share) if op.name in MEMORY_OPS))
    assert shares[0] == pytest.approx(shares[1], rel=1e-9) == pytest.approx(shares[2], rel=1e-9)
    assert round(100 * shares[0], 1) == 28.8


def test_moving_a_control_moves_the_figure_and_the_ridge() -> None:
    explorer = RooflineExplorer()
    before, table = explorer.image.value, explorer.readout.value
    explorer.gpu.value = "A100"  # 312e12 / 2.039e12 = 153 FLOPs a byte
    assert explorer.image.value != before
    explorer.fused.value = True  # torch.compile: the norms move fewer bytes, the same FLOPs
    assert explorer.readout.value != table
    assert explorer.tokens.value == 2048 and len(explorer.ops) == 17
