"""Compare old.json and new.json written by dump.py.

Usage: python compare.py old.json new.json [--examples N] (run.sh does it all)
"""
import json
import re
import sys
from collections import Counter, defaultdict

old_path, new_path = sys.argv[1], sys.argv[2]
N_EX = int(sys.argv[sys.argv.index("--examples") + 1]) if "--examples" in sys.argv else 2
old = json.load(open(old_path))["cases"]
new = json.load(open(new_path))["cases"]

# op identity without bytes/count: what "the same op" means when bytes change
IDENT = ("op", "state", "axis", "phase", "group", "micro_batches", "stale")


def ident(o):
    return tuple(tuple(o[k]) if isinstance(o[k], list) else o[k] for k in IDENT)


def label(i):
    op, st, ax, ph, g, mbs, stale = i
    return f"{ph} {op} {st} on {ax} (group {g}{', mb' if mbs else ''}{', stale' if stale else ''})"


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def diff_case(a, b):
    """List of (aspect, example text) for two successful cases."""
    out = []
    fa, fb = flat(a["memory"], "memory."), flat(b["memory"], "memory.")
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k) != fb.get(k):
            kind = "added" if k not in fa else "removed" if k not in fb else "changed"
            out.append((f"{k} {kind}", f"{fa.get(k, '-')} -> {fb.get(k, '-')}"))
    # ops as multisets keyed by identity, summing count; bytes compared per identity
    def by_ident(ops):
        d = defaultdict(list)
        for o in ops:
            d[ident(o)].append(o)
        return d
    oa, ob = by_ident(a["comm"]["ops"]), by_ident(b["comm"]["ops"])
    for i in sorted(set(oa) | set(ob), key=str):
        la, lb = oa.get(i, []), ob.get(i, [])
        if la == lb:
            continue
        ca, cb = sum(o["count"] for o in la), sum(o["count"] for o in lb)
        if not la:
            o = lb[0]
            out.append((f"op added: {label(i)}", f"new x{cb}, payload {o['payload_bytes']} B, ring {o['ring_bytes']} B"))
        elif not lb:
            o = la[0]
            out.append((f"op removed: {label(i)}", f"old x{ca}, payload {o['payload_bytes']} B, ring {o['ring_bytes']} B"))
        else:
            pa = sorted((o["payload_bytes"], o["ring_bytes"], o["count"]) for o in la)
            pb = sorted((o["payload_bytes"], o["ring_bytes"], o["count"]) for o in lb)
            desc = lambda p: ", ".join(f"x{c} payload {pl} ring {r}" for pl, r, c in p)
            if ca != cb and {x[:2] for x in pa} == {x[:2] for x in pb}:
                out.append((f"op count changed: {label(i)}", f"x{ca} -> x{cb} ({desc(pa)})"))
            else:
                out.append((f"op bytes/count changed: {label(i)}", f"{desc(pa)} -> {desc(pb)}"))
    for k in ("ring_bytes", "volume_psi", "host_link_bytes"):
        if a["comm"][k] != b["comm"][k]:
            out.append((f"comm.{k} changed", f"{a['comm'][k]} -> {b['comm'][k]}"))
    if a["comm"]["ring_bytes_by_axis"] != b["comm"]["ring_bytes_by_axis"]:
        out.append(("comm.ring_bytes_by_axis changed",
                    f"{a['comm']['ring_bytes_by_axis']} -> {b['comm']['ring_bytes_by_axis']}"))
    if a["comm"]["warnings"] != b["comm"]["warnings"]:
        out.append(("warnings text changed",
                    f"{[w[:70] for w in a['comm']['warnings']]} -> {[w[:70] for w in b['comm']['warnings']]}"))
    if not out and a["comm"]["order"] != b["comm"]["order"]:
        out.append(("op order changed only", f"{len(a['comm']['order'])} ops, same multiset"))
    return out



PREFIX = re.compile(r"^(\w+): deriving .*? on [\w=,]+: ")


def reason(case):
    """The full refusal message without the new tree's 'deriving S (placement) on MESH: ' context."""
    return PREFIX.sub(r"\1: ", case.get("error_full", case["error"]))


def pattern(text):
    return re.sub(r"\d+", "N", text)


keys = sorted(set(old) | set(new))
only_one_file = [k for k in keys if (k in old) != (k in new)]
common = [k for k in keys if k in old and k in new]

identical = 0
both_same_reason, both_diff_reason = [], []
refused_one = defaultdict(list)            # (which, reason pattern) -> keys
aspects = defaultdict(lambda: {"strategies": Counter(), "examples": []})
differing = 0
for k in common:
    a, b = old[k], new[k]
    strat = k.split("|")[0]
    if "error" in a and "error" in b:
        (both_same_reason if reason(a) == reason(b) else both_diff_reason).append(k)
        continue
    if "error" in a or "error" in b:
        which = "old refuses, new derives" if "error" in a else "new refuses, old derives"
        refused_one[(which, pattern(reason(a if "error" in a else b)))].append(k)
        continue
    d = diff_case(a, b)
    if not d:
        identical += 1
        continue
    differing += 1
    for aspect, ex in d:
        g = aspects[aspect]
        g["strategies"][strat] += 1
        if len([e for e in g["examples"] if e[0].split("|")[0] == strat]) < 1 and len(g["examples"]) < 6:
            g["examples"].append((k, ex))

M = len(common)
n_both = len(both_same_reason) + len(both_diff_reason)
print(f"{identical} of {M} cases identical (derived by both trees, byte-identical memory, op multiset, "
      f"totals, warnings and op order)")
print(f"  derived by both: {identical + differing} ({identical} identical, {differing} differing); "
      f"refused in one only: {sum(len(v) for v in refused_one.values())}; refused by both: {n_both} "
      f"({len(both_same_reason)} same reason, {len(both_diff_reason)} different reason)")
print(f"  => same outcome (identical or both refused): {identical + n_both} of {M}")
if only_one_file:
    print(f"  keys present in one file only: {len(only_one_file)}")


def summarize(ks):
    strat = Counter(k.split("|")[0] for k in ks)
    meshes = sorted({k.split("|")[1] for k in ks})
    models = sorted({k.split("|")[2] for k in ks})
    return f"strategies {dict(strat)}; meshes {meshes}; models {models}"


print("\n== refused in one tree only ==")
for (which, pat), ks in sorted(refused_one.items(), key=lambda kv: -len(kv[1])):
    ex = ks[0]
    print(f"[{which}] {len(ks)} cases: {summarize(ks)}\n    reason: {pat[:160]}\n    e.g. {ex}: "
          f"{reason(old[ex] if 'error' in old[ex] else new[ex])[:200]}")

print("\n== refused by both for a different reason ==")
groups = defaultdict(list)
for k in both_diff_reason:
    groups[(pattern(reason(old[k])), pattern(reason(new[k])))].append(k)
for (po, pn), ks in sorted(groups.items(), key=lambda kv: -len(kv[1])):
    print(f"  {len(ks)} cases: {summarize(ks)}\n    old: {po[:150]}\n    new: {pn[:150]}")

print("\n== differences in cases derived by both (aspect: strategies with case counts) ==")
for aspect in sorted(aspects, key=lambda a: (-sum(aspects[a]["strategies"].values()), a)):
    g = aspects[aspect]
    print(f"* {aspect}: {dict(g['strategies'])}")
    for k, ex in g["examples"][:N_EX]:
        print(f"    {k}: {ex}")
