#!/usr/bin/env bash
# Session 18, lead: re-measure the goal rows of issues 18 and 11 on one H200 at REV (wide refit now the default):
# run.py (rayd, Warp SAH, Mitsuba) terrain 2M / sphere 1M, instances.py with Mitsuba, edges.py (ploc+q:8), the edge refit modes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; cat REV 2>/dev/null; } | tee $OUT/gpu_b.txt
W=terrain_C1024_S2048,sphere_1M_4Mrays
timeout 170 python3 benchmarks/run.py --device cuda --workloads $W --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 3 \
  --no-progress --output "$OUT/run.jsonl" > "$OUT/run.txt" 2>&1; echo "run rc=$?"; grep "^|" "$OUT/run.txt" | cut -c1-220
timeout 100 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances.jsonl" > $OUT/instances.txt 2>&1; echo "inst rc=$?"
python3 -c "
import json
for l in open('$OUT/instances.jsonl'):
    d=json.loads(l); print({k:round(v,3) if isinstance(v,float) else v for k,v in d.items() if k.endswith('_ms')})"
timeout 130 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 3 --trees ploc+q:8 \
  --json "$OUT/edges.jsonl" > "$OUT/edges.txt" 2>&1; echo "edges rc=$?"; grep -v '^{' "$OUT/edges.txt" | cut -c1-200
timeout 60 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 --modes 1 split wide3 split wide3 --reps 15 > $OUT/edge_refit.txt 2>&1; echo "edge refit rc=$?"
sed -E "s/leaves +[0-9]+ depth +[0-9]+ //; s/ \(synchronised\)//" $OUT/edge_refit.txt | cut -c1-200
