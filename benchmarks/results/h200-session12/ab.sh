#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; echo "rev $(cat .device/rev)" > $OUT/rev.txt
timeout 200 python3 benchmarks/traversal_ab.py --device cuda --variants pair,wide4,pair:sah,wide4:sah --engines '' \
  --metrics closest_all,closest_minimal,any_hit,forward_backward,update,build --build-repeats 1 --repeats 15 \
  --output $OUT/traversal_ab_defaults_h200.json > $OUT/traversal_ab_defaults_h200.txt 2>&1; echo "rc=$?"; grep -v "^\[" $OUT/traversal_ab_defaults_h200.txt | tail -30 | cut -c1-300
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -k cuda tests/torch tests/engine > $OUT/tests_torch_engine.txt 2>&1; echo "tests rc=$?"; grep -E "^FAILED|^ERROR" $OUT/tests_torch_engine.txt | head -30; tail -1 $OUT/tests_torch_engine.txt
