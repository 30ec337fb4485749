#!/usr/bin/env bash
# Issue 18 ("update"), 17th session (helper trirefit17), one warm H100/H200, < 4 minutes.
# Assumes PYTHONPATH=/tmp/site:$PWD/src.   bash benchmarks/h200/s17_trirefit.sh
# 1. update_mesh_vertices + sync() of the CUDA defaults (PLOC + 4-wide nodes), terrain 2 M and bumpy
#    sphere 1 M, on one scene each, interleaved call by call (wide_refit.set_tri_refit):
#    "full"      = today's fused refit of every structure (binary climb, ~21 levels);
#    "wide"      = one climb over the 4-wide tree, a thread per leaf (wide rows + leaf triangles only);
#    "wide_node" = the same, a thread per wide node with leaf children (no atomic under nodes of leaves);
#    "wide_levels" = no atomics or fences: a launch over the leaves, then one per wide depth (replayed).
#    With "wide*", the binary / per-face / pair boxes are completed when a query reads them ("complete"
#    = what the first closest_point / winding / all-hits query after such a sync pays; intersect and
#    shadow_test pay nothing). Beside Warp's wp.Mesh.refit on the same mesh (goal: update+sync <= 1.3 x
#    Warp). Every "ab" line must say "same ... True/True" (wide rows and leaf triangles bit-equal at once,
#    everything after complete()).
#    Decides: the faster wide variant becomes the default (RAYD_TRI_REFIT) iff its update+sync and refit
#    GPU medians are below full's on both meshes (ratio < 1).
# 2. CUDA tests of the wide refits and of the refit/update paths.
# 3. The A/B on Warp's host-SAH tree (one triangle per leaf), terrain (extra, if time is left).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
echo "== update+sync A/B full / wide / wide_node / wide_levels (ms), CUDA defaults (kernels per call listed in the .txt)"
timeout 120 python3 benchmarks/h200/refit_orders.py --workloads terrain,sphere --tri-refits full,wide,wide_node,wide_levels \
  --warp --list --repeats 30 --json "$OUT/s17_trirefit.json" > "$OUT/s17_trirefit.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_trirefit.txt"; grep -E "^(ab|warp|terrain|sphere|rc)|FAILED|Error" "$OUT/s17_trirefit.txt"
echo "== CUDA tests of the wide refits and the refit/update paths"
# (engine-level bit-equality first: its kernels are compiled by step 1; then the query tests, which compile
#  the closest-hit, closest-point and nearest-edge kernels, PLOC trees only)
timeout 90 python3 -m pytest -q -p no:cacheprovider -x tests/engine/test_wide_refit.py tests/engine/test_refit_update.py \
  -k "cuda and (wide_refit_equals_full or refit_equals_fresh_build or (queries_after_wide_refit and ploc) or instances_keeps)" \
  > "$OUT/s17_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s17_tests_cuda.txt" | head; tail -3 "$OUT/s17_tests_cuda.txt"
echo "== the same A/B on the host-SAH tree (terrain)"
timeout 28 python3 benchmarks/h200/refit_orders.py --workloads terrain --builders sah --layouts wide4 \
  --tri-refits full,wide,wide_node,wide_levels --repeats 10 > "$OUT/s17_trirefit_sah.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_trirefit_sah.txt"; grep -E "^(ab|rc)|FAILED|Error" "$OUT/s17_trirefit_sah.txt"
