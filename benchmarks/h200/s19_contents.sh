#!/usr/bin/env bash
# Session 19, helper breakit19: the content check (rayd.core.contents) on CUDA, one call (< 3 min):
#   bash benchmarks/h200/s19_contents.sh
# 1) the tests that write past the version stamps, the host-sync counts and the lifecycle tests, on CUDA;
# 2) benchmarks/content_check.py on the 2 M-triangle terrain (closest hit 262 k / 1 k rays, update + sync;
#    rayd.drjit's closest hit), the check on and off interleaved in one process.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
timeout 100 python3 -m pytest -q -p no:cacheprovider -k cuda tests/torch/test_unseen_writes.py \
  tests/drjit/test_drjit_unseen_writes.py tests/drjit/test_drjit_host_syncs.py tests/torch/test_lifecycle.py \
  tests/drjit/test_drjit_in_place.py tests/torch/test_many_instances.py > "$OUT/s19_tests_cuda.txt" 2>&1
echo "tests rc=$?"; grep -E "FAILED|ERROR" "$OUT/s19_tests_cuda.txt" | head -20; tail -1 "$OUT/s19_tests_cuda.txt"
timeout 60 python3 benchmarks/content_check.py 1024 512 9 > "$OUT/s19_content_check_cuda.txt" 2>&1
cat "$OUT/s19_content_check_cuda.txt" | tail -8
