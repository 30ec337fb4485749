#!/usr/bin/env bash
# Issue 18 ("update"), 17th session (helper trirefit17), one warm H100/H200, < 4 minutes.
# Assumes PYTHONPATH=/tmp/site:$PWD/src.   bash benchmarks/h200/s17_trirefit.sh
# 1. update_mesh_vertices + sync() of the CUDA defaults (PLOC + 4-wide nodes), terrain 2 M and bumpy
#    sphere 1 M, on one scene each, interleaved call by call (wide_refit.set_tri_refit):
#    "full"        = the fused refit of every structure (binary climb, ~21 levels; RAYD_TRI_REFIT=full);
#    "wide"        = THE DEFAULT since the first run (H100, results/h100-session17/tri.txt): one climb over
#                    the 4-wide tree, a thread per leaf (wide rows + leaf triangles only);
#    "wide_node"   = the same, a thread per wide node with leaf children;
#    "wide_levels" = no atomics or fences: a launch over the leaves, then one per wide depth (replayed).
#    With "wide*", the binary / per-face / pair boxes are completed when a query reads them ("complete"
#    = what the first closest_point / winding / all-hits query after such a sync pays; intersect and
#    shadow_test pay nothing). Beside Warp's wp.Mesh.refit on the same mesh (goal: update+sync <= 1.3 x
#    Warp). Every "ab" line must say "same ... True/True" (wide rows and leaf triangles bit-equal at once,
#    everything after complete()). First run (H100): full 1.026 / 0.683, wide 0.628 / 0.421 ms.
# 2. The CUDA suite (-k cuda over tests/engine, tests/torch, tests/drjit) with "wide" the default.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
echo "== update+sync A/B full / wide / wide_node / wide_levels (ms), CUDA defaults (kernels per call listed in the .txt)"
timeout 105 python3 benchmarks/h200/refit_orders.py --workloads terrain,sphere --tri-refits full,wide,wide_node,wide_levels \
  --warp --list --repeats 20 --json "$OUT/s17_trirefit.json" > "$OUT/s17_trirefit.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_trirefit.txt"; grep -E "^(ab|warp|terrain|sphere|rc)|FAILED|Error" "$OUT/s17_trirefit.txt"
echo "== the CUDA suite with the wide refit the default"
timeout 125 python3 -m pytest -q -p no:cacheprovider tests/engine tests/torch tests/drjit -k cuda \
  > "$OUT/s17_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s17_tests_cuda.txt" | head -20; tail -3 "$OUT/s17_tests_cuda.txt"
