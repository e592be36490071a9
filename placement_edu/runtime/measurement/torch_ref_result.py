"""PyTorch's own implementations, launched and compared with the core: what each rank measured
(``torch_reference.py``, run on every rank) beside what ``placement_edu.implementations``
predicts, byte for byte and op for op, and the deviation from one process."""

from __future__ import annotations

from dataclasses import dataclass

from placement_edu.errors import expect
from placement_edu.implementations import IMPLEMENTATIONS, TorchRefConfig, predict
from placement_edu.placement import MODEL_STATES
from placement_edu.units import wrapped
from placement_edu.shown import Shown


# --- measured beside predicted ----------------------------------------------------------------
#: Within float64 rounding: a faulty run deviates by ~1e-3 after one step (lr 1e-2).
TOLERANCE = 1e-10
#: What a torch-ref rank reports: the model states, and FSDP2's padded parameter storage apart.
STATES = (*(s.value for s in MODEL_STATES), "storage_params")


@dataclass(frozen=True)
class TorchRefResult(Shown):
    """One implementation's run: per rank, what it measured and what the core predicted, both as
    {params, grads, optimizer, storage_params (bytes), ops: [{step, op, payload_bytes, group}]}."""

    config: TorchRefConfig
    measured: list[dict]
    predicted: list[dict]
    deviation: float  # max over ranks and steps of |θ − θ_single-process|
    differs: str  # how its schedule differs from the placement's ideal one
    ideal: list[dict]  # rank 0's ideal schedule of one step
    wall_s: float
    metadata_bytes: int = 0  # rank 0: pickled objects sent or received (pipelining's shapes)

    @classmethod
    def build(cls, config: TorchRefConfig, raw: list[dict]) -> "TorchRefResult":
        predicted = predict(config)

        def ops(steps: list[list[tuple[str, int, int]]]) -> list[dict]:
            return [
                {"step": k - 1, "op": o[0], "payload_bytes": o[1], "group": o[2]}
                for k, entries in enumerate(steps)
                for o in entries
            ]

        measured = [
            {
                **{s: r["steps"][-1]["held"][s] for s in STATES},
                "optimizer_step_counters": r["steps"][-1]["held"]["optimizer_step_counters"],
                "ops": [{"step": st["step"], **o} for st in r["steps"] for o in st["ops"]],
            }
            for r in raw
        ]
        mine = [{**{s: p[s] for s in STATES}, "ops": ops(p["steps"])} for p in predicted]
        deviation = max(st["deviation"] for r in raw for st in r["steps"][1:])
        ideal = [{"op": o[0], "payload_bytes": o[1], "group": o[2]} for o in predicted[0]["ideal"]]
        return cls(
            config,
            measured,
            mine,
            deviation,
            predicted[0]["differs"],
            ideal,
            max(r["wall_s"] for r in raw),
            raw[0].get("metadata_bytes", 0),
        )

    @property
    def ops_match(self) -> bool:
        return all(m["ops"] == p["ops"] for m, p in zip(self.measured, self.predicted))

    @property
    def bytes_match(self) -> bool:
        return all(m[s] == p[s] for m, p in zip(self.measured, self.predicted) for s in STATES)

    @property
    def equivalent(self) -> bool | None:
        """Within float64 rounding of one process; None for a mixed-precision run, whose bf16
        compute rounds at ~2^-8 and is measured against one float32 process, not judged."""
        if self.config.precision != "fp64_adam":
            return None
        return self.deviation <= TOLERANCE

    def differences(self) -> list[str]:
        """Each disagreement between measured and predicted, one line; empty when they agree."""
        out = []
        for rank, (m, p) in enumerate(zip(self.measured, self.predicted)):
            out += [
                f"rank {rank} {s}: measured {m[s]:,} B, predicted {p[s]:,} B"
                for s in STATES
                if m[s] != p[s]
            ]
            if m["ops"] != p["ops"]:
                at = next(
                    (i for i, (a, b) in enumerate(zip(m["ops"], p["ops"])) if a != b),
                    min(len(m["ops"]), len(p["ops"])),
                )
                show = lambda ops: _op(ops[at]) if at < len(ops) else "nothing"  # noqa: E731
                out.append(
                    f"rank {rank} op {at}: measured {show(m['ops'])}, predicted {show(p['ops'])} "
                    f"({len(m['ops'])} vs {len(p['ops'])} ops)"
                )
        return out

    def to_dict(self) -> dict:
        return {
            "impl": self.config.impl,
            "world_size": self.config.world_size,
            "model": self.config.model,
            "steps": self.config.steps,
            "precision": self.config.precision,
            "measured": self.measured,
            "predicted": self.predicted,
            "ops_match": self.ops_match,
            "bytes_match": self.bytes_match,
            "equivalent": self.equivalent,
            "deviation": self.deviation,
            "ideal_step": self.ideal,
            "differs_from_ideal": self.differs,
            "metadata_bytes": self.metadata_bytes,
            "wall_s": self.wall_s,
        }

    def __str__(self) -> str:
        c = self.config
        impl = IMPLEMENTATIONS[c.impl]
        placement, rule, what = impl.placement, impl.rule, impl.what
        sliced = (
            f"sliced by the {rule} rule"
            if c.splits_batch
            else "whole Linears per stage"
            if c.micro_batches > 1
            else "split by Megatron's column/row plan"
        )
        lines = [
            f"{what} on {c.world_size} ranks, {c.model} "
            f"({c.steps} steps; the placement {placement}, {sliced}"
            + ("" if c.precision == "fp64_adam" else f"; precision {c.precision}")
            + ")",
            "rank  state            measured B   predicted B",
        ]
        for rank, (m, p) in enumerate(zip(self.measured, self.predicted)):
            for s in STATES:
                lines.append(
                    f"{rank:>4}  {s:<15} {m[s]:>11,}  {p[s]:>12,}"
                    + ("" if m[s] == p[s] else "  <-- differs")
                )
        lines.append(
            "(Adam's per-tensor step counters, not model state: "
            f"{self.measured[0]['optimizer_step_counters']} B on rank 0)"
        )
        if self.metadata_bytes:
            lines.append(
                "(pickled shape metadata at the first step, not in the ledger: "
                f"{self.metadata_bytes} B sent and received by rank 0)"
            )
        first = [o for o in self.measured[0]["ops"] if o["step"] == c.steps - 1]
        lines.append(f"rank 0, step {c.steps - 1}: " + ", ".join(_op(o) for o in first))
        lines.append("vs the placement's ideal step: " + ", ".join(_op(o) for o in self.ideal))
        lines.append(f"  {self.differs}")
        lines.append(
            f"ops: {'measured = predicted, entry by entry' if self.ops_match else 'DIFFER'}; "
            f"state bytes: {'measured = predicted' if self.bytes_match else 'DIFFER'}; "
            + (
                f"{'equivalent' if self.equivalent else 'NOT equivalent'} to one process "
                f"(max |Δθ| = {self.deviation:.1e}, float64)"
                if self.equivalent is not None
                else f"max |Δθ| = {self.deviation:.1e} from one float32 process ({c.precision}: "
                "bf16 compute rounds at 2^-8, so this is measured, not judged)"
            )
        )
        return wrapped("\n".join(lines + self.differences()))


def _op(o: dict) -> str:
    return f"{o['op']} {o['payload_bytes']:,} B/{o['group']}"


def run_torch_refs(
    configs: list[TorchRefConfig],
    timeout_s: float = 60.0,
    progress: bool = False,
    narrow_to_fit: bool = False,
) -> list[TorchRefResult]:
    """Several implementations on one world size in one launch (the ranks start once). With
    ``narrow_to_fit``, where this container has too little memory left for them, they run on a
    narrower MLP that fits, saying so in one line (``narrowed_to_fit``)."""
    from placement_edu.runtime.processes.launcher import launch

    sizes = {c.world_size for c in configs}
    expect(len(sizes) == 1, f"run_torch_refs needs one world size per launch, got {sorted(sizes)}")
    if narrow_to_fit:
        configs = narrowed_to_fit(configs)
    raw = launch(list(configs), sizes.pop(), timeout_s, progress)
    return [TorchRefResult.build(c, r) for c, r in zip(configs, raw)]


def run(config: TorchRefConfig, timeout_s: float = 60.0, progress: bool = False) -> TorchRefResult:
    """Train ``config`` on fresh processes (torch's elastic launcher) and compare with the core."""
    return run_torch_refs([config], timeout_s, progress)[0]


# --- inside a small container (Binder: 1-2 GiB) -------------------------------------------------
#: The narrowest hidden width ``narrowed_to_fit`` goes down to.
NARROWEST = 64


def narrowed_to_fit(configs: list[TorchRefConfig]) -> list[TorchRefConfig]:
    """``configs`` where this container has room for their ranks; else the same runs on the MLP
    with every hidden width halved, as often as it takes (down to ``NARROWEST``), and one printed
    line that says so and why. A 1 GiB Binder then still measures DDP against the core -- on a
    smaller model, every figure that model's -- where it would have refused the run. Where no
    narrowing fits, ``configs`` unchanged: the launch refuses them in its one line."""
    from dataclasses import replace

    from placement_edu.implementations import parse_model
    from placement_edu.runtime.processes import forkserver
    from placement_edu.runtime.processes.container import memory_limit, rank_bytes, ranks_that_fit
    from placement_edu.units import MiB

    limit = memory_limit()
    n = max(c.world_size for c in configs)

    def fits(jobs: list[TorchRefConfig]) -> bool:
        assert limit is not None
        return ranks_that_fit(limit.free, rank_bytes(jobs), forkserver.running()) >= n

    if limit is None or fits(configs):
        return configs
    narrow = list(configs)
    while not fits(narrow):
        widths = [parse_model(c.model) for c in narrow]
        if any(len(w) < 3 or min(w[1:-1]) < 2 * NARROWEST for w in widths):
            return configs  # nothing narrower to try
        narrow = [
            replace(c, model="mlp:" + ",".join(map(str, (w[0], *(x // 2 for x in w[1:-1]), w[-1]))))
            for c, w in zip(narrow, widths)
        ]
    print(
        f"this container has {limit.free / MiB:,.0f} MiB free, too little for {n} ranks of "
        f"{configs[0].model} (about {rank_bytes(configs) / MiB:,.0f} MiB each): running "
        f"{narrow[0].model} instead -- the figures below are that model's"
    )
    return narrow
