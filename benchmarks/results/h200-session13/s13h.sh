#!/usr/bin/env bash
# Session 13, final call F3 at merged main: nearest-edge trees and wide walks (helper edges11), their CUDA tests, PLOC leaf/radius under wide4.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 100 python3 -m pytest -q -n 8 -p no:cacheprovider tests/engine/test_edge_wide.py tests/torch/test_edges_device_parity.py \
  tests/torch/test_edges_ploc.py tests/torch/test_edges_queries.py tests/engine/test_edge_bvh.py -k cuda -rxX > "$OUT/edges_tests_final.txt" 2>&1
echo "edge tests rc=$?"; grep -E "^FAILED|^XPASS|^ERROR" "$OUT/edges_tests_final.txt" | head; tail -1 "$OUT/edges_tests_final.txt"
timeout 240 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --trees lbvh:8 ploc:8 ploc+w:8 ploc+q:8 ploc+qs:8 lbvh+qs:8 \
  --json "$OUT/edges_wide_final.jsonl" > "$OUT/edges_wide_final.txt" 2>&1; echo "edges rc=$?"; grep -v '^{' "$OUT/edges_wide_final.txt" | cut -c1-200
W=terrain_C1024_S2048,sphere_1M_4Mrays
for env in "RAYD_PLOC_LEAF_SIZE=1" "RAYD_PLOC_LEAF_SIZE=2" "RAYD_PLOC_RADIUS=1"; do
  echo "== $env" >> "$OUT/ploc_wide4.txt"
  env $env timeout 60 python3 benchmarks/traversal_ab.py --device cuda --workloads $W --variants wide4,pair --engines '' \
    --metrics closest_all,closest_minimal,build --repeats 20 --build-repeats 3 2>&1 | grep -E "^\*\*|^\| (closest|build)" >> "$OUT/ploc_wide4.txt"
done
cat "$OUT/ploc_wide4.txt"
