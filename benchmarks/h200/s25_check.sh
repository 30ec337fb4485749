#!/usr/bin/env bash
# Session 25, lead: the CUDA tests of the files this session's merges touched (after the three .device/px calls).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -d /tmp/site/warp ]; then mkdir -p /tmp/site && cat /tmp/wp/part_* | xz -d | tar -x -C /tmp/site; fi
[ -d /tmp/site/trimesh ] || python3 -m zipfile -e .device/tm/trimesh-*.whl /tmp/site
export PYTHONPATH=/tmp/site:$PWD/src
echo "rev $(cat .device/rev)"
timeout ${TEST_LIMIT:-200} python3 -m pytest -q -n 15 -p no:cacheprovider -rfE -k cuda \
  tests/torch/test_breakit25_*.py tests/drjit/test_drjit_breakit25_*.py tests/torch/test_tmin22.py tests/torch/test_compile.py \
  tests/drjit/test_drjit_offface23_float64.py tests/torch/test_camera*.py tests/drjit/test_drjit_camera*.py \
  tests/torch/test_surface*.py tests/drjit/test_drjit_surface*.py tests/torch/test_review24a_winding_no_grad.py \
  tests/torch/test_*path*.py tests/drjit/test_drjit_*path*.py > $OUT/tests_cuda_s25.txt 2>&1
echo rc=$? >> $OUT/tests_cuda_s25.txt
grep -E "^FAILED|^ERROR" $OUT/tests_cuda_s25.txt | head -20 | cut -c1-220; tail -2 $OUT/tests_cuda_s25.txt
