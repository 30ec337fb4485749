#!/usr/bin/env bash
# Issue 11 on one warm H200 (wheels under /tmp/site, see ../shared/device/stage_wheels.sh):
#   bash benchmarks/h200/edges_issue11.sh tests|ab|refit|bench   (any several, in order)
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for what in "$@"; do
case "$what" in
  tests)
    timeout 200 python3 -m pytest -q -p no:cacheprovider -k cuda tests/engine/test_edge_bvh.py tests/engine/test_edge_lbvh.py \
      tests/engine/test_edge_tree_refit.py tests/torch/test_edges_queries.py > "$OUT/tests_edges_cuda.txt" 2>&1
    echo "rc=$?" >> "$OUT/tests_edges_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/tests_edges_cuda.txt" | head; tail -2 "$OUT/tests_edges_cuda.txt" ;;
  ab)
    timeout 240 python3 benchmarks/edge_search_ab.py --device cuda --trees lbvh:8 sah:4 --maxreg 0 48 64 --block 256 128 \
      --json "$OUT/edge_search_ab.jsonl" > "$OUT/edge_search_ab.txt" 2>&1; cut -c1-230 "$OUT/edge_search_ab.txt" ;;
  refit)
    timeout 120 python3 benchmarks/edge_refit_ab.py --device cuda --trees lbvh:8 lbvh:4 sah:4 \
      --json "$OUT/edge_refit_ab.jsonl" > "$OUT/edge_refit_ab.txt" 2>&1; cat "$OUT/edge_refit_ab.txt" ;;
  bench)
    timeout 420 python3 benchmarks/edges.py --device cuda --size full --brute-budget 2 --trees lbvh:4 lbvh:8 sah:4 \
      --json "$OUT/edges_h200.jsonl" > "$OUT/edges_h200.txt" 2>&1; grep -v '^{' "$OUT/edges_h200.txt" | cut -c1-230 ;;
esac
done
