#!/usr/bin/env bash
# Session 12, call A: CUDA tests (xdist), seed, drjit instance tests repeated.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .device/xdist/*.whl 2>&1 | tail -1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
echo "rev $(cat .device/rev)" >> "$OUT/gpu.txt"
timeout 260 python3 -m pytest -q -n 8 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine \
  > "$OUT/tests_cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda.txt"
grep -E "^FAILED|^ERROR" "$OUT/tests_cuda.txt" | head -25; tail -2 "$OUT/tests_cuda.txt"
timeout 60 torchrun --standalone --nnodes=1 --nproc_per_node=1 .device/seed/ddp_intersect_train.py > "$OUT/seed_1gpu.txt" 2>&1; echo "seed rc=$?"; tail -2 "$OUT/seed_1gpu.txt"
for f in 1 1 3 3 3; do
  RAYD_DRJIT_QUERY_FENCES=$f timeout 60 python3 -m pytest -q -n 8 -p no:cacheprovider -k cuda tests/drjit/test_drjit_instances.py tests/drjit/test_drjit_in_place.py tests/drjit/test_drjit_intersect.py 2>&1 | tail -1 | sed "s/^/fences=$f: /" >> "$OUT/drjit_repeats.txt"
done
cat "$OUT/drjit_repeats.txt"
