#!/usr/bin/env bash
# H200 call: CUDA tests of what changed after 55de6d3, surface (fused closest point), run.py terrain/sphere.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -v -p no:cacheprovider -k cuda tests/torch/test_closest_fused.py tests/torch/test_fused_closest.py \
  tests/torch/test_fused_backward_ops.py tests/torch/test_interval_float64_walk.py tests/drjit/test_drjit_interval_float64_walk.py \
  tests/torch/test_camera.py tests/torch/test_camera_edges.py tests/torch/test_edges_queries.py tests/drjit/test_drjit_camera.py \
  tests/drjit/test_drjit_edges.py tests/drjit/test_drjit_surface_winding.py tests/torch/test_surface.py tests/torch/test_breakit_session8.py \
  tests/drjit/test_drjit_breakit_session8.py tests/engine/test_edge_bvh.py tests/torch/test_compile.py \
  > "$OUT/tests_cuda_changed.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda_changed.txt"
grep -c PASSED "$OUT/tests_cuda_changed.txt"; grep -E "^FAILED|^ERROR" "$OUT/tests_cuda_changed.txt" | head; tail -2 "$OUT/tests_cuda_changed.txt"
timeout 120 python3 benchmarks/surface.py --device cuda --meshes .device/meshes --engines rayd warp --json "$OUT/surface_h200.jsonl" > "$OUT/surface_h200.txt" 2>&1; echo "surface rc=$?"; grep -E "rayd|warp " "$OUT/surface_h200.txt" | cut -c1-120
timeout 100 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048 --engines rayd,warp-sah,mitsuba --build-repeats 1 --no-progress --output "$OUT/run_h200.jsonl" > "$OUT/run_h200.txt" 2>&1; grep "rayd.torch |\|mitsuba3 |\|sah" "$OUT/run_h200.txt" | cut -c1-200
