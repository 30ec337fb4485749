#!/usr/bin/env bash
# Session 22, helper tmin22: the tmin = -inf tests on CUDA (torch: the device box and torch ops path; drjit: the
# core box read), not run on a GPU before. Assumes PYTHONPATH=/tmp/site:$PWD/src and the repository root as
# working directory.   bash benchmarks/h200/s22_tmin.sh     (< 120 s)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONPATH=/tmp/site:$PWD/src
timeout 110 python3 -m pytest -q -n 8 -p no:cacheprovider -k cuda tests/torch/test_tmin22.py tests/drjit/test_drjit_tmin22.py \
  > $OUT/tests_cuda_tmin22.txt 2>&1
echo rc=$? >> $OUT/tests_cuda_tmin22.txt
grep -E "^FAILED|^ERROR" $OUT/tests_cuda_tmin22.txt | head -30 | cut -c1-200; tail -2 $OUT/tests_cuda_tmin22.txt
