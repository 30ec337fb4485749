#!/usr/bin/env bash
# Session 16, call F2: run.py (rayd, Warp SAH, Mitsuba) at final, rayd at baseline 0599f97 in the same machine; instances both.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=terrain_C1024_S2048,sphere_1M_4Mrays
export PYTHONPATH=/tmp/site:$PWD/src
timeout 170 python3 benchmarks/run.py --device cuda --workloads $W --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 3 \
  --no-progress --output "$OUT/run_final.jsonl" > "$OUT/run_final.txt" 2>&1; echo "run final rc=$?"; grep "^|" "$OUT/run_final.txt" | cut -c1-200
PYTHONPATH=/tmp/site:$PWD/.device/baseline/src timeout 110 python3 benchmarks/run.py --device cuda --workloads $W --engines rayd --repeats 20 --build-repeats 3 \
  --no-progress --output "$OUT/run_base.jsonl" > "$OUT/run_base.txt" 2>&1; echo "run base rc=$?"; grep "^|" "$OUT/run_base.txt" | cut -c1-200
for lab in final base; do
  if [ $lab = base ]; then P=/tmp/site:$PWD/.device/baseline/src; M=""; else P=/tmp/site:$PWD/src; M=--mitsuba; fi
  PYTHONPATH=$P timeout 100 python3 benchmarks/instances.py --device cuda $M --json "$OUT/instances_$lab.jsonl" > /tmp/inst_$lab.txt 2>&1
  echo "inst $lab rc=$?"
done
python3 -c "
import json
for f in ('final','base'):
    for l in open('$OUT/instances_'+f+'.jsonl'):
        d=json.loads(l); print(f, {k:round(v,3) if isinstance(v,float) else v for k,v in d.items() if k.endswith('_ms')})"
