#!/usr/bin/env bash
# Final H200 call: CUDA tests, seed (1 GPU), run.py, reflections, surface, compile benchmarks.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash benchmarks/h200/session.sh tests
timeout 90 torchrun --standalone --nnodes=1 --nproc_per_node=1 .device/seed/ddp_intersect_train.py > "$OUT/seed_1gpu.txt" 2>&1; echo "seed rc=$?"; tail -3 "$OUT/seed_1gpu.txt"
timeout 90 torchrun --standalone --nnodes=1 --nproc_per_node=1 examples/torch/distributed/ddp_intersect_train.py --rays 16777216 > "$OUT/ddp_1gpu_16M.txt" 2>&1; echo "example rc=$?"; grep "step=2[0-4]\|hash" "$OUT/ddp_1gpu_16M.txt" | tail -4
