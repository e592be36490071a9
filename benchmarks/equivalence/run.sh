#!/usr/bin/env bash
# Did the core's second pass (issue 7) keep the first wave's figures? Derive memory and schedule for
# every (strategy, mesh, model, micro-batches, precision, rank) of a grid with the old core (commit
# b5c1b83) and with this tree, each in its own process, and print "N of M cases identical" with every
# difference grouped and exemplified. Usage: bash benchmarks/equivalence/run.sh [OLD_COMMIT]
set -euo pipefail
cd "$(dirname "$0")/../.."
old_commit="${1:-b5c1b83}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/old"
git archive "$old_commit" placement_edu | tar -x -C "$work/old"
python="${PYTHON:-.venv/bin/python}"
PYTHONPATH="$work/old" "$python" benchmarks/equivalence/dump.py "$work/old.json" "$work/old"
PYTHONPATH="$PWD" "$python" benchmarks/equivalence/dump.py "$work/new.json" "$PWD"
"$python" benchmarks/equivalence/compare.py "$work/old.json" "$work/new.json"
