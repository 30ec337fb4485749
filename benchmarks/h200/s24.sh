#!/usr/bin/env bash
# Session 24, lead. Repository root, after the three .device/px wheel-part calls.
#   bash benchmarks/h200/s24.sh A   # whole -k cuda suite at main, the seed (torchrun, 1 process), run.py rows (#18)  (< 560 s)
#   bash benchmarks/h200/s24.sh B   # instances.py with Mitsuba, edges.py (#11), update/build host phases, off-face A/B, FastMath A/B
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -d /tmp/site/warp ]; then
  mkdir -p /tmp/site && cat /tmp/wp/part_* | xz -d | tar -x -C /tmp/site
fi
export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "rev $(cat .device/rev)"; } | tee $OUT/gpu.txt
if [ "${1:-A}" = A ]; then
  timeout ${TEST_LIMIT:-250} python3 -m pytest -q -n 15 -p no:cacheprovider -rfE -k cuda tests/torch tests/drjit tests/engine tests/examples \
    > $OUT/tests_cuda.txt 2>&1; echo rc=$? >> $OUT/tests_cuda.txt
  grep -E "^FAILED|^ERROR" $OUT/tests_cuda.txt | head -30 | cut -c1-220; tail -2 $OUT/tests_cuda.txt
  echo "== seed"; timeout 40 torchrun --nproc_per_node=1 .device/seed/ddp_intersect_train.py > $OUT/seed.txt 2>&1
  echo rc=$? >> $OUT/seed.txt; tail -2 $OUT/seed.txt
  echo "== run.py rows"; timeout ${ROWS_LIMIT:-230} python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
    --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 5 --no-progress --output "$OUT/run.jsonl" > "$OUT/run.txt" 2>&1
  echo "run rc=$?"; grep "^|" "$OUT/run.txt" | cut -c1-200
fi
if [ "${1:-A}" = B ]; then
  echo "== instances"; timeout 120 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances.jsonl" > $OUT/instances.txt 2>&1
  echo "inst rc=$?"; grep "^|" $OUT/instances.txt | cut -c1-200
  echo "== edges"; timeout 160 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 5 --trees ploc+q:8 \
    --json "$OUT/edges.jsonl" > "$OUT/edges.txt" 2>&1; echo "edges rc=$?"; grep -v '^{' "$OUT/edges.txt" | cut -c1-200 | tail -30
  echo "== host cProfile"; timeout 60 python3 benchmarks/h200/host_cprofile.py --tris 128 --reps 40 > $OUT/host_cprofile_128.txt 2>&1
  echo rc=$? >> $OUT/host_cprofile_128.txt; grep "^==" $OUT/host_cprofile_128.txt
  timeout 60 python3 benchmarks/h200/host_cprofile.py --tris 2097152 --reps 10 > $OUT/host_cprofile_2M.txt 2>&1
  echo rc=$? >> $OUT/host_cprofile_2M.txt; grep "^==" $OUT/host_cprofile_2M.txt
  echo "== update host phases"; timeout 50 python3 benchmarks/h200/update_host.py --device cuda --size 1024 --modes wide_tris --calls 200 \
    > $OUT/update_host.txt 2>&1; echo rc=$? >> $OUT/update_host.txt; tail -4 $OUT/update_host.txt | cut -c1-220
  echo "== off-face A/B vs fb00fe0"; timeout 100 python3 benchmarks/gpu_ab.py .device/pre/src rayd_pre --repeats 9 > $OUT/gpu_ab_offface.txt 2>&1
  echo rc=$? >> $OUT/gpu_ab_offface.txt; cut -c1-200 $OUT/gpu_ab_offface.txt | tail -16
  echo "== FastMath A/B"; timeout 60 python3 benchmarks/drjit_fastmath_ab.py --backend cuda --rays 4194304 --repeats 9 > $OUT/drjit_fastmath_ab_cuda.txt 2>&1
  echo rc=$? >> $OUT/drjit_fastmath_ab_cuda.txt; cut -c1-200 $OUT/drjit_fastmath_ab_cuda.txt | tail -12
fi
