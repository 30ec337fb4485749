#!/usr/bin/env bash
# Session 20, lead: the whole -k cuda suite (tests/torch, tests/drjit, tests/engine) and the seed on one GPU, at main
# after the session's merges. Assumes PYTHONPATH=/tmp/site:$PWD/src and the repository root as working directory.
#   SEED=path/to/ddp_intersect_train.py bash benchmarks/h200/s20_suite.sh     (< 250 s)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu_suite.txt
timeout 200 python3 -m pytest -q -n 15 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine > $OUT/tests_cuda_suite.txt 2>&1
echo rc=$? >> $OUT/tests_cuda_suite.txt
grep -E "^FAILED|^ERROR" $OUT/tests_cuda_suite.txt | head -30 | cut -c1-200; tail -2 $OUT/tests_cuda_suite.txt
echo "== seed"; timeout 40 torchrun --nproc_per_node=1 ${SEED:-../shared/seed/ddp_intersect_train.py} > $OUT/seed_suite.txt 2>&1
echo rc=$? >> $OUT/seed_suite.txt; tail -2 $OUT/seed_suite.txt
