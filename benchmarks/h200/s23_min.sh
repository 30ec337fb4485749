#!/usr/bin/env bash
# Session 23, lead, a short CUDA check if a machine comes late (little device time left): install, the CUDA tests
# of the session's merges (build23's host shortcuts with RAYD_BUILD_KEPT_CUDA off and on, offface23's float64 rule),
# then build() of small scenes and the 2 M terrain with the kept launches off / on. Repository root.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -d /tmp/site/warp ]; then
  mkdir -p /tmp/site && cat /tmp/wp/part_* | xz -d | tar -x -C /tmp/site
fi
export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "rev $(cat .device/rev)"; } | tee $OUT/gpu_min.txt
for K in 0 1; do
  RAYD_BUILD_KEPT_CUDA=$K timeout ${LIMIT:-60} python3 -m pytest -q -n 15 -p no:cacheprovider -rfE -k "cuda" \
    tests/engine/test_build_host.py tests/engine/test_ploc*.py tests/torch/test_offface23_float64.py \
    tests/torch/test_breakit22a_off_face.py tests/engine/test_refit_update.py tests/torch/test_update_path.py > $OUT/tests_min_$K.txt 2>&1
  echo "kept=$K rc=$?"; grep -E "^FAILED|^ERROR" $OUT/tests_min_$K.txt | head -8 | cut -c1-200; tail -1 $OUT/tests_min_$K.txt
done
for K in 0 1; do
  echo "== build, RAYD_BUILD_KEPT_CUDA=$K"
  RAYD_BUILD_KEPT_CUDA=$K timeout 40 python3 - <<'PY' 2>&1 | tee -a $OUT/build_min.txt
import os, statistics, time, numpy as np, torch, rayd.torch as rt
print("kept", os.environ.get("RAYD_BUILD_KEPT_CUDA"))
for n in (8, 128, 1024):
    x, y = np.meshgrid(np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1))
    v = torch.tensor(np.stack([x.ravel(), y.ravel(), 0.1 * np.sin(7 * x.ravel())], 1), dtype=torch.float32, device="cuda")
    q = (np.arange(n)[:, None] * (n + 1) + np.arange(n)[None, :]).ravel()
    f = torch.tensor(np.concatenate([np.stack([q, q + 1, q + n + 2], 1), np.stack([q, q + n + 2, q + n + 1], 1)]), dtype=torch.int32, device="cuda")
    def new():
        s = rt.Scene(); s.add_mesh(rt.Mesh(v, f), dynamic=True); s.build(); return s
    for _ in range(3): new()
    ts = []
    for _ in range(10):
        torch.cuda.synchronize(); t = time.perf_counter(); new(); torch.cuda.synchronize(); ts.append((time.perf_counter() - t) * 1e3)
    print(f"{2 * n * n} tris build ms median {statistics.median(ts):.3f} min {min(ts):.3f}")
PY
done
