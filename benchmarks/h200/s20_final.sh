#!/usr/bin/env bash
# Session 20, lead, the last GPU call: the whole -k cuda suite and the seed at main after every merge of the session, then
# limits20's all-hits A/B (main 971513c's engine as rayd_main, carried at .device/s20main/src, against this tree; its rule:
# every B / A <= 1.10, the float64 count <= 1.15). Under 290 s. PYTHONPATH=/tmp/site:$PWD/src, repository root.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu_final.txt
timeout 170 python3 -m pytest -q -n 15 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine > $OUT/tests_cuda_final.txt 2>&1
echo rc=$? >> $OUT/tests_cuda_final.txt
grep -E "^FAILED|^ERROR" $OUT/tests_cuda_final.txt | head -30 | cut -c1-200; tail -2 $OUT/tests_cuda_final.txt
echo "== seed"; timeout 30 torchrun --nproc_per_node=1 ${SEED:-../shared/seed/ddp_intersect_train.py} > $OUT/seed_final.txt 2>&1
echo rc=$? >> $OUT/seed_final.txt; tail -2 $OUT/seed_final.txt
echo "== all hits A/B"; timeout 75 python3 benchmarks/all_hits_ab.py ${MAIN_SRC:-.device/s20main/src} rayd_main --device cuda \
  --rays 1048576 --repeats 5 > $OUT/all_hits_ab_cuda.txt 2>&1; echo rc=$? >> $OUT/all_hits_ab_cuda.txt; cut -c1-220 $OUT/all_hits_ab_cuda.txt | tail -14
