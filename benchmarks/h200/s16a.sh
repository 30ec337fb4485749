#!/usr/bin/env bash
# Session 16, call F1 at merged main: the whole CUDA suite (-k cuda over tests/torch, tests/drjit, tests/engine).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
timeout 330 python3 -m pytest -q -n 14 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine \
  > "$OUT/tests_cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda.txt"
grep -E "^FAILED|^ERROR" "$OUT/tests_cuda.txt" | head -30; tail -2 "$OUT/tests_cuda.txt"
