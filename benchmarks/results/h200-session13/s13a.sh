#!/usr/bin/env bash
# Session 13, call A (main 9cc2020): rayd.drjit CUDA suite under RAYD_DRJIT_QUERY_FENCES=3 and 0 (twice each),
# the seed, and the project's example at 16,777,216 rays on one GPU.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
echo "rev $(cat .device/rev)" >> "$OUT/gpu.txt"
for f in 3 0 3 0; do
  RAYD_DRJIT_QUERY_FENCES=$f timeout 110 python3 -m pytest -q -n 12 -p no:cacheprovider -k cuda tests/drjit > /tmp/dj.txt 2>&1
  echo "fences=$f rc=$? $(tail -1 /tmp/dj.txt)" >> "$OUT/drjit_fences.txt"; grep -E "^FAILED|^ERROR" /tmp/dj.txt >> "$OUT/drjit_fences.txt"
done
cat "$OUT/drjit_fences.txt"
timeout 40 torchrun --standalone --nnodes=1 --nproc_per_node=1 .device/seed/ddp_intersect_train.py > "$OUT/seed_1gpu.txt" 2>&1; echo "seed rc=$?"; tail -2 "$OUT/seed_1gpu.txt"
timeout 60 torchrun --standalone --nnodes=1 --nproc_per_node=1 examples/torch/distributed/ddp_intersect_train.py --rays 16777216 > "$OUT/ddp_1gpu_16M.txt" 2>&1; echo "ddp rc=$?"; tail -4 "$OUT/ddp_1gpu_16M.txt"
