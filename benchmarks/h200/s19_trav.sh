#!/usr/bin/env bash
# Issue 18, traversal rows, 19th session (helper trav19): compressed 4-wide triangle nodes. One warm H100/H200, about
# 3 minutes (timeouts add up to 240 s). Assumes PYTHONPATH=/tmp/site:$PWD/src and the repository root as working
# directory:   bash benchmarks/h200/s19_trav.sh
# What changed: RAYD_BVH_LAYOUT=wide4q (engine/wide_q.py, opt-in): each 4-wide node of the CUDA default tree (PLOC,
# wide4) also gets a 64-byte compressed copy (children's boxes as 8-bit planes on a per-node power-of-two grid, Ylitie,
# Karras & Laine 2017; edge_wide_q's quantiser, rounded outward), and the flat walk reads 4 rows of 16 B per node
# instead of 7 (CPU counts, benchmarks/README.md: node bytes per ray ~0.5x, extra child entries from the looser boxes
# a few %). The decoded boxes hold the float ones, so winners and t are wide4's (CPU tests bit-equal). The default
# refit (wide_tris) quantises each wide node in its climb (same launch); wide_tris_q64 = its climb under 64 registers
# instead of 32 (ptxas: 32 spills 600 B on the quantising path), wide_tris_ql = quantised by a launch after the climb.
# 1. traversal_ab.py, wide4:ploc (today's CUDA default) vs wide4q:ploc (the top 4,096 nodes walked from their float
#    rows, wide_q.FLOAT_TOP: on the terrain the top levels' coarse grids made rays beside a child boundary enter its
#    neighbour, CPU count 13.5 vs 10.6 inner nodes a ray) and wide4q@0:ploc (every node compressed); the table's
#    ratio column is wide4q:ploc / wide4:ploc. One process per workload (terrain 2 M coherent, sphere 1 M incoherent,
#    4 M rays), closest All / Minimal, any hit, update+sync, round-robin, medians of 15,
#    Mitsuba and Warp SAH beside; "same winner" must read 1.000000 (or >= 0.99999: shared-edge ties).
# 2. refit_orders.py on wide4q scenes: update+sync of wide_tris / wide_tris_q64 / wide_tris_ql / full, interleaved,
#    against Warp's wp.Mesh.refit ("= x.xx x warp"); every "same" must read True/True (compressed rows included).
# 3. CUDA tests (wide, walks, watertight, intersect; tests/engine/test_wide_q.py among them), then the watertight tests
#    with RAYD_BVH_LAYOUT=wide4q.
# WHAT DECIDES: wide4q becomes the CUDA default if its closest All AND Minimal medians (wide4q:ploc; or wide4q@0:ploc
# where that is the faster on both workloads: then also FLOAT_TOP's default "4096" -> "0" in src/rayd/engine/wide_q.py)
# are below wide4's on BOTH workloads (part 1), its update+sync in part 2 (the best of wide_tris / wide_tris_q64 /
# wide_tris_ql) is <= 1.30 x warp on both, every "same" is True/True, "same winner" >= 0.99999 and part 3 passes. The change is ONE line in
# src/rayd/engine/triangles.py: `layout = "pair" if self.device.is_cpu or instanced else "wide4"` -> `... else "wide4q"`
# (plus, if wide_tris_q64 or wide_tris_ql beat wide_tris by >= 3 % on both meshes: wide_refit_tris.Q_MAX_REGISTERS = 64,
# or the default RAYD_TRI_REFIT "wide_tris_ql" in wide_refit.py). Otherwise nothing changes (wide4q stays opt-in).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
echo "== 1. wide4:ploc vs wide4q:ploc (ms, medians of 15, round-robin); Mitsuba / Warp SAH beside"
for W in terrain_C1024_S2048:75 sphere_1M_4Mrays:70; do
  timeout "${W#*:}" python3 benchmarks/traversal_ab.py --device cuda --workloads "${W%:*}" \
    --variants wide4:ploc,wide4q@0:ploc,wide4q@1024:ploc,wide4q:ploc --engines mitsuba,warp-sah --metrics closest_all,closest_minimal,any_hit,update \
    --build-repeats 1 --repeats 15 --warmup 3 --output "$OUT/s19_trav_${W%%_*}.json" > "$OUT/s19_trav_${W%%_*}.txt" 2>&1
  echo "rc=$?" >> "$OUT/s19_trav_${W%%_*}.txt"
  grep -E "^\*\*|^\| (closest|any|update)|^same winner|^rc=|Error|error" "$OUT/s19_trav_${W%%_*}.txt" | cut -c1-260
done
echo "== 2. update+sync of wide4q scenes (ms, medians of 12, modes interleaved) vs Warp's refit"
timeout 45 python3 benchmarks/h200/refit_orders.py --workloads terrain,sphere --layouts wide4q \
  --tri-refits wide_tris,wide_tris_q64,wide_tris_ql,full --warp --repeats 12 --list --json "$OUT/s19_refit.json" \
  > "$OUT/s19_refit.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_refit.txt"
grep -vE "UserWarning|_warn_once" "$OUT/s19_refit.txt" | sed -E 's/ +/ /g' | grep -E "^(warp|ab|rc)|FAILED" \
  | sed -E 's/ refit GPU/ gpu/g; s/ kernel / k /g; s/update\+sync //g'
grep -E "^ {4}[a-z_@0-9]+: *$|^ +[0-9.]+ x +[0-9.]+ us .*(climb|quantise|fold)" "$OUT/s19_refit.txt" \
  | sed -E 's/_cuda_kernel_forward//; s/ +/ /g' | cut -c1-80
echo "== 3. CUDA tests"
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 14"
timeout 45 python3 -m pytest -q $NX -p no:cacheprovider -k "cuda and (wide or walk or watertight or intersect)" \
  tests/engine tests/torch > "$OUT/s19_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s19_tests_cuda.txt" | head; tail -2 "$OUT/s19_tests_cuda.txt"
echo "== with RAYD_BVH_LAYOUT=wide4q" | tee -a "$OUT/s19_tests_cuda.txt"
RAYD_BVH_LAYOUT=wide4q timeout 15 python3 -m pytest -q $NX -p no:cacheprovider -k "cuda and watertight" tests/torch \
  > "$OUT/s19_tests_wide4q.tmp" 2>&1
echo "rc=$?" >> "$OUT/s19_tests_wide4q.tmp"; cat "$OUT/s19_tests_wide4q.tmp" >> "$OUT/s19_tests_cuda.txt"
grep -E "^FAILED|^ERROR" "$OUT/s19_tests_wide4q.tmp" | head; tail -2 "$OUT/s19_tests_wide4q.tmp"; rm -f "$OUT/s19_tests_wide4q.tmp"
