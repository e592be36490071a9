"""What the gather units move (issue 25, item 2), today's figures for the lead.

(k) An abstract model gathers one layer at a time by default (``ModelSpec``'s ``gather_units``
    0 = one per layer); a bare Ψ (``as_model``, ``table --params``) takes the layers of the
    nearest published shape, ``models.per_layer_model``. Gathered as one whole-model unit
    instead, docs/cli.md's first table would show zero3's peak above zero2's.
(l) The gather window holds two units: the one computing and the next, prefetched (Zhao et al.
    2023, "PyTorch FSDP", §3.3; ``models.prefetched_window``).
A pipeline stage's units are its own layers (``models.stage_units``), not 1/p of one: the
planner's 70B ranking shows the peaks with both.

Run: .venv/bin/python benchmarks/whatif_gather_units.py
"""

from __future__ import annotations

from placement_edu import ModelSpec, analyze, plan
from placement_edu.planner import default_transformer
from placement_edu.models import per_layer_model
from placement_edu.units import GB

STRATEGIES = ("dp", "zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op")


def readme_table(psi: int, devices: int) -> None:
    model = per_layer_model(psi)
    whole = ModelSpec(psi, layers=model.layers, gather_units=1)
    print(f"(k, l) docs/cli.md's table, Ψ = {psi:,}, N = {devices}: peak in GB")
    print(f"{'strategy':14s} {'one unit':>12s} {f'{model.layers} units':>12s}")
    for name in STRATEGIES:
        one = analyze(name, whole, devices).memory.peak
        per_layer = analyze(name, model, devices).memory.peak
        print(f"{name:14s} {float(one) / GB:12.6g} {float(per_layer) / GB:12.6g}")


def planner_top(psi: int, devices: int, budget: int) -> None:
    shape, assumption = default_transformer(psi)
    result = plan(shape, devices, budget, "h100-nvlink-ib", assumption=assumption)
    print(f"\nthe planner's top 5, Ψ = {psi:.3g}, {devices} H100s, {budget / GB:g} GB: peak GB")
    for choice in result.ranked[:5]:
        print(f"  {choice.label():84s} {choice.peak_bytes / GB:7.2f}")


if __name__ == "__main__":
    readme_table(7_500_000_000, 64)
    planner_top(70 * 10**9, 64, 80 * 10**9)
