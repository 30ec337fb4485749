#!/usr/bin/env bash
# Session 12, call B: benchmarks side by side with Mitsuba and Warp (run.py), instances with Mitsuba, memory.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 300 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
  --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 1 --no-progress --output "$OUT/run_h200.jsonl" > "$OUT/run_h200.txt" 2>&1
echo "run rc=$?"; tail -30 "$OUT/run_h200.txt" | cut -c1-250
timeout 120 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances_h200.jsonl" > "$OUT/instances_h200.txt" 2>&1
echo "inst rc=$?"; tail -15 "$OUT/instances_h200.txt" | cut -c1-250
timeout 90 python3 benchmarks/memory.py --device cuda --json "$OUT/memory_h200.jsonl" > "$OUT/memory_h200.txt" 2>&1
echo "mem rc=$?"; tail -15 "$OUT/memory_h200.txt" | cut -c1-250
