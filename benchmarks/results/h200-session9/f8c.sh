#!/usr/bin/env bash
# H200 call C: edges (trees compared), instances beside Mitsuba.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 330 python3 benchmarks/edges.py --device cuda --size full --brute-budget 3 --json "$OUT/edges_h200.jsonl" > "$OUT/edges_h200.txt" 2>&1; echo "edges rc=$?"; tail -30 "$OUT/edges_h200.txt" | cut -c1-220
timeout 200 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances_h200.jsonl" > "$OUT/instances_h200.txt" 2>&1; echo "inst rc=$?"; tail -12 "$OUT/instances_h200.txt" | cut -c1-220
