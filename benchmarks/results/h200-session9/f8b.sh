#!/usr/bin/env bash
# H200 call B: run.py terrain/sphere, reflections, surface.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 130 python3 benchmarks/run.py --device cuda --workloads terrain_C1024_S2048,sphere_1M_4Mrays --build-repeats 2 --no-progress --output "$OUT/run_h200.jsonl" > "$OUT/run_h200.txt" 2>&1; grep "rayd.torch |\|mitsuba3 |\|warp" "$OUT/run_h200.txt" | cut -c1-220
timeout 90 python3 benchmarks/reflections.py --device cuda --rays 1000000 --sphere 128 --quick --num-rays 10000 --json "$OUT/reflections_h200.jsonl" > "$OUT/reflections_h200.txt" 2>&1; echo "refl rc=$?"; tail -12 "$OUT/reflections_h200.txt" | cut -c1-220
timeout 200 python3 benchmarks/surface.py --device cuda --meshes .device/meshes --json "$OUT/surface_h200.jsonl" > "$OUT/surface_h200.txt" 2>&1; echo "surface rc=$?"; tail -16 "$OUT/surface_h200.txt" | cut -c1-220
