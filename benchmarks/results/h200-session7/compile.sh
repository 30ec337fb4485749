#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -v -p no:cacheprovider -k cuda tests/torch/test_compile.py tests/torch/test_vmap.py \
  tests/torch/test_double_backward.py tests/torch/test_copy.py tests/torch/test_all_hits.py tests/torch/test_reflect_chain.py \
  tests/torch/test_breakit_new.py tests/torch/test_camera_edges.py tests/drjit/test_drjit_all_hits.py tests/drjit/test_drjit_camera.py \
  > "$OUT/tests_cuda_compile.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda_compile.txt"
grep -c PASSED "$OUT/tests_cuda_compile.txt"; grep -E "^FAILED|^ERROR" "$OUT/tests_cuda_compile.txt" | head; tail -2 "$OUT/tests_cuda_compile.txt"
timeout 100 python3 benchmarks/compile.py --device cuda --json > "$OUT/compile_h200.txt" 2>&1; tail -8 "$OUT/compile_h200.txt" | cut -c1-300
