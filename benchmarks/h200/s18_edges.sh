#!/usr/bin/env bash
# Issue 11, 18th session (helper edges18), one warm H100/H200, about 3 minutes (timeouts add up to 265 s). Assumes PYTHONPATH=/tmp/site:$PWD/src
# and the repository root as working directory:   bash benchmarks/h200/s18_edges.sh
# What changed: ray nearest-edge searches of a tree with a wide copy (the CUDA default ploc+q:8) now walk the 4-wide
# compressed tree (engine/edge_wide_walk.py, one skeleton for point, ray and top-k; edge_wide_walk.WIDE_RAYS,
# RAYD_EDGE_WIDE_RAYS=0 gives the binary walk of before). No query reads the binary boxes then, so the "wide3" refit
# (the wide-tree climb, no binary climb; session 17 H100: terrain 0.359 vs split 0.395 ms) costs no query a binary
# climb any more. Same answers: CPU tests bit-equal ids against the binary walk and the float64 brute force.
# 1. Refit of ploc+q:8, terrain 2 M (3.1 M edges) / sphere 1 M: split (today's default), wide3, twice interleaved, median of 30 synchronised refits; every row must say "same True".
# 2. Ray nearest-edge query, 1 M rays (origins in the box, unit directions, segments of 2 % of the box diagonal,
#    Morton-sorted), ploc+q:8: "binary" (the walk of before; nearest_edge_kernels.RAY_BOUND off, the bound this branch
#    also gives the binary walk, which only trees without a wide copy, the CPU's, use) vs "wide" (the new one: children ordered by centre
#    distance, pruned by a lower bound re-checked against the shrunk radius, edge_wide_walk.RAY_KEY="box"; CPU counts:
#    terrain 634 -> 217 segment tests a ray, sphere 1342 -> 250) vs "wide center" (RAY_KEY="center", the binary
#    walk's pruning on the wide tree); then half-lines on the terrain (--length 0); per step refit + ray query:
#    "split+binary" (before) vs "wide3+binary" (pays the binary climb) vs "wide3+wide" (after); the refits alone; the
#    default point and top-8 searches of 1 M points (session 17, H100: point 15.7 terrain / 33.5 sphere ms).
#    Median of 5, variants interleaved; "same True" = every ray variant returns the binary walk's ids.
# 3. CUDA tests of everything edge (-k "cuda and edge"), the new tests/engine/test_edge_wide_rays.py included.
# WHAT DECIDES:
# (a) if part 2's "wide" <= "binary" on both workloads, segments and half-lines (and same True): keep
#     edge_wide_walk.WIDE_RAYS on and RAY_KEY "box" (the defaults of this branch; if "wide center" is faster than
#     "wide" on both, set RAY_KEY's default to "center"); else set WIDE_RAYS off (RAYD_EDGE_WIDE_RAYS default "0")
#     and keep split (stop here). If "wide r0" (no register cap) is below "wide" on both, set
#     edge_wide_walk.RAY_MAX_REGISTERS = 0 (one line).
# (b) if also part 1's wide3 < split on both workloads in both passes, and part 2's "step wide3+wide" < "step
#     split+binary" on both: flip the ONE line `REFIT_MODE_CUDA = _ENV_MODE or "split"` in
#     src/rayd/engine/edge_refit_fused.py to `_ENV_MODE or "wide3"` (the CUDA default refit of trees with
#     compressed wide nodes; the CPU keeps REFIT_MODE = "split"). Part 3 must pass either way.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
echo "== 1. refit of ploc+q:8 (ms, median of 30 synchronised / back to back)"
timeout 45 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 --modes split wide3 split wide3 \
  --reps 30 --json "$OUT/s18_edge_refit.jsonl" > "$OUT/s18_edge_refit.txt" 2>&1
echo "rc=$?" >> "$OUT/s18_edge_refit.txt"
sed -E "s/leaves +[0-9]+ depth +[0-9]+ //; s/ \(synchronised\)//; s/ \(back to back\)/ b2b/" "$OUT/s18_edge_refit.txt"
echo "== 2. ray query binary vs wide walk, refit + ray query per step, default point / top-8 searches (ms)"
timeout 95 python3 benchmarks/edge_ray_ab.py --device cuda --tree ploc+q:8 --refit wide3 --rays 1048576 --reps 5 \
  --json "$OUT/s18_edge_ray.jsonl" > "$OUT/s18_edge_ray.txt" 2>&1
echo "rc=$?" >> "$OUT/s18_edge_ray.txt"
timeout 40 python3 benchmarks/edge_ray_ab.py --device cuda --tree ploc+q:8 --refit wide3 --rays 1048576 --reps 3 \
  --length 0 --no-points --only terrain_2M_1M --json "$OUT/s18_edge_ray.jsonl" >> "$OUT/s18_edge_ray.txt" 2>&1
echo "rc=$? (half-lines)" >> "$OUT/s18_edge_ray.txt"; cat "$OUT/s18_edge_ray.txt"
echo "== 3. CUDA edge tests"
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 14"
timeout 85 python3 -m pytest -q $NX -p no:cacheprovider tests/engine tests/torch tests/drjit -k "cuda and edge" \
  > "$OUT/s18_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s18_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s18_tests_cuda.txt" | head; tail -3 "$OUT/s18_tests_cuda.txt"
