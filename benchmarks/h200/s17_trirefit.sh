#!/usr/bin/env bash
# Issue 18 ("update"), 17th session (helper trirefit17), one warm H100/H200, < 4 minutes.
# Assumes PYTHONPATH=/tmp/site:$PWD/src.   bash benchmarks/h200/s17_trirefit.sh
# 1. update_mesh_vertices + sync() of the CUDA defaults (PLOC + 4-wide nodes), terrain 2 M and bumpy
#    sphere 1 M, on one scene each, interleaved call by call: "full" = today's fused refit of every
#    structure (binary climb); "wide" = RAYD_TRI_REFIT=wide, one climb over the 4-wide tree (wide rows +
#    leaf triangles), the binary / per-face / pair boxes completed when a query reads them. Beside
#    Warp's wp.Mesh.refit on the same mesh (goal: update+sync <= 1.3 x Warp). Every "ab" line must say
#    "same True/True" (wide rows and leaf triangles equal at once, everything after complete()).
#    "complete" = what the first closest_point / winding / all-hits query after a wide sync pays.
#    Decides: the wide refit becomes the default iff its update+sync and refit GPU medians are below
#    full's on both meshes (ratio wide/full < 1).
# 2. The same on Warp's host-SAH tree (one triangle per leaf: the binary climb's worst case), terrain.
# 3. CUDA tests of the wide refit, the refit/update tests and the wide layout.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
echo "== update+sync A/B full vs wide (ms), CUDA defaults, with --list of the kernels"
timeout 140 python3 benchmarks/h200/refit_orders.py --workloads terrain,sphere --tri-refits full,wide,wide_node --warp --list \
  --repeats 30 --json "$OUT/s17_trirefit.json" > "$OUT/s17_trirefit.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_trirefit.txt"; grep -E "^(ab|warp|terrain|sphere|rc)|FAILED|Error" "$OUT/s17_trirefit.txt"
echo "== the same on the host-SAH tree (terrain)"
timeout 60 python3 benchmarks/h200/refit_orders.py --workloads terrain --builders sah --layouts wide4 --tri-refits full,wide,wide_node \
  --repeats 20 --json "$OUT/s17_trirefit_sah.json" > "$OUT/s17_trirefit_sah.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_trirefit_sah.txt"; grep -E "^(ab|rc)|FAILED|Error" "$OUT/s17_trirefit_sah.txt"
echo "== CUDA tests of the wide refit and the refit/update paths"
timeout 90 python3 -m pytest -q -p no:cacheprovider -x tests/engine/test_wide_refit.py tests/engine/test_refit_update.py \
  tests/engine/test_fused_refit.py -k cuda > "$OUT/s17_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s17_tests_cuda.txt" | head; tail -3 "$OUT/s17_tests_cuda.txt"
