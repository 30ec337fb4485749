#!/usr/bin/env bash
# Session 22, lead: the short CUDA check that fits a small device budget: the engine tests, the watertight /
# off-face / tmin tests and the drjit exact-math tests, -k cuda, at main after the session's merges. Repository root.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -d /tmp/site/warp ]; then
  cat /tmp/wp/part_* | tar -x -C /tmp/wp && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/wp/wheels/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name --format=csv,noheader; echo "rev $(cat .device/rev)"; } | tee $OUT/gpu_min.txt
timeout ${LIMIT:-150} python3 -m pytest -q -n 15 -p no:cacheprovider -rfE -k cuda tests/engine tests/torch/test_watertight.py \
  tests/torch/test_breakit22a_off_face.py tests/drjit/test_drjit_breakit22a_off_face.py tests/torch/test_tmin22.py \
  tests/drjit/test_drjit_tmin22.py tests/drjit/test_drjit_exact_math.py tests/torch/test_intersect_parity.py \
  tests/torch/test_occlusion.py tests/torch/test_instances.py tests/torch/test_reflections.py tests/drjit/test_drjit21_placement.py \
  > $OUT/tests_cuda_min.txt 2>&1; echo rc=$? >> $OUT/tests_cuda_min.txt
grep -E "^FAILED|^ERROR" $OUT/tests_cuda_min.txt | head -30 | cut -c1-220; tail -2 $OUT/tests_cuda_min.txt
