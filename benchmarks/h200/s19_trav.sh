#!/usr/bin/env bash
# Issue 18, traversal rows, 19th session (helper trav19): compressed 4-wide triangle nodes. One warm H100/H200, about
# 3 minutes (timeouts add up to 240 s). Assumes PYTHONPATH=/tmp/site:$PWD/src and the repository root as working
# directory:   bash benchmarks/h200/s19_trav.sh
# What changed: RAYD_BVH_LAYOUT=wide4q (engine/wide_q.py, opt-in): each 4-wide node of the CUDA default tree (PLOC,
# wide4) also gets a 64-byte compressed copy (children's boxes as 8-bit planes on a per-node power-of-two grid, Ylitie,
# Karras & Laine 2017; edge_wide_q's quantiser, rounded outward), and the flat walk reads 4 rows of 16 B per node
# instead of 7, except the top 4,096 nodes (float rows). CPU counts (benchmarks/README.md, "12-07, 19th session"): node
# bytes a ray 0.85x (terrain 2 M and sphere 1 M; 0.71x / 0.56x with every node compressed), node fetches +0.0 % /
# +0.4 % (+28 % / +1.8 % with every node compressed). The decoded boxes hold the float ones, so winners and t are
# wide4's (CPU tests bit-equal). The default refit (wide_tris) quantises each wide node in its climb (same launch);
# wide_tris_q64 = its climb under 64 registers instead of 32 (ptxas: 32 spill 592 B on the quantising path),
# wide_tris_ql = quantised by a launch after the climb.
# 1. traversal_ab.py, wide4:ploc (today's CUDA default) vs wide4q:ploc (the top 4,096 nodes walked from their float
#    rows, wide_q.FLOAT_TOP: on the terrain the top levels' coarse grids made rays beside a child boundary enter its
#    neighbour, CPU count 13.5 vs 10.6 inner nodes a ray), wide4q@0:ploc (every node compressed) and wide4q@1024:ploc;
#    the table's ratio column is wide4q:ploc / wide4:ploc. One process per workload (terrain 2 M coherent, sphere 1 M incoherent,
#    4 M rays), closest All / Minimal, any hit, update+sync, round-robin, medians of 15,
#    Mitsuba and Warp SAH beside; "same winner" must read 1.000000 (or >= 0.99999: shared-edge ties).
# 2. refit_orders.py on wide4q scenes: update+sync of wide_tris / wide_tris_q64 / wide_tris_ql / full, interleaved,
#    against Warp's wp.Mesh.refit ("= x.xx x warp"); --quick (the bits are checked by part 3's test_wide_q.py).
# 3. CUDA tests (wide, walks, watertight, intersect): tests/engine/test_wide_q.py (compressed rows after every refit
#    kind bit-equal to a fresh quantisation, winners and t bit-equal to wide4) and test_watertight.py over wide4q.
# WHAT DECIDES: wide4q becomes the CUDA default if its closest All AND Minimal medians (wide4q:ploc; or wide4q@N:ploc
# where that is the faster on both workloads: then also FLOAT_TOP's default "4096" -> "N" in src/rayd/engine/wide_q.py)
# are below wide4's on BOTH workloads (part 1), its update+sync in part 2 (the best of wide_tris / wide_tris_q64 /
# wide_tris_ql) is <= 1.30 x warp on both, "same winner" >= 0.99999 and part 3 passes. The change is ONE line in
# src/rayd/engine/triangles.py: `layout = "pair" if self.device.is_cpu or instanced else "wide4"` -> `... else "wide4q"`
# (plus, if wide_tris_q64 or wide_tris_ql beat wide_tris by >= 3 % on both meshes: wide_refit_tris.Q_MAX_REGISTERS = 64,
# or the default RAYD_TRI_REFIT "wide_tris_ql" in wide_refit.py). Otherwise nothing changes (wide4q stays opt-in).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
echo "== 1. wide4:ploc vs wide4q:ploc (ms, medians of 15, round-robin); Mitsuba / Warp SAH beside"
for W in terrain_C1024_S2048:85 sphere_1M_4Mrays:60; do
  timeout "${W#*:}" python3 benchmarks/traversal_ab.py --device cuda --workloads "${W%:*}" \
    --variants wide4:ploc,wide4q@0:ploc,wide4q@1024:ploc,wide4q:ploc --engines mitsuba,warp-sah --metrics closest_all,closest_minimal,any_hit,update \
    --build-repeats 1 --repeats 15 --warmup 3 --output "$OUT/s19_trav_${W%%_*}.json" > "$OUT/s19_trav_${W%%_*}.txt" 2>&1
  echo "rc=$?" >> "$OUT/s19_trav_${W%%_*}.txt"
  grep -E "^\*\*|^\| (closest|any|update)|^same winner|^rc=|Error|error" "$OUT/s19_trav_${W%%_*}.txt" | cut -c1-260
done
echo "== 2. update+sync of wide4q scenes (ms, medians of 12, modes interleaved) vs Warp's refit"
timeout 35 python3 benchmarks/h200/refit_orders.py --workloads terrain,sphere --layouts wide4q --quick \
  --tri-refits wide_tris,wide_tris_q64,wide_tris_ql,full --warp --repeats 12 --json "$OUT/s19_refit.json" \
  > "$OUT/s19_refit.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_refit.txt"
grep -vE "UserWarning|_warn_once" "$OUT/s19_refit.txt" | sed -E 's/ +/ /g' | grep -E "^(warp|ab|rc)|FAILED" \
  | sed -E 's/ refit GPU/ gpu/g; s/update\+sync //g'
echo "== 3. CUDA tests (test_watertight.py runs every test over wide4q too, test_wide_q.py bit-equal to wide4)"
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 14"
timeout 60 python3 -m pytest -q $NX -p no:cacheprovider -k "cuda and (wide or walk or watertight or intersect)" \
  tests/engine tests/torch > "$OUT/s19_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s19_tests_cuda.txt" | head; tail -2 "$OUT/s19_tests_cuda.txt"
