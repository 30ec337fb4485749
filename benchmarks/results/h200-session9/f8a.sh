#!/usr/bin/env bash
# H200 call A: CUDA tests, the unchanged seed on 1 GPU, compile benchmark.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash benchmarks/h200/session.sh tests
timeout 90 torchrun --standalone --nnodes=1 --nproc_per_node=1 .device/seed/ddp_intersect_train.py > "$OUT/seed_1gpu.txt" 2>&1; echo "seed rc=$?"; tail -2 "$OUT/seed_1gpu.txt"
timeout 100 python3 benchmarks/compile.py --device cuda --json > "$OUT/compile_h200.txt" 2>&1; echo "compile rc=$?"; tail -5 "$OUT/compile_h200.txt" | cut -c1-300
