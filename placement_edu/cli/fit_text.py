"""``placement-edu fit``'s report: PyTorch's tracker's figures under the report's keys
(``measured``), and the text read from the report's dict (``cli/fit.py`` builds it, and ``--json``
prints it as it is): what was asked, the profile, predicted (beside measured) term by term, where
the peak is, and whether it fits."""

from __future__ import annotations

from placement_edu.mesh import Mesh
from placement_edu.models import every_kth
from placement_edu.peak import (
    RESHARD_AFTER_FORWARD,
    StepPeak,
    fsdp2_applies,
    tracker_peak_phase,
)
from placement_edu.units import fmt_bytes


def text(r: dict, peak: StepPeak, mesh: Mesh) -> str:
    """The whole report, as ``fit`` prints it without --json (``mesh``: the rank's, as resolved)."""
    fsdp, where = placed(r, mesh)
    lines = [*heading(r, where), *table(r, fsdp), "", f"the peak is at: {r['peak_at']}"]
    lines += [f"  {k:36} {fmt_bytes(v):>34}" for k, v in peak.peak.terms.items() if v]
    if r.get("reserved_estimate_bytes"):
        e = r["reserved_estimate"]
        lines.append(
            f"reserved, an estimate ({e['allocator']}): "
            f"{fmt_bytes(r['reserved_estimate_bytes'])} -- {e['source']}"
        )
    elif "skipped" in r.get("reserved_estimate", {}):
        lines.append(f"reserved: {r['reserved_estimate']['skipped']}")
    lines += ending(r)
    return "\n".join(lines)


def placed(r: dict, mesh: Mesh) -> tuple[bool, str]:
    """(whether FSDP2 shards the states, where the rank sits: its devices, or its mesh)."""
    fsdp = fsdp2_applies(r["devices"], r["precision"])
    kept = "" if RESHARD_AFTER_FORWARD[r["strategy"]] else ", blocks not resharded after forward"
    where = (
        f"FSDP2 (fully_shard per block + root{kept}) on {r['devices']} devices, rank {r['rank']}"
        if fsdp
        else "one device"
    )
    if r["mesh"] != f"data={r['devices']}":
        sp = ", sequence parallel" if r["sequence_parallel"] else ""
        if "schedule" in r:
            sp = f", {r['schedule']} over {r['micro_batches']} micro-batches"
        where = f"mesh {r['mesh']}{sp} (placement_edu.peak_axes), rank {r['rank']}"
        fsdp = fsdp2_applies(mesh.degree("data"), r["precision"])
    return fsdp, where


def heading(r: dict, where: str) -> list[str]:
    """What was asked (and which defaults filled it in), and what the profile measured."""
    p = r["profile"]
    defaults = f" (defaults: {', '.join(r['defaults_used'])})" if r["defaults_used"] else ""
    checkpointed = (
        f"; that is a block without recomputation: under {r['recompute']} one block in "
        f"{every_kth(r['recompute'])} is checkpointed and keeps what full recomputation keeps "
        "(its input)"
        if every_kth(r["recompute"])
        else ""
    )
    return [
        f"{r['model']}, {where}; {r['precision']}; b = {r['micro_batch']}, s = {r['seq']}, "
        f"{r['attention']} attention, recompute {r['recompute']}, {r['optimizer']}{defaults}",
        "profile (measured from the module under FakeTensorMode"
        f"{', cached' if p['cached'] else ''}): "
        f"a block keeps {fmt_bytes(p['block'])} ({fmt_bytes(p['block_tp_split'])} of it "
        "between column- and row-parallel layers: what tensor parallelism would split), "
        f"outside the blocks {fmt_bytes(p['outside'])}" + checkpointed,
        "",
    ]


def table(r: dict, fsdp: bool) -> list[str]:
    """Predicted, and measured with their ratio where --verify measured them, term by term."""
    m = r.get("measured")
    memory = r["memory"]
    after = "activations+temps at peak" if "schedule" in r else "activations after forward"
    rows = [
        ("params" + (" (sharded, padded)" if fsdp else ""), memory["params"], "params"),
        ("grads" + (" (sharded)" if fsdp else ""), memory["grads"], "grads"),
        ("optimizer (Adam m, v, step)", memory["optimizer"], "optimizer"),
        (after, memory["activations"], "activations"),
    ]
    measured = [m and m["memory"][key] for _, _, key in rows]
    totals = ("forward_backward_peak_bytes", "step_peak_bytes", "peak_bytes")
    names = ("forward/backward peak", "optimizer-step peak", "peak")
    witness = f"measured ({m['device']})" if m and "device" in m else "measured (PyTorch tracker)"
    lines = [f"{'':30} {'predicted':>34}" + (f" {witness:>34} {'ratio':>8}" if m else "")]
    pairs = [(name, pred, meas) for (name, pred, _), meas in zip(rows, measured)]
    pairs += [(name, r[key], m and m[key]) for name, key in zip(names, totals)]
    for name, pred, meas in pairs:
        line = f"{name:30} {fmt_bytes(pred):>34}"
        if m:
            assert meas is not None  # measured: every row has the tracker's figure
            line += f" {fmt_bytes(meas):>34} {pred / meas if meas else float('nan'):>8.4f}"
        lines.append(line)
    return lines


def ending(r: dict) -> list[str]:
    """Where the measurement's peak is, a context rank's buffers, and whether it fits."""
    m, lines = r.get("measured"), []
    if m and "device" in m:
        lines += [
            f"the GPU's peak is in: {m['peak_at']}; CUDA's allocator reserved at most "
            f"{fmt_bytes(m['reserved_peak'])} (its cache: what nvidia-smi shows)"
        ]
    elif m:
        lines += [f"the tracker's peak is in: {m['peak_at']}; its categories there:"]
        lines += [f"  {k:36} {fmt_bytes(v):>34}" for k, v in m["memory"]["transients"].items()]
    if "context" in r:
        cx, (fw, bw) = r["context"], r["context"]["buffers"].values()
        lines.append(
            f"a context rank holds s/c = {cx['tokens_per_rank']:,} tokens; its attention "
            f"({r['context_attention']}) buffers in every block: forward {fmt_bytes(fw)}, "
            f"backward {fmt_bytes(bw)}"
        )
    if "fits" in r:
        lines.append(f"fits in {fmt_bytes(r['memory_bytes'])}: {'yes' if r['fits'] else 'no'}")
    for fix in r["would_fit_with"]:
        lines.append(
            f"  it would fit with {fix['flag']} {fix['value']}: peak {fmt_bytes(fix['peak_bytes'])}"
        )
    return lines


def measured(states: dict, snapshot: dict) -> dict:
    """The tracker's figures under the same keys (``peak_at`` names the phase, as the tracker
    does)."""
    persistent = {
        "Sharded Param",
        "Parameter",
        "Sharded Grad",
        "Gradient",
        "OptState",
        "Optstate",
        "Total",
        "Inputs",
        "Other",
        "Buffer",
    }
    fb, step = states["forward_backward_peak"], states["step_peak"]
    return {
        "memory": {
            "params": states["params"],
            "grads": states["grads"],
            "optimizer": states["optimizer"],
            "activations": states["activations"],
            "transients": {k: v for k, v in snapshot.items() if k not in persistent and v},
        },
        "peak_bytes": max(fb, step),
        "peak_at": tracker_peak_phase(fb, step),
        "forward_backward_peak_bytes": fb,
        "step_peak_bytes": step,
    }
