#!/usr/bin/env bash
set -uo pipefail
cd .device/br/wide && export PYTHONPATH=/tmp/site:$PWD/src
echo "wide branch $(cat rev)"
timeout 300 python3 benchmarks/traversal_ab.py --device cuda \
  --variants pair,wide4 --engines mitsuba,warp-sah --build-repeats 1 --repeats 15 \
  --output $OUT/traversal_ab_wide4_h200.json > $OUT/traversal_ab_wide4_h200.txt 2>&1; echo "rc=$?"; tail -30 $OUT/traversal_ab_wide4_h200.txt | cut -c1-300
timeout 150 python3 -m pytest -q -x -n 8 -p no:cacheprovider tests/engine/test_wide_layout.py tests/torch/test_watertight.py -k cuda > $OUT/wide_tests.txt 2>&1; echo "tests rc=$?"; tail -3 $OUT/wide_tests.txt
