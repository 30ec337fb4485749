#!/usr/bin/env bash
# Session 16, call F3: nearest edges at final and baseline (default CUDA tree), then helper edges16's script.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD/src
timeout 130 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 3 --trees ploc+q:8 \
  --json "$OUT/edges_final.jsonl" > "$OUT/edges_final.txt" 2>&1; echo "edges final rc=$?"; grep -v '^{' "$OUT/edges_final.txt" | cut -c1-200
PYTHONPATH=/tmp/site:$PWD/.device/baseline/src timeout 130 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 3 --trees ploc+q:8 \
  --json "$OUT/edges_base.jsonl" > "$OUT/edges_base.txt" 2>&1; echo "edges base rc=$?"; grep -v '^{' "$OUT/edges_base.txt" | cut -c1-200
