#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 100 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays --build-repeats 2 --no-progress --output "$OUT/run_h200.jsonl" > "$OUT/run_h200.txt" 2>&1; grep "rayd.torch |\|mitsuba3 |" "$OUT/run_h200.txt" | cut -c1-200
timeout 60 python3 benchmarks/reflections.py --device cuda --rays 1000000 --sphere 128 --quick --num-rays 10000 --json "$OUT/reflections_h200.jsonl" > "$OUT/reflections_h200.txt" 2>&1; grep -o '"scene": "[a-z_]*".*"ratio": [0-9.]*' "$OUT/reflections_h200.jsonl" | cut -c1-160
timeout 150 python3 benchmarks/surface.py --device cuda --meshes .device/meshes --json "$OUT/surface_h200.jsonl" > "$OUT/surface_h200.txt" 2>&1; tail -14 "$OUT/surface_h200.txt"
if [ -f benchmarks/compile.py ]; then timeout 150 python3 benchmarks/compile.py --device cuda --json > "$OUT/compile_h200.txt" 2>&1; tail -6 "$OUT/compile_h200.txt"; fi
