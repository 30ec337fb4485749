#!/usr/bin/env bash
# Final H200 call of session 11: CUDA tests (xdist), refit orders, builders, instance walks.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .device/xdist/*.whl 2>&1 | tail -1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 230 python3 -m pytest -q -n 8 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine \
  > "$OUT/tests_cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda.txt"
grep -E "^FAILED|^ERROR" "$OUT/tests_cuda.txt" | head -25; tail -2 "$OUT/tests_cuda.txt"
timeout 60 torchrun --standalone --nnodes=1 --nproc_per_node=1 .device/seed/ddp_intersect_train.py > "$OUT/seed_1gpu.txt" 2>&1; echo "seed rc=$?"; tail -2 "$OUT/seed_1gpu.txt"
timeout 45 python3 benchmarks/h200/refit_orders.py --builders sah > "$OUT/refit_orders.txt" 2>&1; cat "$OUT/refit_orders.txt"
timeout 60 python3 benchmarks/h200/builders.py --out "$OUT" --builders sah,ploc --no-mitsuba > "$OUT/builders_h200.txt" 2>&1; tail -12 "$OUT/builders_h200.txt" | cut -c1-240
timeout 60 python3 benchmarks/instance_walks_ab.py --device cuda --variants nested,pairtop,unified,unified_cull --repeats 5 --json "$OUT/instance_walks_h200.jsonl" > "$OUT/instance_walks_h200.txt" 2>&1; tail -10 "$OUT/instance_walks_h200.txt" | cut -c1-240
