#!/usr/bin/env bash
# Session 13, final call F2 at merged main: run.py beside Mitsuba and Warp, instances, memory, layouts x trees, update + sync (helper gpu18).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 150 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
  --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 3 --no-progress --output "$OUT/run_h200_final.jsonl" > "$OUT/run_h200_final.txt" 2>&1
echo "run rc=$?"; grep "^|" "$OUT/run_h200_final.txt" | cut -c1-230
timeout 90 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances_h200_final.jsonl" > /tmp/inst.txt 2>&1
echo "inst rc=$?"; python3 -c "
import json
for l in open('$OUT/instances_h200_final.jsonl'):
    d=json.loads(l); print({k:round(v,3) if isinstance(v,float) else v for k,v in d.items() if k.endswith('_ms')})"
timeout 60 python3 benchmarks/memory.py --device cuda --json "$OUT/memory_h200_final.jsonl" > "$OUT/memory_h200_final.txt" 2>&1
echo "mem rc=$?"; grep -iE "total|peak|B/tri  accel.flat.wide" "$OUT/memory_h200_final.txt" | head -8 | cut -c1-200
timeout 150 python3 benchmarks/traversal_ab.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
  --variants wide4,pair,wide4:sah --engines mitsuba --metrics closest_all,closest_minimal,any_hit,update --repeats 20 --build-repeats 1 \
  --output "$OUT/traversal_ab_final.json" > "$OUT/traversal_ab_final.txt" 2>&1
echo "ab rc=$?"; grep -E "^\*\*|^\| " "$OUT/traversal_ab_final.txt" | cut -c1-200
timeout 120 python3 benchmarks/h200/refit_orders.py --builders auto --layouts auto,pair --warp --list \
  --json "$OUT/refit_final.json" > "$OUT/refit_final.txt" 2>&1; echo "refit rc=$?"; grep -vE "^\s+[0-9.]+ +us" "$OUT/refit_final.txt" | tail -20 | cut -c1-200
timeout 60 python3 benchmarks/update_census.py --device cuda --size 1024 > "$OUT/update_census_final.txt" 2>&1; echo "census rc=$?"; tail -6 "$OUT/update_census_final.txt" | cut -c1-200
