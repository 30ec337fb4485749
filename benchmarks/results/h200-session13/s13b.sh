#!/usr/bin/env bash
# Session 13, call B (main 9cc2020, the CUDA defaults PLOC + ww + wide4): run.py beside Mitsuba and Warp, instances beside Mitsuba, memory.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 330 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
  --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 3 --no-progress --output "$OUT/run_h200.jsonl" > "$OUT/run_h200.txt" 2>&1
echo "run rc=$?"; grep "^|" "$OUT/run_h200.txt" | cut -c1-230
timeout 130 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances_h200.jsonl" > "$OUT/instances_h200.txt" 2>&1
echo "inst rc=$?"; tail -12 "$OUT/instances_h200.txt" | cut -c1-230
timeout 100 python3 benchmarks/memory.py --device cuda --json "$OUT/memory_h200.jsonl" > "$OUT/memory_h200.txt" 2>&1
echo "mem rc=$?"; tail -12 "$OUT/memory_h200.txt" | cut -c1-230
