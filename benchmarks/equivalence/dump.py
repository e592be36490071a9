"""Dump memory + schedule of every (strategy, mesh, model, micro_batches, precision, rank) case.

Usage: PYTHONPATH=<tree> python dump.py OUT.json EXPECTED_TREE_DIR (run.sh does it all)
Run once per tree, in separate processes.
"""
import json
import os
import sys
from collections import Counter
from fractions import Fraction

out_path, expected_tree = sys.argv[1], os.path.realpath(sys.argv[2])

import placement_edu  # noqa: E402

where = os.path.realpath(placement_edu.__file__)
if not where.startswith(expected_tree + os.sep):
    sys.exit(f"wrong tree imported: {where} (expected under {expected_tree})")
print("imported", where, file=sys.stderr)

from placement_edu import (COMPOSITIONS, PRESETS, STRATEGIES, ModelSpec,  # noqa: E402
                           TransformerSpec, analyze, get_precision)
from placement_edu.mesh import Mesh  # noqa: E402

# Strategy names present in the OLD tree (b5c1b83); strategies new in the new tree are not compared.
OLD_STRATEGIES = ["dp", "zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op", "zero2_offload",
                  "zero3_offload", "tp", "pp"]
OLD_COMPOSITIONS = ["dp×tp", "dp×pp", "zero1×tp×pp", "zero3×tp", "hsdp"]
# Presets common to both trees' PRESETS.
PRECISIONS = ["mixed_adam", "fp32_adam", "mixed_adam_fp32_grads", "fp64_adam", "sgd_momentum",
              "mixed_sgd_momentum", "fp64_sgd_momentum"]
SINGLE_DEVICES = [2, 4, 8, 64]
COMPOSITION_MESHES = ["data=2,tensor=2", "data=2,pipeline=2", "data=4,tensor=2",
                      "data=2,tensor=2,pipeline=2", "replica=2,data=4"]
MICRO_BATCHES = [1, 4]
MODELS = {
    "psi7.5e9": ModelSpec(psi=7_500_000_000),
    "tf_L8_h1024": TransformerSpec(layers=8, hidden=1024, heads=16, seq=512, vocab=32000, micro_batch=1),
}

for name in PRECISIONS:
    assert name in PRESETS, name
named = {**STRATEGIES, **COMPOSITIONS}
for name in OLD_STRATEGIES + OLD_COMPOSITIONS:
    assert name in named, name


def plain(x):
    """Exact value as JSON: int stays int, a non-integer Fraction becomes 'p/q'."""
    f = Fraction(x)
    return int(f) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def op_key(o):
    return {"op": o.op, "state": o.state.value, "axis": o.axis, "phase": o.phase,
            "payload_bytes": plain(o.payload_bytes), "ring_bytes": plain(o.ring_bytes),
            "group": o.group, "micro_batches": list(o.micro_batches), "stale": bool(o.stale)}


def record(report):
    m, s = report.memory, report.schedule
    keys = [json.dumps(op_key(o), sort_keys=True) for o in s.ops]
    counts = Counter(keys)
    per_step = [o for o in s.ops if o.phase != "startup"]
    return {
        "memory": {
            "device": {st.value: plain(v) for st, v in m.device.items()},
            "host": {st.value: plain(v) for st, v in m.host.items()},
            "transient": {ph: {k: plain(v) for k, v in terms.items()} for ph, terms in m.transient.items()},
            "model_state": plain(m.model_state),
            "peak": plain(m.peak),
            "peak_phase": m.peak_phase,
            "padding_elements": m.padding,
        },
        "comm": {
            "ops": [dict(json.loads(k), count=c) for k, c in sorted(counts.items())],
            "order": keys,  # execution order (to detect pure reorderings)
            "ring_bytes": plain(s.ring_bytes),
            "ring_bytes_by_axis": {a: plain(v) for a, v in s.ring_bytes_by_axis().items()},
            "volume_psi": plain(s.volume_psi(report.model.psi)),
            # derived the same way in both trees (the old tree has no Schedule.host_link_bytes)
            "host_link_bytes": plain(sum((o.payload_bytes for o in per_step if o.op in ("h2d", "d2h")), 0)),
            "warnings": list(s.warnings),
        },
    }


def meshes_for(name, strategy):
    if name in OLD_STRATEGIES:
        out = []
        for n in SINGLE_DEVICES:
            try:
                out.append(str(strategy.default_mesh(n)))
            except Exception as e:  # noqa: BLE001
                out.append(f"default_mesh({n}) failed: {type(e).__name__}")
        return out + COMPOSITION_MESHES
    return COMPOSITION_MESHES


results = {}
for name in OLD_STRATEGIES + OLD_COMPOSITIONS:
    base = named[name]
    for mesh_text in meshes_for(name, base):
        for model_name, model in MODELS.items():
            for mb in MICRO_BATCHES:
                strategy = base.with_(micro_batches=mb)
                for prec in PRECISIONS:
                    world = Mesh.parse(mesh_text).world_size if "=" in mesh_text else 1
                    for rank in sorted({0, world - 1}):
                        key = f"{name}|{mesh_text}|{model_name}|mb={mb}|{prec}|rank={rank}"
                        try:
                            report = analyze(strategy, model, mesh=mesh_text, precision=get_precision(prec),
                                             rank=rank)
                            results[key] = record(report)
                        except Exception as e:  # noqa: BLE001
                            results[key] = {"error": f"{type(e).__name__}: {str(e)[:60]}",
                                            "error_full": f"{type(e).__name__}: {e}"}

with open(out_path, "w") as f:
    json.dump({"tree": where, "cases": results}, f, sort_keys=True, indent=0)
print(f"{len(results)} cases -> {out_path}", file=sys.stderr)
