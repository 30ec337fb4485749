#!/usr/bin/env bash
# Session 13, call C (main 9cc2020): layouts pair vs wide4 over PLOC and SAH trees beside Mitsuba; nearest-edge defaults.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 300 python3 benchmarks/traversal_ab.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
  --variants wide4:ploc,pair:ploc,wide4:sah,pair:sah --engines mitsuba --metrics closest_all,closest_minimal,update --repeats 20 --build-repeats 1 \
  --output "$OUT/traversal_ab_h200.json" > "$OUT/traversal_ab_h200.txt" 2>&1
echo "ab rc=$?"; grep -v "^{" "$OUT/traversal_ab_h200.txt" | tail -25 | cut -c1-200
timeout 240 python3 benchmarks/edges.py --device cuda --size full --brute-budget 2 --trees lbvh:8 ploc:8 --json "$OUT/edges_h200.jsonl" > "$OUT/edges_h200.txt" 2>&1
echo "edges rc=$?"; grep -v '^{' "$OUT/edges_h200.txt" | tail -30 | cut -c1-200
