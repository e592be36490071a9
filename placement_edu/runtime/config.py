"""What to run: a ``RunConfig`` (plain data, sent to every worker) and what follows from it --
the strategy and mesh, the tiny model, and the core's ``ConcreteModel`` used for the predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from placement_edu.errors import (
    MAX_LOCAL_WORLD_SIZE,
    MAX_RUN_MICRO_BATCHES,
    MAX_STEPS,
    PlacementError,
    an_int,
    expect,
    positive_int,
    show_limit,
    shown,
)
from placement_edu.mesh import Mesh, as_mesh
from placement_edu.models import ConcreteModel, tensor_divides_heads
from placement_edu.precision import Precision
from placement_edu.setting import Setting, resolve
from placement_edu.strategies import Strategy
from placement_edu.runtime.engines.toy_shapes import TP_PLAN, BlockShape, MLPShape, ToyShape

if TYPE_CHECKING:
    import torch

    from placement_edu.runtime.engines.toy import ToyModel

#: Each element type of a run: torch's dtype (by name: a config is made and checked in a notebook
#: kernel that never imports torch, see ``torch_dtype``), the core's precision, the base tolerance.
DTYPES = {
    "float64": ("float64", "fp64_adam", 1e-10),
    "float32": ("float32", "fp32_adam", 1e-4),
}


@dataclass(frozen=True)
class RunConfig:
    """One run. ``strategy``: a name, or a ``Strategy`` of your own (the engine is chosen by its
    placement). ``mesh`` like "data=2,tensor=2" (default: every rank on the strategy's one axis;
    a composition puts 2 ranks on each model axis and the rest on data)."""

    strategy: str | Strategy
    world_size: int
    steps: int = 3
    fault: str | None = None
    mesh: str | None = None
    dtype: str = "float64"
    micro_batches: int | None = None
    pipeline_schedule: str | None = None
    global_batch: int = 16
    width: int = 12
    layers: int = 4
    seed: int = 0

    def with_(self, **changes: object) -> "RunConfig":
        return replace(self, **changes)  # type: ignore[arg-type]

    # --- what follows from it -------------------------------------------------------------
    @property
    def label(self) -> str:
        extra = f" [{self.fault}]" if self.fault else ""
        return f"{self.resolved_strategy().name} on {self.resolved_mesh()}{extra}"

    @cached_property
    def setting(self) -> Setting:
        """The run's strategy, mesh and precision, resolved once (``setting.resolve``: the door);
        ``resolved_strategy`` and ``resolved_mesh`` read it."""
        expect(self.strategy is not None, "a run needs a strategy (e.g. zero3) or a Strategy")
        door = resolve(self.strategy, None, None, self._dtype()[1])
        assert door.strategy is not None
        strategy = self._strategy(door.strategy)
        return replace(door, strategy=strategy, mesh=self._mesh(strategy))

    def resolved_strategy(self) -> Strategy:
        assert self.setting.strategy is not None
        return self.setting.strategy

    def resolved_mesh(self) -> Mesh:
        assert self.setting.mesh is not None
        return self.setting.mesh

    def _strategy(self, strategy: Strategy) -> Strategy:
        changes: dict[str, object] = {}
        if self.micro_batches is not None:
            m = changes["micro_batches"] = positive_int("micro_batches", self.micro_batches)
            expect(
                m <= MAX_RUN_MICRO_BATCHES,
                f"micro_batches of a run must be at most {MAX_RUN_MICRO_BATCHES} "
                f"(each one is real compute on every rank), got {m:,}",
            )
        if self.pipeline_schedule is not None:
            changes["pipeline_schedule"] = self.pipeline_schedule
        return strategy.with_(**changes) if changes else strategy

    def _mesh(self, strategy: Strategy) -> Mesh:
        n = positive_int("world_size", self.world_size)
        expect(
            n >= 2, "world_size must be at least 2: a run on one process is the reference itself"
        )
        if self.mesh is not None and self.mesh != "":
            mesh = as_mesh(self.mesh)
        elif len(strategy.axes) == 1:
            mesh = strategy.default_mesh(n)
        else:
            others = [a for a in strategy.axes if a != "data"]
            expect(
                n % 2 ** len(others) == 0 and n >= 2 ** len(strategy.axes),
                f"{strategy.name} needs a mesh with {', '.join(strategy.axes)} axes; "
                f'world_size = {n} is too small or odd; give mesh=..., e.g. mesh="'
                + ",".join(f"{a}=2" for a in strategy.axes)
                + '"',
            )
            mesh = Mesh.of(data=n // 2 ** len(others), **{a: 2 for a in others})
        expect(
            mesh.world_size == n, f"mesh {mesh} has {mesh.world_size} devices, but world_size = {n}"
        )
        return mesh

    @property
    def torch_dtype(self) -> torch.dtype:
        """torch's dtype: torch is imported here, in a rank, not when a config is made."""
        import torch

        dtype: torch.dtype = getattr(torch, self._dtype()[0])
        return dtype

    @property
    def precision(self) -> Precision:
        return self.setting.precision

    @property
    def tolerance(self) -> float:
        """The dtype's base tolerance: the least deviation from one process that counts as
        rounding. A run adds a multiple of its own measured rounding floor to it, step by step
        (``RunResult.tolerances``, ``verdict.tolerances``)."""
        return self._dtype()[2]

    def _dtype(self) -> tuple[str, str, float]:
        if not isinstance(self.dtype, str) or self.dtype not in DTYPES:
            raise PlacementError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
        return DTYPES[self.dtype]

    def module(self) -> ToyModel:
        """The architecture: a transformer block when a tensor axis splits weights, else the MLP."""
        from placement_edu.runtime.engines.toy import TinyMLP, TinyTransformer

        if self.resolved_mesh().degree("tensor") > 1:
            return TinyTransformer()
        return TinyMLP(width=self.width, layers=self.layers)

    def shape(self) -> ToyShape:
        """The architecture's sizes without torch (``toy_shapes``): what the predictions read."""
        if self.resolved_mesh().degree("tensor") > 1:
            return BlockShape()
        return MLPShape(width=self.width, layers=self.layers)

    def micro_rows(self) -> int:
        """Samples in one micro-batch on one rank: global batch / (batch ranks x micro-batches),
        where the batch ranks are the data degree times the replica degree (hsdp; 1 elsewhere)."""
        mesh, m = self.resolved_mesh(), self.resolved_strategy().micro_batches
        d = mesh.degree("data") * mesh.degree("replica")
        g = self.global_batch
        if g % (d * m):
            # the data degrees that would do, on this machine (at most MAX_LOCAL_WORLD_SIZE ranks)
            fits = [
                str(k) for k in range(1, min(g // m, MAX_LOCAL_WORLD_SIZE) + 1) if g % (k * m) == 0
            ]
            raise PlacementError(
                f"the run's global batch of {g} rows (RunConfig.global_batch; fixed on the "
                f"command line) does not split into {d} data ranks x {m} micro-batches; change "
                f"the world size (or the mesh's data degree) or the micro-batches: "
                + (
                    f"with {m} micro-batch{'es' if m > 1 else ''} the data degree must be one "
                    f"of {', '.join(fits)}"
                    if fits
                    else f"{m} micro-batches do not fit {g} rows, give fewer"
                )
            )
        return self.global_batch // (d * m)

    def concrete_model(self) -> ConcreteModel:
        """The core's view of the model, set up to describe exactly what the engines do: ZeRO's
        flat padded rule (whole tensors, "greedy", where owners broadcast as PyTorch's
        ZeroRedundancyOptimizer does), one gather unit, and the activation and boundary sizes of a
        micro-batch."""
        module, rows = self.shape(), self.micro_rows()
        act = self.precision.activations
        rule = (
            "greedy" if self.resolved_strategy().owner_update == "allreduce_broadcast" else "zero"
        )
        if isinstance(module, BlockShape):
            rep, split = module.activation_elements(rows, 1)
            return ConcreteModel.from_module(
                module,
                rule=rule,
                tp_plan=TP_PLAN,
                boundary_elements=rows * module.seq * module.hidden,
                tp_blocks_per_layer=2,
                activation_bytes=(rep + split) * act,
                activation_bytes_replicated=rep * act,
                name="tiny transformer block",
            )
        return ConcreteModel.from_module(
            module,
            rule=rule,
            boundary_elements=rows * module.width,
            activation_bytes=module.activation_elements(rows) * act,
            name="tiny MLP",
        )

    def validate(self) -> None:
        """Refuse what cannot run, before any process starts."""
        from placement_edu.runtime.engines import runnable
        from placement_edu.runtime.verdict import refuse_inapplicable
        from placement_edu.schedule import validate as validate_placement

        for name in ("world_size", "steps", "global_batch", "width", "layers", "micro_batches"):
            if getattr(self, name) is not None:
                positive_int(name, getattr(self, name))  # a count: a whole number >= 1
                an_int(name, getattr(self, name))  # and an int: 4.0 would fail later, in torch
        an_int("seed", self.seed)
        an_int("steps", positive_int("steps", self.steps))  # (None too: a run has steps)
        expect(
            self.steps <= MAX_STEPS,
            f"steps must be at most {show_limit(MAX_STEPS)} (MAX_STEPS: the command line's "
            "limit too), got " + (f"{self.steps:,}" if self.steps < 10**30 else shown(self.steps)),
        )
        expect(
            positive_int("width", self.width) <= 1024 and positive_int("layers", self.layers) <= 64,
            f"the toy MLP is small by design: width at most 1024 and layers at most 64, got "
            f"width={self.width}, layers={self.layers}",
        )
        expect(
            self.fault is None or isinstance(self.fault, str),
            f"fault must be a fault's name or None, got {self.fault!r}",
        )
        strategy, mesh = self.resolved_strategy(), self.resolved_mesh()
        validate_placement(strategy, mesh)
        tensor_divides_heads(self.shape(), mesh.degree("tensor"))
        runnable(strategy, mesh)
        self._dtype()  # a known element type
        self.concrete_model().local_tensors({a: d for a, d in mesh if a != "data"}, mesh.coords(0))
        self.micro_rows()
        refuse_inapplicable(strategy, mesh, self.fault)
