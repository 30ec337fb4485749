#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 100 python3 -m pytest -q -p no:cacheprovider -k cuda tests/engine/test_refit_update.py tests/engine/test_wide_layout.py tests/engine/test_fused_refit.py > "$OUT/refit_tests_default.txt" 2>&1; echo "default rc=$? $(tail -1 $OUT/refit_tests_default.txt)"
RAYD_REFIT_WIDE_CLIMB=1 timeout 60 python3 -m pytest -q -p no:cacheprovider -k cuda tests/engine/test_refit_update.py > "$OUT/refit_tests_climb.txt" 2>&1; echo "climb rc=$? $(tail -1 $OUT/refit_tests_climb.txt)"
RAYD_REFIT_WIDE_CLIMB=1 timeout 60 python3 .device/diag.py 2>&1 | grep -v -i warn | tail -14 | tee "$OUT/diag_climb.txt"
timeout 60 python3 benchmarks/h200/refit_orders.py --builders auto --layouts auto --warp > "$OUT/refit_default.txt" 2>&1; grep -E "update\+sync|wp.Mesh" "$OUT/refit_default.txt" | cut -c1-200
