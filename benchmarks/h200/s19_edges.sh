#!/usr/bin/env bash
# Issue 11, 19th session (helper edges19), one warm H100/H200, under 4 minutes (timeouts add up to 230 s; the kernels compile cold). Assumes
# PYTHONPATH=/tmp/site:$PWD/src and the repository root as working directory:   bash benchmarks/h200/s19_edges.sh
# What changed (all behind switches; defaults unchanged, same ids and the same walk step for step, tested on the CPU):
# - engine/edge_segment.py SEG_TEST="pruned": the point-segment distance skips the division where the query projects
#   beyond an end (most tests) and returns inf for a segment whose line lies beyond the radius (no division, no
#   closest-point product); the value is bit-equal wherever it can be taken. ptxas 13.0 sm_90: spills 68 -> 56 B.
# - SEG_LOAD="v2": a segment's 24 bytes read in three 64-bit read-only loads instead of six 32-bit loads.
# - engine/edge_refit_wide.py refit modes "wide3l" (wide3 with a climb kernel compiled without the quantisation
#   and slab code it skips: 100 -> 48 registers, more climbing threads per SM) and "wideg" (no slots launch: the
#   leaf threads gather their <= 8 slots in unrolled rounds of independent loads; 86 registers).
# 1. Point search, 1 M sorted points, ploc+q:8 (CUDA default), seg variants interleaved, two passes, median of 5;
#    "same True" = the ids of exact:plain (today's kernel). 2. The same for top-8 on the sphere.
# 3. Refit of ploc+q:8: wide3 (today's CUDA default) vs wide3l vs wideg, two passes, median of 30 ("same True" =
#    bit-equal boxes, rows; wide3's kernel compiles as main's: 100 registers, same PTX size). 4. Each refit launch
#    on its own (CUDA events): where wide3's 0.36 ms go (slots / climb / quantise).
# 5. CUDA tests of everything edge (the new tests/engine/test_edge_segment.py checks every seg variant against the
#    float64 brute force and today's walk on CUDA, with the same visit and test counts; test_edge_refit_fused.py
#    every refit mode bit-equal to split).
# WHAT DECIDES (one line each for the lead):
# (a) if a seg variant is below exact:plain in both passes on both workloads of part 1, and not above it in part 2,
#     and same True: set its defaults in src/rayd/engine/edge_segment.py, `SEG_TEST = _ENV_TEST or "exact"` -> "pruned"
#     and/or `SEG_LOAD = os.environ.get("RAYD_EDGE_SEG_LOAD", "plain")` -> "v2" (the best combination; SEG_TEST is the CUDA line, SEG_TEST_CPU stays).
# (b) if wide3l or wideg is below wide3 in both passes on both workloads of part 3 (same True): set
#     `REFIT_MODE_CUDA = _ENV_MODE or "wide3"` in src/rayd/engine/edge_refit_fused.py to the faster of the two.
# Part 5 must pass either way.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
SEG="exact:plain pruned:plain exact:v2 pruned:v2"
echo "== 1. point search, ploc+q:8, 1 M sorted points (ms; two passes)"
timeout 65 python3 benchmarks/edge_search_ab.py --device cuda --trees ploc+q:8 --maxreg 64 --block 128 --reps 5 \
  --seg $SEG $SEG --json "$OUT/s19_search.jsonl" > "$OUT/s19_search.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_search.txt"
echo "== 2. top-8 search, sphere (ms; two passes)"
timeout 35 python3 benchmarks/edge_search_ab.py --device cuda --trees ploc+q:8 --maxreg 64 --block 128 --reps 5 --k 8 \
  --only sphere_1M_1M --seg $SEG $SEG --json "$OUT/s19_search.jsonl" >> "$OUT/s19_search.txt" 2>&1
echo "rc=$? (top-8)" >> "$OUT/s19_search.txt"
sed -E 's/\(built [^)]*\) +//; s/block 128 maxreg  64 seed   0 slab 0 //; s/search +/search /' "$OUT/s19_search.txt"
echo "== 3. refit of ploc+q:8 (ms, median of 30 synchronised / back to back)"
timeout 30 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 --modes wide3 wide3l wideg wide3 wide3l \
  wideg --reps 30 --json "$OUT/s19_refit.jsonl" > "$OUT/s19_refit.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_refit.txt"
sed -E "s/leaves +[0-9]+ depth +[0-9]+ //; s/ \(synchronised\)//; s/ \(back to back\)/ b2b/" "$OUT/s19_refit.txt"
echo "== 4. refit launches on their own (ms per launch, CUDA events)"
timeout 20 python3 benchmarks/edge_refit_parts.py --device cuda > "$OUT/s19_refit_parts.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_refit_parts.txt"; cat "$OUT/s19_refit_parts.txt"
echo "== 5. CUDA edge tests"
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 14"
timeout 80 python3 -m pytest -q $NX -p no:cacheprovider tests/engine tests/torch tests/drjit -k "cuda and edge" \
  > "$OUT/s19_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s19_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s19_tests_cuda.txt" | head; tail -3 "$OUT/s19_tests_cuda.txt"
