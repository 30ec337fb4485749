#!/usr/bin/env bash
# count_intersections counts crossings (12-07, 20th session, helper limits20): one warm H100/H200, under 3 minutes.
# Assumes PYTHONPATH=/tmp/site:$PWD/src and the repository root as working directory:  bash benchmarks/h200/s20_allhits.sh
# What changed: the all-hits search (engine/all_hits.py, hit_list.py) keeps per merged hit the "side" of its faces
# (watertight.watertight_hit: the cover of the infinitesimally displaced origin, the facing, corner/inner flags; a few
# integer ops and one int32 column per list entry), and count_hits sums crossings(side) instead of counting entries.
# The closest-hit and any-hit walks are untouched.
# 1. CUDA tests of the touch/parity rule (torch and drjit): they must pass (the CPU passes them).
# 2. all_hits_ab.py: main (4af7700, renamed rayd_main) vs this tree, sphere and shells4 1 M rays, terrain 256 k, count f32 / f64
#    and intersect_all K=8 Minimal, interleaved, medians of 10, CUDA wall time.
# WHAT DECIDES: the branch merges as it is if part 1 passes and every B / A of part 2 is <= 1.10 (count f32 and
# intersect_all; count f64 includes host-free re-checks, <= 1.15). Otherwise report the ratios: the suspect is register
# pressure of watertight_hit in the all-hits walks (a kernel_registers.py run on all_hits would show it).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git rev-parse --short HEAD 2>/dev/null; } | tee $OUT/gpu.txt
timeout 80 python3 -m pytest -q -n 8 -p no:cacheprovider -k cuda tests/torch/test_all_hits_touch.py \
  tests/torch/test_all_hits_parity.py tests/drjit/test_drjit_all_hits_touch.py \
  tests/drjit/test_drjit_all_hits_parity.py > $OUT/tests_allhits_cuda.txt 2>&1; echo rc=$? >> $OUT/tests_allhits_cuda.txt
grep -E "^FAILED|^ERROR" $OUT/tests_allhits_cuda.txt | head -20 | cut -c1-200; tail -2 $OUT/tests_allhits_cuda.txt
M=/tmp/s20main; rm -rf $M; mkdir -p $M
git archive 4af7700 src/rayd | tar -x -C $M && (cd $M/src && mv rayd rayd_main && grep -rlE '\brayd\b' rayd_main | xargs sed -i -E 's/\brayd\b/rayd_main/g')
timeout 150 python3 benchmarks/all_hits_ab.py $M/src rayd_main --device cuda --rays 1048576 --repeats 10 \
  > $OUT/all_hits_ab_cuda.txt 2>&1; echo rc=$? >> $OUT/all_hits_ab_cuda.txt; cat $OUT/all_hits_ab_cuda.txt | cut -c1-220
