#!/usr/bin/env bash
# Issue 18, update row (update_mesh_vertices + sync() <= 1.3 x Warp's wp.Mesh.refit), 18th session, helper tri18.
# One warm H100/H200, about 3 minutes (each step has a timeout: at most 5 minutes, e.g. with a cold
# kernel cache). Assumes PYTHONPATH=/tmp/site:$PWD/src and the repository root as the working directory.
#   bash benchmarks/h200/s18_tri.sh
# 1. refit_orders.py on terrain 2 M and sphere 1 M (CUDA defaults: PLOC + 4-wide nodes), every RAYD_TRI_REFIT
#    mode on one scene per mesh, interleaved call by call, twice (the second run in the reverse order):
#    full (the fused refit), wide (today's default), wide_v4 (its leaf triangles in 16-byte stores),
#    wide_tris (a coalesced launch writes the leaf triangles, 16-byte rows, and folds the magnitude; then the
#    climb), wide_tris_r (the same, the climb reading the corners back from the rows), wide_split (a launch
#    writes every leaf, 16-byte stores, no fence or atomic; a second climbs from the wide nodes with leaf
#    children: about one atomic per wide node instead of one per leaf); Warp's refit beside.
#    wide@262144: `wide` with 262,144 threads (4 points each on the terrain) instead of 65,536 (16 points each,
#    one after the other) in the placement that folds the magnitude's first pass (16.7 us on the H200, session 13)
#    and in the refit's own first pass (refit.set_magnitude_threads; the same magnitude).
#    Run 2 reverses the order of the wide modes (full stays first: every `ratio` is to full), timings only.
#    Every "ab" line must say "same <mode> True/True" for each mode (wide rows, leaf triangles and magnitude
#    bit-equal to the full refit's, every structure after complete()).
# 2. update_host.py: the host time of one update + sync, phase by phase (where the GPU waits for the host);
#    with .device/baseline/src, main's against this tree's (the flags' copy and the magnitude's second pass
#    are issued with less Python here: the `copy` and `refit` phases should drop).
# 3. CUDA tests of the refits (the brief's two -k were merged: pytest keeps only the last -k).
#
# DECIDES the default (wide_refit._tri_refit, the one line `os.environ.get("RAYD_TRI_REFIT", "wide")`): the
# mode with the lowest update+sync median on BOTH meshes in BOTH runs becomes the default if it is below
# `wide` by 3 % or more on both meshes in both runs, every `same` says True/True and the tests pass;
# if two modes split the meshes, the one with the lower sum of the four `ratio <mode>/full` wins.
# Otherwise `wide` stays. Separately, @262144 becomes the default (refit._MAG_THREADS = 262144) if
# `wide@262144` is below `wide` on both meshes in both runs.
# Goal line: "= x.xx x warp" <= 1.30 on the terrain (H200 session 18: wide 1.74 x).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
git rev-parse HEAD >> "$OUT/gpu.txt" 2>/dev/null
M=full,wide,wide_v4,wide_tris,wide_tris_r,wide_split,wide@262144
R=full,wide@262144,wide_split,wide_tris_r,wide_tris,wide_v4,wide  # (full first in both: the ratios are to it)
echo "== refit modes, run 1 ($M), then run 2 ($R); ms, medians of 12"
timeout 100 python3 benchmarks/h200/refit_orders.py --workloads terrain,sphere --tri-refits $M --warp --repeats 12 \
  --list --json "$OUT/s18_tri_1.json" > "$OUT/s18_tri.txt" 2>&1
echo "rc=$?" >> "$OUT/s18_tri.txt"
timeout 50 python3 benchmarks/h200/refit_orders.py --workloads terrain,sphere --tri-refits $R --warp --repeats 12 \
  --quick --json "$OUT/s18_tri_2.json" >> "$OUT/s18_tri.txt" 2>&1
echo "rc=$?" >> "$OUT/s18_tri.txt"
grep -vE "UserWarning|_warn_once" "$OUT/s18_tri.txt" | sed -E 's/ +/ /g' | grep -E "^(warp|ab|rc|terrain|sphere)|FAILED" \
  | sed -E 's/ refit GPU/ gpu/g; s/ kernel / k /g; s/update\+sync //g'
echo "== kernels of one update + sync per mode (run 1: count x us, name)"
grep -E "^ {4}[a-z_@0-9]+: *$|^ +[0-9.]+ x +[0-9.]+ us" "$OUT/s18_tri.txt" | sed -E 's/_cuda_kernel_forward//; s/ +/ /g' | cut -c1-70
echo "== host phases of one update + sync (us), terrain 2 M"
timeout 25 python3 benchmarks/h200/update_host.py --modes wide,wide_v4,wide_tris,wide_split --calls 100 > "$OUT/s18_host.txt" 2>&1
echo "rc=$?" >> "$OUT/s18_host.txt"; sed -E 's/ +/ /g' "$OUT/s18_host.txt"
if [ -d .device/baseline/src ]; then  # the host work of main against this tree (both `wide`), two rounds
  echo "== host phases, main (.device/baseline/src) then this tree; terrain 131 k, wide (us)"
  for src in .device/baseline/src src; do
    timeout 20 python3 benchmarks/h200/update_host.py --size 256 --modes wide --calls 100 --src $src 2>&1 \
      | tail -1 | sed -E "s/ +/ /g; s|^|$src |"
  done | tee "$OUT/s18_host_ab.txt"
fi
echo "== CUDA tests of the refits"
timeout 90 python3 -m pytest -q -n 14 -p no:cacheprovider tests/engine tests/torch \
  -k "cuda and (refit or update or wide)" > "$OUT/s18_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s18_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s18_tests_cuda.txt" | head; tail -2 "$OUT/s18_tests_cuda.txt"
