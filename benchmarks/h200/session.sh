#!/usr/bin/env bash
# One warm H200 call after the wheels are unpacked under /tmp/site (see ../shared/device/stage_wheels.sh):
#   bash benchmarks/h200/session.sh tests|fences|bench|edges|ab|instances_ab|instances|instance_walks
# Writes logs under $OUT (the device tool brings them back) and prints a short summary last.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
what=${1:-tests}
git_rev=$(cat .device/rev 2>/dev/null || echo unknown)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
case "$what" in
  tests)
    # -k cuda: the CPU half is CI's; -v to a file: a hang shows the test it sits in.
    timeout 480 python3 -m pytest -v -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine \
      > "$OUT/tests_cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda.txt"
    grep -c PASSED "$OUT/tests_cuda.txt"; grep -E "FAILED|ERROR" "$OUT/tests_cuda.txt" | head -30; tail -3 "$OUT/tests_cuda.txt" ;;
  fences)
    for f in 0 1; do for i in 1 2 3; do
      RAYD_DRJIT_QUERY_FENCES=$f timeout 150 python3 -m pytest -q -p no:cacheprovider tests/drjit -k cuda \
        > "$OUT/drjit_fences${f}_run$i.txt" 2>&1
      echo "fences=$f run=$i: $(tail -1 "$OUT/drjit_fences${f}_run$i.txt")"
    done; done ;;
  bench)
    timeout 300 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays \
      --build-repeats 3 --no-progress --output "$OUT/run_h200.jsonl" > "$OUT/run_h200.txt" 2>&1
    tail -25 "$OUT/run_h200.txt" ;;
  edges)
    timeout 280 python3 benchmarks/edges.py --device cuda --size full --brute-budget 3 --json "$OUT/edges_h200.jsonl" \
      > "$OUT/edges_h200.txt" 2>&1; tail -30 "$OUT/edges_h200.txt" ;;
  ab)
    timeout 420 python3 benchmarks/traversal_ab.py --device cuda --variants warp,pair+warprefit,pair,pair:cubql \
      --engines mitsuba,warp-sah,warp-cubql --output "$OUT/traversal_ab_h200.json" > "$OUT/traversal_ab_h200.txt" 2>&1
    tail -30 "$OUT/traversal_ab_h200.txt" ;;
  instances_ab)
    for L in warp pair; do RAYD_BVH_LAYOUT=$L timeout 150 python3 benchmarks/instances.py --device cuda --mitsuba \
      --json "$OUT/instances_h200_$L.jsonl" > "$OUT/instances_h200_$L.txt" 2>&1; tail -2 "$OUT/instances_h200_$L.txt"; done ;;
  instance_walks)
    # issue 18: every instance walk variant and register cap in one process, Mitsuba beside (~3-5 min)
    timeout 480 python3 benchmarks/instance_walks_ab.py --device cuda --mitsuba \
      --variants nested,pairtop,unified,unified_cull,pairtop@96,unified@96 \
      --json "$OUT/instance_walks_h200.jsonl" > "$OUT/instance_walks_h200.txt" 2>&1
    echo "rc=$?" >> "$OUT/instance_walks_h200.txt"; tail -14 "$OUT/instance_walks_h200.txt" ;;
  instances)
    timeout 200 python3 benchmarks/instances.py --device cuda --mitsuba --json "$OUT/instances_h200.jsonl" \
      > "$OUT/instances_h200.txt" 2>&1; tail -20 "$OUT/instances_h200.txt" ;;
esac
