#!/usr/bin/env bash
# Session 12 final call at merged main: CUDA tests with the new defaults (PLOC, ww walk, wide4), seed, rayd-only run.py, memory.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "rev $(cat .device/rev)" > "$OUT/rev.txt"
timeout 150 python3 -m pytest -q -n 12 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine \
  > "$OUT/tests_cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda.txt"
grep -E "^FAILED|^ERROR" "$OUT/tests_cuda.txt" | head -30; tail -2 "$OUT/tests_cuda.txt"
timeout 35 torchrun --standalone --nnodes=1 --nproc_per_node=1 .device/seed/ddp_intersect_train.py > "$OUT/seed_1gpu.txt" 2>&1; echo "seed rc=$?"; tail -2 "$OUT/seed_1gpu.txt"
: timeout 60 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
  --engines rayd --repeats 10 --build-repeats 3 --no-progress --output "$OUT/run_rayd_h200.jsonl" > "$OUT/run_rayd_h200.txt" 2>&1
echo "run rc=$?"; grep "^|" "$OUT/run_rayd_h200.txt" | cut -c1-250
: timeout 40 python3 benchmarks/memory.py --device cuda --json "$OUT/memory_h200.jsonl" > "$OUT/memory_h200.txt" 2>&1
echo "mem rc=$?"; tail -6 "$OUT/memory_h200.txt" | cut -c1-250
