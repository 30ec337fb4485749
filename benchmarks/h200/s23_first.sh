#!/usr/bin/env bash
# Session 23, lead, first warm call after the wheel parts: install, the whole -k cuda suite at main (session 22's
# tmin = -inf, host-view, compile-record and off-face changes were CPU-tested or short-checked only), the seed
# (unchanged, torchrun, 1 process), then where the update's and the build's host time goes on this GPU
# (update_host.py phases, profile_calls.py wall vs kernels), the off-face rule's cost (gpu_ab.py against fb00fe0) and
# rayd.drjit's exact-math cost on CUDA. Repository root.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -d /tmp/site/warp ]; then
  # (.device/px: the three wheels unzipped into one tree, xz-compressed: 147 MB in 3 parts instead of 211 MB in 5)
  mkdir -p /tmp/site && cat /tmp/wp/part_* | xz -d | tar -x -C /tmp/site
fi
export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "rev $(cat .device/rev)"; } | tee $OUT/gpu.txt
if [ "${SUITE:-1}" = 1 ]; then
  timeout ${TEST_LIMIT:-240} python3 -m pytest -q -n 15 -p no:cacheprovider -rfE -k cuda tests/torch tests/drjit tests/engine tests/examples \
    > $OUT/tests_cuda.txt 2>&1; echo rc=$? >> $OUT/tests_cuda.txt
  grep -E "^FAILED|^ERROR" $OUT/tests_cuda.txt | head -30 | cut -c1-220; tail -2 $OUT/tests_cuda.txt
  echo "== seed"; timeout 40 torchrun --nproc_per_node=1 .device/seed/ddp_intersect_train.py > $OUT/seed.txt 2>&1
  echo rc=$? >> $OUT/seed.txt; tail -2 $OUT/seed.txt
fi
if [ "${HOST:-1}" = 1 ]; then
  echo "== update host phases"; timeout 60 python3 benchmarks/h200/update_host.py --device cuda --size 1024 --modes wide_tris --calls 200 \
    > $OUT/update_host.txt 2>&1; echo rc=$? >> $OUT/update_host.txt; tail -4 $OUT/update_host.txt | cut -c1-220
  echo "== profile calls terrain"; timeout 100 python3 benchmarks/h200/profile_calls.py terrain --reps 5 > $OUT/profile_terrain.txt 2>&1
  echo rc=$? >> $OUT/profile_terrain.txt; grep -E '^\||^[a-z=]' $OUT/profile_terrain.txt | head -40 | cut -c1-200
fi
if [ "${TINY:-1}" = 1 ]; then
  echo "== build() of small scenes on cuda (host time: the kernels are microseconds)"
  timeout 60 python3 - <<'PY' 2>&1 | tee $OUT/build_small_cuda.txt
import statistics, time, numpy as np, torch, rayd.torch as rt
for n in (2, 8, 32, 128):
    x, y = np.meshgrid(np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1))
    v = torch.tensor(np.stack([x.ravel(), y.ravel(), 0.1 * np.sin(7 * x.ravel())], 1), dtype=torch.float32, device="cuda")
    q = (np.arange(n)[:, None] * (n + 1) + np.arange(n)[None, :]).ravel()
    f = torch.tensor(np.concatenate([np.stack([q, q + 1, q + n + 2], 1), np.stack([q, q + n + 2, q + n + 1], 1)]), dtype=torch.int32, device="cuda")
    def new():
        s = rt.Scene(); s.add_mesh(rt.Mesh(v, f), dynamic=True); s.build(); return s
    for _ in range(5): new()
    ts = []
    for _ in range(30):
        torch.cuda.synchronize(); t = time.perf_counter(); new(); torch.cuda.synchronize(); ts.append((time.perf_counter() - t) * 1e3)
    print(f"{2 * n * n} tris build ms median {statistics.median(ts):.3f} min {min(ts):.3f}")
PY
fi
if [ "${GPU_AB:-1}" = 1 ]; then
  echo "== engine A/B vs fb00fe0 (before confirmed_face_t)"
  timeout 110 python3 benchmarks/gpu_ab.py .device/pre/src rayd_pre --repeats 9 > $OUT/gpu_ab_offface.txt 2>&1
  echo rc=$? >> $OUT/gpu_ab_offface.txt; cut -c1-200 $OUT/gpu_ab_offface.txt | tail -16
fi
if [ "${FASTMATH:-1}" = 1 ]; then
  echo "== FastMath A/B"; timeout 60 python3 benchmarks/drjit_fastmath_ab.py --backend cuda --rays 4194304 --repeats 9 > $OUT/drjit_fastmath_ab_cuda.txt 2>&1
  echo rc=$? >> $OUT/drjit_fastmath_ab_cuda.txt; cut -c1-200 $OUT/drjit_fastmath_ab_cuda.txt | tail -12
fi
