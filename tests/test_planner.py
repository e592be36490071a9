"""The planner: it enumerates meshes and placements, keeps what fits, ranks by the core's step
time."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from placement_edu import Mesh, TransformerSpec, derive_memory, get_precision
from placement_edu.strategies import COMPOSITIONS
from placement_edu.units import GB
from placement_edu.cli import main
from placement_edu.planner import default_transformer, meshes, plan
from placement_edu.pricing import comm_seconds, compose
from placement_edu.timing import HARDWARE, comm_time, compute_time, step_time
from placement_edu.schedule import derive_schedule

pytestmark = pytest.mark.fast

SMALL = TransformerSpec(layers=8, hidden=256, heads=8, seq=128, vocab=1000)
H100 = HARDWARE["h100-nvlink-ib"]


def test_a_bare_70b_is_priced_as_llama_2_70b_s_shape_with_the_mlp_fitted_to_psi() -> None:
    model, words = default_transformer(70 * 10**9)
    # Touvron et al. 2023 (Llama 2), Table 1 / §2.2: L = 80, h = 8192, 64 heads, 4096 tokens,
    # V = 32000.
    assert (model.layers, model.hidden, model.heads, model.seq, model.vocab) == (
        80,
        8192,
        64,
        4096,
        32000,
    )
    assert model.ffn == 36_789 and abs(model.psi - 70e9) < 1e6  # within one MLP column of 70e9
    assert "Llama-2-70B" in words and "69,999,470,736" in words


def test_composed_placements_are_the_named_compositions() -> None:
    mesh = Mesh.of(data=2, tensor=2, pipeline=2)
    z1 = compose("zero1", mesh, 4)
    assert z1.name == "zero1×tp×pp" and z1.placement == COMPOSITIONS["zero1×tp×pp"].placement
    assert (
        compose("zero3", Mesh.of(data=2, tensor=2), 1).placement
        == COMPOSITIONS["zero3×tp"].placement
    )
    hsdp = compose("zero3", Mesh.of(replica=2, data=4), 1)
    assert hsdp.name == "hsdp" and hsdp.placement == COMPOSITIONS["hsdp"].placement


def test_meshes_multiply_to_the_devices_and_keep_tensor_inside_a_node() -> None:
    found = list(meshes(64, SMALL))
    assert all(m.world_size == 64 for m in found) and len(set(found)) == len(found)
    assert (
        max(m.degree("tensor") for m in found) == 8
        and max(m.degree("pipeline") for m in found) == 8
    )
    assert Mesh.of(replica=8, data=8) in found and Mesh.of(data=64) in found


@pytest.mark.parametrize(
    "name, mesh",
    [
        ("zero3", Mesh.of(data=2, tensor=2, pipeline=2)),
        ("fsdp_grad_op", Mesh.of(data=4, pipeline=2)),
        ("zero1", Mesh.of(data=2, tensor=4)),
    ],
)
def test_communication_seconds_are_affine_in_micro_batches_exactly(name: str, mesh: Mesh) -> None:
    # The planner derives m = 1 and m = 2 and extrapolates; the full derivation at m = 8 agrees.
    strategy = compose(name, mesh, 8)
    model = TransformerSpec(layers=8, hidden=256, heads=8, seq=128, vocab=1000, recompute="full")
    full = comm_time(
        derive_schedule(strategy, model, mesh, get_precision("mixed_adam")), H100, mesh
    )
    assert comm_seconds(strategy, model, mesh, get_precision("mixed_adam"), H100) == pytest.approx(
        full, rel=1e-12
    )


def test_70b_on_64_devices_refuses_dp_by_a_stated_excess_and_ranks_what_fits() -> None:
    model, _ = default_transformer(70 * 10**9)
    result = plan(model, 64, 80 * GB, "h100-nvlink-ib")
    dp = [c for c in result.infeasible if c.strategy.name == "dp"]
    assert dp and all(c.peak_bytes >= 16 * model.psi for c in dp)  # SPEC §3: dp keeps 16Ψ = 1120 GB
    assert min(c.over_bytes for c in dp) == min(c.peak_bytes for c in dp) - 80 * GB
    assert result.ranked and all(c.peak_bytes <= 80 * GB for c in result.ranked)
    times = [c.time.total_s for c in result.ranked]
    assert times == sorted(times)
    # The planner's figure for its first choice is the core's step_time for the same arguments.
    best = result.ranked[0]
    shaped = TransformerSpec(
        **{
            **_fields(model),
            "recompute": best.recompute,
            "sequence_parallel": best.strategy.sequence_parallel,
        }
    )
    core = step_time(best.strategy, shaped, best.mesh, "mixed_adam", H100, overlap="per_pass")
    assert best.time.total_s == pytest.approx(core.total_s, rel=1e-9)
    assert (
        best.peak_bytes
        >= derive_memory(best.strategy, shaped, best.mesh, get_precision("mixed_adam")).peak
    )
    assert len(
        [result.explain(i) for i in range(3)]
    ) == 3 and "fastest that fits" in result.explain(0)


def test_plan_json_lists_dp_infeasible_and_ranked_choices_with_times(
    capsys: pytest.CaptureFixture,
) -> None:
    assert main(["plan", "--params", "70e9", "--devices", "64", "--memory-gb", "80", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "Llama-2-70B" in out["assumption"] and out["budget_bytes"] == 80 * 10**9
    dp = [c for c in out["infeasible"] if c["strategy"] == "dp"]
    assert (
        dp
        and dp[0]["over_bytes"] == dp[0]["peak_bytes"] - 80 * 10**9
        and dp[0]["over_bytes"] > 1000 * 10**9
    )
    first = out["ranked"][0]
    assert {
        "peak_bytes",
        "step_time_s",
        "comm_time_s",
        "compute_time_s",
        "mesh",
        "strategy",
    } <= set(first)
    assert first["peak_bytes"] <= 80 * 10**9 and len(out["explanations"]) == 3
    # 4M tokens over 64 devices, 6Ψ FLOPs each at 0.4 × 989e12 FLOP/s (at least: +recompute).
    assert first["compute_time_s"] >= 6 * out["psi"] * 65536 / (0.4 * 989e12) * (1 - 1e-12)


def test_a_budget_nothing_fits_leaves_only_infeasible_choices() -> None:
    result = plan(SMALL, 8, 10**6, "a100-nvlink", global_batch=8)
    assert result.ranked == () and result.infeasible and "0 placements fit" in str(result)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["plan", "--params", "70e9", "--devices", "64", "--memory-gb", "0"], "less than 1"),
        (
            ["plan", "--params", "70e9", "--devices", "64", "--hardware", "tpu"],
            "invalid choice: 'tpu'",
        ),
        (["plan", "--params", "70e9", "--layers", "8", "--devices", "8"], "not both"),
        (["plan", "--params", "1e3", "--devices", "8"], "too small for any published shape"),
        (["plan", "--layers", "8", "--devices", "8"], "needs --hidden"),
    ],
)
def test_bad_plan_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def _fields(model: TransformerSpec) -> dict:
    return {
        k: getattr(model, k)
        for k in ("layers", "hidden", "heads", "seq", "vocab", "micro_batch", "ffn")
    }


def test_the_planner_considers_the_expert_axis_when_the_model_has_experts() -> None:
    from placement_edu.experts import MIXTRAL_8X7B

    # 16 devices, Mixtral's E = 8: each expert axis e divides the data devices and E (a node
    # holds 8); no tensor axis beside it (check_expert_axis), pipelines up to 16 stages
    expected = {
        "data=16", "data=8,expert=2", "data=4,expert=4", "data=2,expert=8",
        "data=8,pipeline=2", "data=4,expert=2,pipeline=2", "data=2,expert=4,pipeline=2",
        "expert=8,pipeline=2", "data=4,pipeline=4", "data=2,expert=2,pipeline=4",
        "expert=4,pipeline=4", "data=2,pipeline=8", "expert=2,pipeline=8", "pipeline=16",
    }  # fmt: skip
    assert {str(m) for m in meshes(16, MIXTRAL_8X7B)} == expected
    p = plan(MIXTRAL_8X7B, 16, memory_bytes=10**12, global_batch=64)
    by_name = {(c.strategy.name, str(c.mesh)): c for c in p.ranked}
    ep = by_name[("dp×ep", "data=2,expert=8")]
    # the expert ranks read their own sequences: 64 sequences over 2·8 = 16 replicas, m = 4
    assert ep.strategy.micro_batches == 4 and ep.recompute == "none"
    # its all-to-alls wait on the critical path: 4 micro-batches × 32 layers × 2 in each pass,
    # each 7 steps of α and 7/8 of E·C·h·2 B = 67,108,864 B on NVLink 4 (inside the node)
    link = H100.node_link
    a2a = 4 * 32 * 4 * (7 * link.alpha_s + 67_108_864 * 7 / 8 / link.bandwidth)
    assert ep.time is not None and ep.time.exposed_comm_s == pytest.approx(a2a, rel=1e-9)
    # no expert axis where the data states are sharded: zero1..3 stay on meshes without one
    assert {n for n, mesh in by_name if "expert" in mesh} == {"dp×ep", "dp×ep×pp", "ep×pp"}


# --- a long sequence: the context axis (issue 26) -------------------------------------------
def llama_at(seq: int) -> TransformerSpec:
    """Llama-3-8B's shape (L = 32, h = 4096, a = 32, K = 8, ffn 14336, V = 128256), flash."""
    return TransformerSpec(
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn=14336,
        vocab=128256,
        seq=seq,
        attention="flash",
    )


def test_meshes_try_a_context_axis_from_8k_tokens_on() -> None:
    # Megatron Core's parallelism guide: context parallelism is for "long sequences (8K+ tokens)"
    assert not any(m.degree("context") > 1 for m in meshes(64, llama_at(4096)))
    found = list(meshes(64, llama_at(8192)))
    contexts = [m for m in found if m.degree("context") > 1]
    assert contexts and all(m.world_size == 64 for m in found) and len(set(found)) == len(found)
    assert {m.degree("context") for m in contexts} == {2, 4, 8, 16, 32, 64}
    assert Mesh.of(data=1, context=64) in found and Mesh.of(data=4, context=2, tensor=8) in found


def test_compose_puts_the_data_modes_on_the_context_axis_as_the_compositions_do() -> None:
    mesh = Mesh.of(data=2, context=4)
    zero1 = compose("zero1", mesh, 1)
    assert zero1.name == "zero1×cp" and zero1.placement == COMPOSITIONS["zero1×cp"].placement
    dp = compose("dp", mesh, 1, context_attention="ulysses")
    assert dp.name == "dp×cp_ulysses" and dp.placement == COMPOSITIONS["dp×cp_ulysses"].placement
    assert dp.context_attention == "ulysses"


def test_the_planner_cuts_a_128k_sequence_over_a_context_axis_and_repeats_no_work() -> None:
    long = plan(llama_at(131072), 64, global_batch=64)
    assert long.chosen is not None
    chosen = long.ranked[long.chosen]
    without = [c for c in long.ranked if c.mesh.degree("context") == 1]
    assert chosen.mesh.degree("context") > 1 and without
    assert chosen.time is not None and without[0].time is not None
    assert chosen.time.total_s < without[0].time.total_s  # faster than any plan without it
    # a context axis splits tokens, not work: the compute of one device holding its share of the
    # batch's tokens whole -- 64 sequences of 131,072 tokens on 64 devices, 131,072 each
    assert chosen.mesh.degree("tensor") == chosen.mesh.degree("pipeline") == 1
    whole = replace(llama_at(131072), recompute=chosen.recompute)
    alone = compute_time(whole, 131072, HARDWARE["h100-nvlink-ib"], chosen.recompute)
    assert chosen.time.compute_s == pytest.approx(sum(alone.values()), rel=1e-12)
    # Ulysses is tried only where c·t divides the 8 key-value heads
    for c in long.ranked:
        if "cp_ulysses" in c.strategy.name:
            assert 8 % (c.mesh.degree("context") * c.mesh.degree("tensor")) == 0
