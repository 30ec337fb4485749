#!/usr/bin/env bash
# Issue 18, instance rows, 19th session (helper inst19). One warm H100/H200, under 4 minutes (timeouts add up to 235 s; part 1 is mostly first compiles).
# Assumes PYTHONPATH=/tmp/site:$PWD/src and the repository root as working directory:   bash benchmarks/h200/s19_inst.sh
# What changed: the `unified` instance walk (the CUDA default since session 11) can walk its trees in the 4-wide
# layout of the flat scenes (engine/instance_wide.py, a constant `wide` in engine/instance_walk._walk_unified; node test wide_walk._children and
# the sort wide_walk._sort4 shared with the flat wide walk): `wide_both` (both levels wide: the 1,000 instance
# boxes SAH-collapsed into 366 wide nodes, the 99 k-triangle BLAS into 39,052) and `wide_blas` (top level in
# pair nodes, BLAS wide). CPU census, 16,384 of the workload's rays (results/instance-wide-12-07/): node fetches per
# ray top / BLAS 15.7 / 37.3 (unified) -> 7.8 / 20.5 (wide_both), closest hit; winners and t equal to `unified` on
# every ray; CPU process time 0.79x (closest Minimal) / 0.81x (any hit) of unified. ptxas sm_90: 130 registers
# (unified 128), so `wide_both@128` (the __maxnreg__ cap, no spills) is timed too.
# 1. instance_walks_ab.py: 1,000 instances x 99,012 tris, 4,194,304 rays, variants interleaved per repeat (median of
#    15): unified (today's default), wide_both, wide_blas, wide_both@128; closest Minimal, closest All,
#    any hit; Mitsuba 3.9 cuda_ad_rgb (ray_intersect_preliminary / ray_test) in the same process; per-variant
#    registers / local bytes from the driver, sample spread and the GPU's clock/temperature/throttle before/after.
# 2. CUDA tests of everything instance (-k "cuda and instance"), run with RAYD_INSTANCE_WALK=wide_both (the
#    candidate default: every instance scene of the suite walks it), plus tests/engine/test_instance_walks.py with
#    the default (it compares every walk, the wide ones included, with nested and a float64 brute force).
# WHAT DECIDES (one line in src/rayd/engine/instances.py, InstanceLevel._choose_walk):
#   if part 1's row `wide_both` has closest / first < 1 AND any / first < 1 (and every row's "same winners" reads
#   1.000000 / True / True, and part 2 passes): change `walk = "unified" if self.nodes.lowers.device.is_cuda else
#   "nested"` to `walk = "wide_both" if ... else "nested"`. If instead `wide_blas` is the fastest row on
#   both columns, use "wide_blas". If `wide_both@128` beats `wide_both` on both by > 2 %, ALSO make the
#   cap the default of that walk: report it (the cap is global today, RAYD_INSTANCE_MAXREG; not flipped blind).
#   Otherwise leave the default (`unified`). The instance row of the issue is then the chosen row's closest
#   Minimal / any hit beside this run's Mitsuba line.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
echo "== 1. instance walks, 1000 x 99 k tris, 4 M rays (ms, medians of 15, interleaved) + Mitsuba"
timeout 135 python3 benchmarks/instance_walks_ab.py --device cuda --mitsuba --repeats 15 \
  --variants unified,wide_both,wide_blas,wide_both@128 --json "$OUT/s19_inst_ab.jsonl" \
  > "$OUT/s19_inst_ab.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_inst_ab.txt"; grep -vE "^\{|^\[instance_walks_ab\]" "$OUT/s19_inst_ab.txt" | tail -14
echo "== 2. CUDA instance tests (RAYD_INSTANCE_WALK=wide_both), then test_instance_walks.py with the default"
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 14"
RAYD_INSTANCE_WALK=wide_both timeout 75 python3 -m pytest -q $NX -p no:cacheprovider \
  -k "cuda and instance" tests/engine tests/torch tests/drjit > "$OUT/s19_tests_cuda.txt" 2>&1
echo "rc=$? (RAYD_INSTANCE_WALK=wide_both)" >> "$OUT/s19_tests_cuda.txt"
timeout 25 python3 -m pytest -q $NX -p no:cacheprovider -k cuda tests/engine/test_instance_walks.py \
  >> "$OUT/s19_tests_cuda.txt" 2>&1
echo "rc=$? (default walk, test_instance_walks.py)" >> "$OUT/s19_tests_cuda.txt"
grep -E "^FAILED|^ERROR" "$OUT/s19_tests_cuda.txt" | head; grep -E "passed|failed|rc=" "$OUT/s19_tests_cuda.txt"
