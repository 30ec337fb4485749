#!/usr/bin/env bash
# Issue 11, 16th session (helper edges16), one warm H200, < 4 minutes. Assumes PYTHONPATH=/tmp/site:$PWD/src.
#   bash benchmarks/h200/s16_edges.sh
# 1. Edge refit of the CUDA default tree (ploc+q:8) and of ploc+qs:8, one process per workload list:
#    "split" = today's three launches (slots, leaf climb, compressed-node refresh), "fused" = slots launch +
#    climb that writes the compressed nodes, "fused1" = all in one launch (leaf threads gather their
#    segments); mode "1" = the binary tree's two-launch refit alone (no wide refresh), for reference.
#    Goal: terrain 2 M <= 0.3 ms. Every row must say "same True" (identical boxes / compressed rows).
# 2. Seeded wide point search (RAYD_EDGE_SEED / edge_wide_walk.SEED_STRIDE): seed 0 = today's one launch;
#    32 / 8 = every 32nd / 8th Morton-sorted query answered first, the others start from its edge's distance.
#    1 M points, ploc+q:8 (the CUDA default), median of 7; "same True" = the same edges as seed 0.
# 3. CUDA tests of the fused refit and the seeded search (answers == unseeded / fresh build / float64 brute force).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
echo "== refit (ms, median of 30 synchronised / back to back)"
timeout 110 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 ploc+qs:8 \
  --modes 1 split fused fused1 split fused fused1 --reps 30 \
  --json "$OUT/s16_edge_refit.jsonl" > "$OUT/s16_edge_refit.txt" 2>&1
echo "rc=$?" >> "$OUT/s16_edge_refit.txt"; cat "$OUT/s16_edge_refit.txt"
echo "== seeded search (ms)"
timeout 75 python3 benchmarks/edge_search_ab.py --device cuda --trees ploc+q:8 --maxreg 64 --block 128 \
  --seed 0 32 8 0 32 8 --reps 7 --json "$OUT/s16_edge_seed.jsonl" > "$OUT/s16_edge_seed.txt" 2>&1
echo "rc=$?" >> "$OUT/s16_edge_seed.txt"; cut -c1-26,84-230 "$OUT/s16_edge_seed.txt"
echo "== CUDA tests of the fused refit and the seeded search"
timeout 50 python3 -m pytest -q -p no:cacheprovider -x tests/engine/test_edge_refit_fused.py tests/engine/test_edge_seed.py -k cuda \
  > "$OUT/s16_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s16_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s16_tests_cuda.txt" | head; tail -3 "$OUT/s16_tests_cuda.txt"
