"""The reserved estimate (issue 39, item 4): ``derive``'s step replayed through the caching
allocator's model (``placement_edu.reserved``). The replay must keep the allocated peak exact
(what it requests is ``derive``'s peak, to the byte), and put each FSDP2 buffer in its stream's
pool, whose reserved bytes are worked out by hand below. No torch: the profile is written out."""

from __future__ import annotations

import pytest

from placement_edu.peak import ActivationProfile, Moment, derive
from placement_edu.reserved import estimate

pytestmark = pytest.mark.fast

PAGE = 20 * 2**20  # an expandable segment of the large pool grows by 20 MiB pages

#: Llama-3-8B at b = 2, s = 8,192, bf16, SDPA, torchtitan's op policy: the moments the
#: FakeTensorMode profile measured (torchtitan's rows in benchmarks/published), written out so
#: that this test needs no torch.
LLAMA_8B_TORCHTITAN = ActivationProfile(
    "llama-8b", 2, 8192, "bf16", "sdpa", "torchtitan-op",
    block=1_042_284_544, outside=9_080_864_772, buffers=256,
    moments=(
        Moment("forward, last block", "forward", 3_766_484_992, 0, -1),
        Moment("forward, loss", "forward", 23_773_511_688, 0),
        Moment("backward, loss (logits' gradient)", "backward", 27_976_073_224, 0),
        Moment("backward, final norm", "backward", 3_833_593_864, 1_050_681_344),
        Moment("backward, block", "backward", 6_014_763_016, 1_168_121_856, 1),
        Moment("backward, first block", "backward", 4_972_478_472, 1_168_121_856, 0),
        Moment("backward, embedding (embed_tokens)", "backward", 1_184_890_888, 1_050_681_344),
    ),
)  # fmt: skip


def test_the_replay_requests_derives_peak_to_the_byte_and_reserves_more() -> None:
    for devices in (8, 128):
        peak = derive("llama-8b", LLAMA_8B_TORCHTITAN, devices, 0, "fsdp2_bf16").peak.total
        r = estimate("llama-8b", LLAMA_8B_TORCHTITAN, devices, 0, "fsdp2_bf16")
        assert r.requested == peak  # the allocated peak stays exact
        assert r.requested <= r.allocated < r.reserved


def test_fsdp2s_buffers_are_reserved_in_their_streams_pools() -> None:
    r = estimate("llama-8b", LLAMA_8B_TORCHTITAN, 8, 0, "fsdp2_bf16")
    # All-gather stream: the largest output is the root's (the embedding and the untied head,
    # 128,256 x 4,096 each, 16,032 rows a rank, and the final norm's 4,096): 2 x 128,256 x 4,096 +
    # 4,096 = 1,050,628,096 elements x 2 B (bf16) = 2,101,256,192 B (a multiple of 512); each
    # block's (218,112,000 x 2 B) reuses it. 2,101,256,192 / 20 MiB = 100.2 -> 101 pages.
    assert r.by_pool["all-gather copy-in", "large"] == 101 * PAGE == 2_118_123_520
    # Reduce-scatter stream: every sharded gradient (fp32) is a view of its unit's reduce-scatter
    # output, all live at the optimizer step: 32 blocks x 218,112,000 / 8 x 4 B = 3,489,792,000 B,
    # the root's 1,050,628,096 / 8 x 4 B = 525,314,048 B; 4,015,106,048 B / 20 MiB = 191.5 -> 192.
    assert r.by_pool["reduce-scatter", "large"] == 192 * PAGE == 4_026_531_840
    # The default stream holds the rest of the peak's live set (all but its all-gather buffer,
    # block 31's prefetch: 436,224,000 B) and cannot borrow the other pools' memory: the
    # estimate is at least the sum of the three pools' own peaks.
    peak = derive("llama-8b", LLAMA_8B_TORCHTITAN, 8, 0, "fsdp2_bf16").peak.total
    assert r.by_pool["default", "large"] >= peak - 436_224_000
    assert r.reserved == sum(r.by_pool.values())


def test_without_expandable_segments_the_same_step_reserves_more() -> None:
    # The activations' live set changes size event by event; without expandable segments each
    # larger request that no cached block fits is a new segment, and the old ones stay cached.
    on = estimate("llama-8b", LLAMA_8B_TORCHTITAN, 8, 0, "fsdp2_bf16")
    off = estimate("llama-8b", LLAMA_8B_TORCHTITAN, 8, 0, "fsdp2_bf16", expandable=False)
    assert off.requested == on.requested and off.reserved > on.reserved


def test_one_device_in_fp32_uses_the_default_stream_only() -> None:
    # No FSDP2 (one device, fp32): no collectives, so no all-gather or reduce-scatter pool.
    profile = ActivationProfile(
        "gpt2", 1, 1024, "fp32", "eager", "none", block=50_000_000, outside=200_000_000,
        moments=(
            Moment("forward, last block", "forward", 120_000_000, 0, -1),
            Moment("backward, loss", "backward", 400_000_000, 0),
            Moment("backward, block", "backward", 130_000_000, 28_000_000, 1),
            Moment("backward, first block", "backward", 80_000_000, 28_000_000, 0),
            Moment("backward, embedding (wte)", "backward", 20_000_000, 154_000_000),
        ),
    )  # fmt: skip
    r = estimate("gpt2", profile, 1, 0, "fp32")
    assert {stream for stream, _ in r.by_pool} == {"default"}
    assert r.requested == derive("gpt2", profile, 1, 0, "fp32").peak.total


def test_fit_prints_the_estimate_apart_from_the_allocated_peak_and_keys_it_beside_peak_bytes(
    capsys,
) -> None:
    import json

    from placement_edu.cli import main

    assert main(["fit", "--model", "gpt2", "--devices", "8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    # peak_bytes stays the allocated peak (exact against the tracker); the estimate is its own key
    assert r["peak_bytes"] < r["reserved_estimate_bytes"]
    assert sum(r["reserved_estimate"]["by_pool"].values()) == r["reserved_estimate_bytes"]
    assert r["reserved_estimate"]["allocator"] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert main(["fit", "--model", "gpt2", "--devices", "8"]) == 0
    text = capsys.readouterr().out
    assert "reserved, an estimate (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): " in text
    # a mesh's step is not replayed: no estimate rather than a wrong one
    assert main(["fit", "--model", "gpt2", "--mesh", "data=4,tensor=2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reserved_estimate_bytes"] is None


def test_past_max_layers_fit_says_it_does_not_estimate_in_one_line_and_in_constant_time() -> None:
    # the replay goes block by block (its cost grows with L): a 257-block model gets no estimate,
    # said as such, before any profile or replay (issue 43: no cost that grows with a typed number)
    import argparse
    from types import SimpleNamespace

    from placement_edu.cli.fit import reserved_of
    from placement_edu.reserved import MAX_LAYERS

    deep = argparse.Namespace(mesh=None, arch=SimpleNamespace(layers=MAX_LAYERS + 1))
    r = reserved_of(deep, 1024, None, None)  # type: ignore[arg-type]  (neither is read)
    assert r == {
        "reserved_estimate_bytes": None,
        "reserved_estimate": {
            "skipped": "not estimated past 256 blocks (the replay goes block by block)"
        },
    }
