#!/usr/bin/env bash
# Session 22, lead, the last GPU call (a fresh machine after the wheel parts): install, the whole -k cuda suite at main
# after the session's merges (exact Dr.Jit math, tmin = -inf, the CPU host-cost work), the seed, the FastMath A/B of
# rayd.drjit on CUDA, then (time left) edges.py's rows. Repository root.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -d /tmp/site/warp ]; then
  cat /tmp/wp/part_* | tar -x -C /tmp/wp && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/wp/wheels/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "rev $(cat .device/rev)"; } | tee $OUT/gpu_final.txt
[ "${SUITE:-1}" = 1 ] && timeout 240 python3 -m pytest -q -n 15 -p no:cacheprovider -rfE -k cuda tests/torch tests/drjit tests/engine tests/examples \
  > $OUT/tests_cuda_final.txt 2>&1; echo rc=$? >> $OUT/tests_cuda_final.txt
grep -E "^FAILED|^ERROR" $OUT/tests_cuda_final.txt | head -30 | cut -c1-220; tail -2 $OUT/tests_cuda_final.txt
[ "${SUITE:-1}" = 1 ] && echo "== seed" && timeout 40 torchrun --nproc_per_node=1 .device/seed/ddp_intersect_train.py > $OUT/seed_final.txt 2>&1
echo rc=$? >> $OUT/seed_final.txt; tail -2 $OUT/seed_final.txt
[ "${FASTMATH:-1}" = 1 ] && echo "== FastMath A/B" && timeout 90 python3 benchmarks/drjit_fastmath_ab.py --backend cuda --rays 4194304 --repeats 9 > $OUT/drjit_fastmath_ab_cuda.txt 2>&1
echo rc=$? >> $OUT/drjit_fastmath_ab_cuda.txt; cat $OUT/drjit_fastmath_ab_cuda.txt | cut -c1-200
if [ "${GPU_AB:-1}" = 1 ]; then
  echo "== engine A/B vs the tree before confirmed_face_t (fb00fe0, carried at .device/pre/src)"
  timeout 150 python3 benchmarks/gpu_ab.py .device/pre/src rayd_pre --repeats 15 > $OUT/gpu_ab_offface.txt 2>&1
  echo rc=$? >> $OUT/gpu_ab_offface.txt; cat $OUT/gpu_ab_offface.txt | cut -c1-200
fi
if [ "${EDGES:-0}" = 1 ]; then
  echo "== edges"; timeout ${EDGES_LIMIT:-150} python3 benchmarks/edges.py --device cuda --size full --brute-budget 1 --reps 5 --trees ploc+q:8 \
    --json "$OUT/edges.jsonl" > "$OUT/edges.txt" 2>&1; echo "edges rc=$?"; grep -v '^{' "$OUT/edges.txt" | cut -c1-200
fi
