#!/usr/bin/env bash
# Session 20, lead: the goal rows of issues 18 and 11 on one warm H200 at the defaults chosen from s19_all.sh's run
# (build switches on, wide_blas instance walk, pruned+v2 segment tests, wide3l edge refit).
#   bash benchmarks/h200/s20_rows.sh A   # -k cuda suite (tests/torch, tests/drjit, tests/engine), run.py rayd / Warp SAH /
#                                        # Mitsuba (terrain 2 M, sphere 1 M, 4 M rays), instances.py with Mitsuba   (< 560 s)
#   bash benchmarks/h200/s20_rows.sh B   # edges.py (ploc+q:8), memory.py (16 M rays), edge refit, the seed            (< 500 s)
# Assumes PYTHONPATH=/tmp/site:$PWD/src (wheels incl. Mitsuba unpacked there) and the repository root as working directory.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader; git rev-parse --short HEAD 2>/dev/null; } | tee $OUT/gpu_$1.txt
W=terrain_C1024_S2048,sphere_1M_4Mrays
case "$1" in
A)
  timeout 180 python3 -m pytest -q -n 15 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine > $OUT/tests_cuda.txt 2>&1; echo rc=$? >> $OUT/tests_cuda.txt
  grep -E "^FAILED|^ERROR" $OUT/tests_cuda.txt | head -20 | cut -c1-200; tail -2 $OUT/tests_cuda.txt
  timeout 200 python3 benchmarks/run.py --device cuda --workloads $W --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 5 \
    --no-progress --output "$OUT/run.jsonl" > "$OUT/run.txt" 2>&1; echo "run rc=$?"; grep "^|" "$OUT/run.txt" | cut -c1-200
  timeout 120 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances.jsonl" > $OUT/instances.txt 2>&1; echo "inst rc=$?"
  python3 -c "
import json
for l in open('$OUT/instances.jsonl'):
    d=json.loads(l); print({k:round(v,3) if isinstance(v,float) else v for k,v in d.items() if k.endswith('_ms')})" ;;
B)
  timeout 150 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 5 --trees ploc+q:8 \
    --json "$OUT/edges.jsonl" > "$OUT/edges.txt" 2>&1; echo "edges rc=$?"; grep -v '^{' "$OUT/edges.txt" | cut -c1-200
  timeout 150 python3 benchmarks/memory.py --device cuda --json "$OUT/memory.jsonl" > "$OUT/memory.txt" 2>&1; echo "memory rc=$?"; tail -15 "$OUT/memory.txt" | cut -c1-200
  timeout 60 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 --modes wide3 wide3l wide3 wide3l --reps 30 > $OUT/edge_refit.txt 2>&1; echo "edge refit rc=$?"
  sed -E "s/leaves +[0-9]+ depth +[0-9]+ //; s/ \(synchronised\)//" $OUT/edge_refit.txt | cut -c1-200 | tail -8
  echo "== seed"; timeout 40 torchrun --nproc_per_node=1 ${SEED:-../shared/seed/ddp_intersect_train.py} > $OUT/seed_1gpu.txt 2>&1; echo rc=$? >> $OUT/seed_1gpu.txt; tail -2 $OUT/seed_1gpu.txt ;;
esac
