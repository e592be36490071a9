"""``fit`` on a mesh, for the course (issue 39, item 7): one rank's step of a real model on a few
meshes side by side -- one device, a tensor group with and without sequence parallelism, the two
ranks of a pipeline -- term by term, from the one activation profile (``peak_axes.derive_on_mesh``,
what ``placement-edu fit --mesh`` prints).

Every column is fp32 with eager attention (a pipeline stage is priced in fp32, one device per stage:
``peak_axes.derive_pipeline``), b = 1, the model's reference s, Adam (foreach), no recomputation.
The profile ships with the package: no torch is imported. All figures are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement_edu.architectures import REFERENCE_SEQ
from placement_edu.mesh import Mesh
from placement_edu.peak import StepPeak
from placement_edu.units import GB
from placement_edu.shown import Shown

#: The columns: (label, mesh, rank, sequence parallelism). The pipeline is 1F1B over 2p = 4
#: micro-batches (``derive_pipeline``'s default).
PLACEMENTS: tuple[tuple[str, str, int, bool], ...] = (
    ("one device", "data=1", 0, False),
    ("tensor=2", "tensor=2", 0, False),
    ("tensor=2+SP", "tensor=2", 0, True),
    ("stage 0 of 2", "pipeline=2", 0, False),
    ("stage 1 of 2", "pipeline=2", 1, False),
)


@dataclass(frozen=True)
class MeshFit(Shown):
    """One rank's step per placement (``steps[label]``), all from one profile of ``model``."""

    model: str
    seq: int
    steps: dict[str, StepPeak]

    def terms(self) -> list[str]:
        """Every term of any column's peak event, in the order they first appear."""
        seen: dict[str, None] = {}
        for step in self.steps.values():
            seen.update(dict.fromkeys(k for k, v in step.peak.terms.items() if v))
        return list(seen)

    def __str__(self) -> str:
        row = "{:30}" + "{:>14}" * len(self.steps)

        def gb(x: int) -> str:
            return f"{x:,} B" if x < 10**6 else f"{x / GB:.4f}"

        lines = [
            f"{self.model}, b = 1, s = {self.seq}, fp32, eager attention, Adam; GB (10^9 bytes)",
            row.format("", *self.steps),
            row.format("params", *(gb(s.params) for s in self.steps.values())),
            row.format("grads", *(gb(s.grads) for s in self.steps.values())),
            row.format(
                "optimizer (Adam m, v, step)", *(gb(s.optimizer) for s in self.steps.values())
            ),
            "at the peak:",
        ]
        for term in self.terms():
            values = (s.peak.terms.get(term, 0) for s in self.steps.values())
            lines.append(row.format(f"  {term}", *(gb(v) if v else "-" for v in values)))
        lines.append(row.format("peak", *(gb(s.peak.total) for s in self.steps.values())))
        lines.append("where each peak is:")
        lines += [f"  {label:15}{s.peak.name}" for label, s in self.steps.items()]
        return "\n".join(lines)


def mesh_fit(model: str = "gpt2") -> MeshFit:
    """``model``'s step on every placement of ``PLACEMENTS``, rank by rank."""
    from placement_edu.peak_axes import derive_on_mesh
    from placement_edu.runtime.measurement.profiles import StepCase, get_profile

    seq = REFERENCE_SEQ[model]
    profile = get_profile(StepCase.of(model, 1, seq))[0]
    steps = {
        label: derive_on_mesh(model, profile, Mesh.parse(mesh), rank, "fp32", sequence_parallel=sp)
        for label, mesh, rank, sp in PLACEMENTS
    }
    return MeshFit(model, seq, steps)
