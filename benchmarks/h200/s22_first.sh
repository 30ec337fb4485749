#!/usr/bin/env bash
# Session 22, lead, first warm call after the wheel parts: install them, then the whole -k cuda suite (sessions 20-21's
# frontend and engine changes were CPU-tested only) and the seed, unchanged, under torchrun. Repository root.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -d /tmp/site/warp ]; then
  cat /tmp/wp/part_* | tar -x -C /tmp/wp && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/wp/wheels/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
git_rev=$(cat .device/rev 2>/dev/null); echo "rev $git_rev" | tee -a $OUT/gpu.txt
par=""; python3 -c "import xdist" 2>/dev/null && par="-n 15"
echo "pytest $par"
timeout ${TEST_LIMIT:-330} python3 -m pytest -q $par -p no:cacheprovider -rfE -k cuda tests/torch tests/drjit tests/engine tests/examples \
  > $OUT/tests_cuda.txt 2>&1; echo rc=$? >> $OUT/tests_cuda.txt
grep -E "^FAILED|^ERROR" $OUT/tests_cuda.txt | head -30 | cut -c1-220; tail -3 $OUT/tests_cuda.txt
echo "== seed"; timeout 40 torchrun --nproc_per_node=1 .device/seed/ddp_intersect_train.py > $OUT/seed.txt 2>&1
echo rc=$? >> $OUT/seed.txt; tail -3 $OUT/seed.txt
if [ "${ROWS:-1}" = 1 ]; then
  echo "== run.py rows"; timeout 210 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
    --engines rayd,warp-sah,mitsuba --repeats 20 --build-repeats 5 --no-progress --output "$OUT/run.jsonl" > "$OUT/run.txt" 2>&1
  echo "run rc=$?"; grep "^|" "$OUT/run.txt" | cut -c1-200
fi
if [ "${AB:-0}" = 1 ]; then
  echo "== all hits A/B vs 971513c"; timeout 75 python3 benchmarks/all_hits_ab.py .device/s20main/src rayd_main --device cuda \
    --rays 1048576 --repeats 5 > $OUT/all_hits_ab_cuda.txt 2>&1; echo rc=$? >> $OUT/all_hits_ab_cuda.txt; cut -c1-220 $OUT/all_hits_ab_cuda.txt | tail -14
fi
if [ "${EDGES:-0}" = 1 ]; then
  echo "== edges"; timeout 160 python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 5 --trees ploc+q:8 \
    --json "$OUT/edges.jsonl" > "$OUT/edges.txt" 2>&1; echo "edges rc=$?"; grep -v '^{' "$OUT/edges.txt" | cut -c1-200
fi
