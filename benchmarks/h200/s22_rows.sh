#!/usr/bin/env bash
# Session 22, lead: the goal rows of issues 18 and 11 at main after the suite call (s22_first.sh): run.py rayd / Warp SAH /
# Mitsuba (terrain 2 M, sphere 1 M, 4 M rays; medians of 20, builds of 5), instances.py with Mitsuba, edges.py (ploc+q:8).
# Assumes /tmp/site holds the wheels (Mitsuba included). Repository root. Under 560 s.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader; cat .device/rev; } | tee $OUT/gpu_rows.txt
W=terrain_C1024_S2048,sphere_1M_4Mrays
timeout 210 python3 benchmarks/run.py --device cuda --workloads $W --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 5 \
  --no-progress --output "$OUT/run.jsonl" > "$OUT/run.txt" 2>&1; echo "run rc=$?"; grep "^|" "$OUT/run.txt" | cut -c1-200
timeout 130 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances.jsonl" > $OUT/instances.txt 2>&1; echo "inst rc=$?"
python3 -c "
import json
for l in open('$OUT/instances.jsonl'):
    d=json.loads(l); print({k:round(v,3) if isinstance(v,float) else v for k,v in d.items() if k.endswith('_ms')})"
timeout 160 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 5 --trees ploc+q:8 \
  --json "$OUT/edges.jsonl" > "$OUT/edges.txt" 2>&1; echo "edges rc=$?"; grep -v '^{' "$OUT/edges.txt" | cut -c1-200
