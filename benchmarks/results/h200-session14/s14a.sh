#!/usr/bin/env bash
# Session 14, call A at main: kernel profiles of build / update / edge refit+query / trace (issues 11, 18), PLOC build stages, ncu of the trace kernels.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
for w in terrain sphere; do timeout 150 python3 benchmarks/h200/profile_calls.py $w > "$OUT/profile_$w.txt" 2>&1; echo "profile $w rc=$?"; grep "^==" "$OUT/profile_$w.txt"; done
timeout 120 python3 benchmarks/h200/builders.py --builders ploc --no-mitsuba --stages --build-repeats 5 --out "$OUT" > "$OUT/build_stages.txt" 2>&1; echo "stages rc=$?"; tail -40 "$OUT/build_stages.txt" | cut -c1-200
which ncu && timeout 150 ncu --target-processes all -k regex:"walk|trace|closest" --launch-skip 3 --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis python3 benchmarks/h200/kernel_breakdown.py sphere --rows 3 > "$OUT/ncu_trace_sphere.txt" 2>&1; echo "ncu rc=$?"; grep -E "^\s+[a-z_]+.*\(|Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" "$OUT/ncu_trace_sphere.txt" | head -60
ls -la "$OUT"
