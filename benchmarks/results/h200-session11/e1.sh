#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -p no:cacheprovider -k cuda tests/torch/test_fused_backward_ops.py tests/torch/test_fused_closest.py tests/torch/test_closest_fused.py tests/torch/test_edges_queries.py tests/engine/test_edge_bvh.py > "$OUT/tests_e1.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_e1.txt"
grep -E "^FAILED|^ERROR" "$OUT/tests_e1.txt" | head; tail -2 "$OUT/tests_e1.txt"
timeout 90 python3 benchmarks/h200/profile_update.py terrain > "$OUT/profile_update_terrain.txt" 2>&1; cat "$OUT/profile_update_terrain.txt" | cut -c1-150
timeout 90 python3 benchmarks/h200/kernel_breakdown.py terrain --rows 5 > "$OUT/kernels_terrain.txt" 2>&1; grep -A12 "^== " "$OUT/kernels_terrain.txt" | cut -c1-150 | head -60
timeout 100 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --only terrain_73k_65k --json "$OUT/edges_t73.jsonl" > "$OUT/edges_t73.txt" 2>&1; tail -8 "$OUT/edges_t73.txt" | cut -c1-200
