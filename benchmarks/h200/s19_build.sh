#!/usr/bin/env bash
# Issue 18, "build" row (build() of a new 2 M-triangle scene <= 1.0 x Mitsuba's), 19th session, helper build19.
# One warm H100/H200, about 3 minutes with a warm kernel cache (timeouts add up to 305 s; 345 s if step 2 fails). Assumes
# PYTHONPATH=/tmp/site:$PWD/src and the repository root as working directory; optional main tree at
# .device/baseline/src:   bash benchmarks/h200/s19_build.sh
# What changed (each a switch; all off = main's path, less three small changes always on: start values by fills,
# the bounds reset by a kernel, no 137 MB fill of the wide rows; the same tree: binary nodes, pair nodes, leaf
# triangles, refit tables bit for bit, wide nodes up to their numbering, which CUDA takes from an atomic counter anyway):
#  - ploc_ahead.AHEAD (RAYD_PLOC_AHEAD, default 4): the PLOC passes are launched ahead of the cluster count the host
#    has read (each pass's count copied asynchronously to pinned memory), with no host wait per pass; main read the
#    count every 4 passes (11 waits terrain 2 M, 20 sphere 1 M). 0 = main's loop.
#  - ploc_ahead.RAW_SCAN (RAYD_PLOC_RAW_SCAN, 1): the per-pass scan calls Warp's native scan (no argument checks).
#  - wide_levels.ONE_LAUNCH (RAYD_WIDE_ONE_LAUNCH, 1): the wide collapse in one launch per level (the last thread to
#    finish sets the next level) instead of 2 (52 launches terrain, 106 sphere), replayed from one record, of at
#    most wide_levels.LEVEL_THREADS (65536) threads each taking every 65536th node (main: one thread per pair node at
#    every level past the 8th, ~1 M threads, most of them idle); its level/counter read in one read; the wide rows
#    allocated without a 137 MB fill. LEVEL_THREADS=262144 as `w262k`.
#  - triangles.EAGER_WIDE_REFIT (RAYD_EAGER_WIDE_REFIT, 0): the wide-only refit's set-up (a scan, 3 waits) at the
#    first sync() instead of at build(). 1 = main.
#  - runtime.STAGED_READS (RAYD_STAGED_READS, 1): the build's small reads (finite check, face range, bounds, node
#    count, wide count) copied on the stream into pinned memory, one wait per read_back instead of one per array.
#  CPU counts (terrain 2 M, benchmarks/build_phases.py): see benchmarks/README.md, "12-07, 19th session, helper build19".
# 1. build_phases.py: wall median of 10 builds and one build phase by phase (ms synchronised, launches, scans,
#    copies, events, host reads, allocations), terrain 2 M and sphere 1 M; main (baseline tree) then this branch.
# 2. The build row of every variant, interleaved build by build, medians of 12, Mitsuba's build in the same loop,
#    same_tree = the variant's nodes, pair nodes, leaf triangles, refit tables (bit for bit) and wide nodes (depth first:
#    CUDA numbers them by an atomic counter) equal main's path's.
# 3. Traversal of the tree built (closest hit All, 4 M rays): wide4:ploc (the build's) vs wide4:sah and Mitsuba.
# 4. CUDA tests of the build (ploc, build, wide, bvh).
# WHAT DECIDES (the lead's one-line changes; part 4 must pass and every same_tree must be True):
#  (a) `new` (all defaults of this branch) below `main` on both workloads: keep the defaults. Otherwise set the
#      default of the switch whose single-switch row ("-x" = that switch back to main's value) is the lowest on
#      both back to main's value (e.g. `AHEAD = int(os.environ.get("RAYD_PLOC_AHEAD", "0"))` in ploc_ahead.py).
#  (b) AHEAD: if `a2`, `a8` or `a16` is below `new` (a4) by >= 3 % on both workloads, set AHEAD's default to it.
#  (c) ploc.TAIL: if `t64` or `t256` is below `new` by >= 3 % on both, set `TAIL = ... "RAYD_PLOC_TAIL", "<T>"`.
#  (d) ploc.FUSED_KEEP (one kernel for nearest + keep, the search done twice): if `k1` is below `new` by >= 3 % on
#      both, set `FUSED_KEEP = ... "RAYD_PLOC_FUSED_KEEP", "1"` (measured slower in session 12, with host reads).
#  (e) wide_levels.LEVEL_THREADS: if `w262k` is below `new` by >= 3 % on both, set its default to "262144".
#  Goal line: "= x.xx x mitsuba" of the kept row <= 1.00 (session 13: terrain 2.4x, sphere 3.7x).
set -uo pipefail
# (lead, session 19: the new paths are opt-in at main until this script has run; every switch on for this run)
export RAYD_PLOC_AHEAD=${RAYD_PLOC_AHEAD:-4} RAYD_WIDE_ONE_LAUNCH=${RAYD_WIDE_ONE_LAUNCH:-1} RAYD_STAGED_READS=${RAYD_STAGED_READS:-1} RAYD_EAGER_WIDE_REFIT=${RAYD_EAGER_WIDE_REFIT:-0}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
git rev-parse HEAD >> "$OUT/gpu.txt" 2>/dev/null
W=${S19_WORKLOADS:-terrain:1024,sphere:513:1024}  # (S19_WORKLOADS=terrain:32,sphere:17:32: a smoke test)
echo "== 1. one build phase by phase (ms, counts); main, then this branch"
{
  if [ -d .device/baseline/src ]; then
    timeout 60 python3 benchmarks/build_phases.py --workload $W --builds 10 --src .device/baseline/src; echo "rc=$?"
  fi
  timeout 35 python3 benchmarks/build_phases.py --workload $W --builds 10 --json "$OUT/s19_phases.json"; echo "rc=$?"
} > "$OUT/s19_phases.txt" 2>&1
grep -vE "Warning|warn" "$OUT/s19_phases.txt" | grep -E "^build |^total|^build  |PlocBvh|WideNodes|WideRefit|check_meshes|centre|tri.bounds|keys|layout|passes|TriangleScene|SceneAccel|^rc" | sed -E 's/ +/ /g'
echo "== 2. build rows interleaved (ms, medians of 12; ratio to main's path)"
MAIN="ploc_ahead.AHEAD=0,ploc_ahead.RAW_SCAN=0,wide_levels.ONE_LAUNCH=0,triangles.EAGER_WIDE_REFIT=1,runtime.STAGED_READS=0"
AB="main=$MAIN;new=;-ahead=ploc_ahead.AHEAD=0;-raw=ploc_ahead.RAW_SCAN=0;-one=wide_levels.ONE_LAUNCH=0"
AB="$AB;-lazy=triangles.EAGER_WIDE_REFIT=1;-staged=runtime.STAGED_READS=0;a2=ploc_ahead.AHEAD=2"
AB="$AB;a8=ploc_ahead.AHEAD=8;a16=ploc_ahead.AHEAD=16;t64=ploc.TAIL=64;t256=ploc.TAIL=256;k1=ploc.FUSED_KEEP=1;w262k=wide_levels.LEVEL_THREADS=262144"
timeout 70 python3 benchmarks/build_phases.py --workload $W --builds 12 --mitsuba --ab "$AB" --json "$OUT/s19_ab.json" \
  > "$OUT/s19_ab.txt" 2>&1
RC=$?; echo "rc=$RC" >> "$OUT/s19_ab.txt"
if [ $RC -ne 0 ] && [ $RC -ne 124 ]; then  # (a CUDA fault of the new paths: the rest, with those two off)
  tail -5 "$OUT/s19_ab.txt"; echo "== 2b. again with RAYD_PLOC_AHEAD=0 RAYD_STAGED_READS=0"
  RAYD_PLOC_AHEAD=0 RAYD_STAGED_READS=0 timeout 40 python3 benchmarks/build_phases.py --workload $W --builds 12 \
    --mitsuba --ab "main=$MAIN;new=;-one=wide_levels.ONE_LAUNCH=0;-lazy=triangles.EAGER_WIDE_REFIT=1" >> "$OUT/s19_ab.txt" 2>&1
  echo "rc=$?" >> "$OUT/s19_ab.txt"
fi
grep -E "^ab|^rc|differs|mitsuba:" "$OUT/s19_ab.txt" | sed -E 's/ +/ /g; s/\[[^]]*\]//'
echo "== 3. traversal of the tree built (closest All, ms)"
timeout 50 python3 benchmarks/traversal_ab.py --device cuda --variants wide4:ploc,wide4:sah --engines mitsuba \
  --metrics closest_all --repeats 10 --build-repeats 1 --output "$OUT/s19_trace.json" > "$OUT/s19_trace.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_trace.txt"; grep -E "^\||^rc" "$OUT/s19_trace.txt" | sed -E 's/ +/ /g' | head -12
echo "== 4. CUDA tests of the build"
timeout 90 python3 -m pytest -q -n 14 -p no:cacheprovider -k "cuda and (ploc or build or wide or bvh)" tests/engine tests/torch \
  > "$OUT/s19_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s19_tests_cuda.txt" | head; tail -2 "$OUT/s19_tests_cuda.txt"
