#!/usr/bin/env bash
# Session 13, experiments: PLOC leaf size / radius under the wide4 walk, against wide4 over the host SAH tree (one process each).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=terrain_C1024_S2048,sphere_1M_4Mrays
for env in "RAYD_PLOC_LEAF_SIZE=4" "RAYD_PLOC_LEAF_SIZE=1" "RAYD_PLOC_LEAF_SIZE=2" "RAYD_PLOC_LEAF_SIZE=8" "RAYD_PLOC_RADIUS=1" "RAYD_PLOC_RADIUS=3"; do
  echo "== $env" >> "$OUT/ploc_wide4.txt"
  env $env timeout 120 python3 benchmarks/traversal_ab.py --device cuda --workloads $W --variants wide4:ploc,wide4:sah --engines '' \
    --metrics closest_all,closest_minimal,build --repeats 20 --build-repeats 3 2>&1 | grep -E "^\*\*|^\| (closest|build)" >> "$OUT/ploc_wide4.txt"
done
cat "$OUT/ploc_wide4.txt"
