#!/usr/bin/env bash
# Session 13, final call F1 at merged main: the whole CUDA suite (default fences now 3), the drjit CUDA suite again, the seed.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "rev $(cat .device/rev)" > "$OUT/rev.txt"
timeout 330 python3 -m pytest -q -n 14 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine \
  > "$OUT/tests_cuda_final.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda_final.txt"
grep -E "^FAILED|^ERROR" "$OUT/tests_cuda_final.txt" | head -30; tail -2 "$OUT/tests_cuda_final.txt"
timeout 100 python3 -m pytest -q -n 14 -p no:cacheprovider -k cuda tests/drjit > /tmp/dj.txt 2>&1
echo "drjit repeat (default fences) rc=$? $(tail -1 /tmp/dj.txt)" | tee "$OUT/drjit_repeat_final.txt"; grep -E "^FAILED|^ERROR" /tmp/dj.txt | tee -a "$OUT/drjit_repeat_final.txt"
timeout 40 torchrun --standalone --nnodes=1 --nproc_per_node=1 .device/seed/ddp_intersect_train.py > "$OUT/seed_1gpu_final.txt" 2>&1; echo "seed rc=$?"; tail -2 "$OUT/seed_1gpu_final.txt"
timeout 150 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 3 --trees ploc+q:8 \
  --json "$OUT/edges_default_final.jsonl" > "$OUT/edges_default_final.txt" 2>&1; echo "edges rc=$?"; grep -v '^{' "$OUT/edges_default_final.txt" | cut -c1-200
