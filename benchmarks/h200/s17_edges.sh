#!/usr/bin/env bash
# Issue 11, 17th session (helper edgerefit17), one warm H100/H200, < 4 minutes. Assumes PYTHONPATH=/tmp/site:$PWD/src
# and the repository root as working directory:   bash benchmarks/h200/s17_edges.sh
# 1. Edge refit on the compressed wide tree itself (engine/edge_refit_wide.py, EdgeBvh(refit=...), RAYD_EDGE_REFIT):
#    split = today's default (slots launch, binary climb ~22 levels, a launch re-quantising every wide node);
#    wide  = slots launch + a climb of the 4-wide tree (~8-12 levels), the last child to arrive quantises the node;
#    wide1 = the same in one launch (leaf threads gather their segments; a +qs tree runs as wide);
#    wide3 = slots launch + the wide climb writing float boxes only + a launch quantising every wide node from them;
#    1     = the binary climb alone (slots + climb, no compressed rows), for reference;
#    <mode>+s = the same with the leaf slabs of part 3 (split: one more launch; wide: written by its leaf threads).
#    ploc+q:8 (the CUDA default) and ploc+qs:8, terrain 2 M (3.1 M edges) / sphere 1 M, median of 30 synchronised
#    refits, the modes twice interleaved in one process. Every row must say "same True" (node boxes, compressed
#    rows and segment boxes bit-equal to split on the same tree).
# 2. split of ploc+q:8 on the baseline tree (.device/baseline/src, main) in its own process: the shared quantiser
#    (edge_wide_q.compress_boxes, now also under split) must not slow the default (within noise of part 1's split).
# 3. Point search with per-leaf oriented slabs (engine/edge_leaf_slab.py, RAYD_EDGE_LEAF_SLAB=1): slab 0 = today,
#    slab 1 = a leaf child within the radius is skipped when its slab lies beyond it (CPU counts, 8 k points:
#    terrain tests 101.4 -> 65.3 / query, sphere 176.7 -> 139.5, same visits, same answers); slab 2 = the same with
#    all leaf children's slabs of a node read at its visit (loads overlap; 68.5 / 141.4 tests). 1 M sorted points,
#    ploc+q:8, median of 7, interleaved 0 1 2 0 1 2; "same True" = the same edges.
# 4. CUDA tests of what changed (wide refit, shared quantiser, slabs).
# WHAT DECIDES: (a) if the best wide* mode is below split in both passes on BOTH workloads of ploc+q:8, set
# REFIT_MODE's default in engine/edge_refit_fused.py to it (goal: terrain 2 M <= 0.3 ms); else it stays "split".
# (After a wide* refit a ray search, the binary walk, first pays one binary climb: EdgeBvh.binary_boxes.)
# (b) if slab 1 or 2 is faster than slab 0 in both passes on both workloads, set edge_leaf_slab.LEAF_SLAB's default
# on (and AHEAD for 2) for CUDA (goals: terrain <= 10 ms, sphere <= 20 ms); else it stays off.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
echo "== refit (ms, median of 30 synchronised / back to back)"
timeout 100 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 ploc+qs:8 \
  --modes 1 split wide wide1 wide3 split+s wide+s split wide wide1 wide3 split+s wide+s --reps 30 \
  --json "$OUT/s17_edge_refit.jsonl" > "$OUT/s17_edge_refit.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_edge_refit.txt"; sed -E "s/leaves +[0-9]+ depth +[0-9]+ //; s/ \(synchronised\)//; s/ \(back to back\)/ b2b/" "$OUT/s17_edge_refit.txt"
echo "== baseline split (main at .device/baseline/src)"
if [ -d .device/baseline/src ]; then
  RAYD_SRC=$PWD/.device/baseline/src timeout 40 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 \
    --modes split split --reps 30 > "$OUT/s17_edge_refit_base.txt" 2>&1
  echo "rc=$?" >> "$OUT/s17_edge_refit_base.txt"; sed -E "s/leaves +[0-9]+ depth +[0-9]+ //; s/ \(synchronised\)//; s/ \(back to back\)/ b2b/" "$OUT/s17_edge_refit_base.txt"
fi
echo "== point search with leaf slabs (ms)"
timeout 55 python3 benchmarks/edge_search_ab.py --device cuda --trees ploc+q:8 --maxreg 64 --block 128 \
  --slab 0 1 2 0 1 2 --reps 7 --json "$OUT/s17_edge_slab.jsonl" > "$OUT/s17_edge_slab.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_edge_slab.txt"; sed -E "s/ \(built.*refit [0-9.]+ ms\)//" "$OUT/s17_edge_slab.txt"
echo "== CUDA tests of the wide refit, the shared quantiser and the slabs"
timeout 42 python3 -m pytest -q -p no:cacheprovider -x tests/engine/test_edge_leaf_slab.py tests/engine/test_edge_refit_fused.py \
  tests/engine/test_edge_wide.py -k "cuda and ((slab and ploc-8) or binary_tree_when or (fused_refit_equals and wide and ploc-8) or (wide_walk_returns and ploc-8))" > "$OUT/s17_tests_cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/s17_tests_cuda.txt"; grep -E "^FAILED|^ERROR" "$OUT/s17_tests_cuda.txt" | head; tail -3 "$OUT/s17_tests_cuda.txt"
