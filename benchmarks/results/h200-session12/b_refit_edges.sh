#!/usr/bin/env bash
set -uo pipefail
(cd .device/br/refit && export PYTHONPATH=/tmp/site:$PWD/src && echo "refit branch $(cat rev)+dirty" &&
 timeout 240 python3 benchmarks/h200/refit_orders.py --warp --edges --list --json $OUT/refit_variants_h200.json > $OUT/refit_variants_h200.txt 2>&1; echo "rc=$?"; tail -40 $OUT/refit_variants_h200.txt | cut -c1-300)
(cd .device/br/edges && export PYTHONPATH=/tmp/site:$PWD/src && echo "edges branch $(cat rev)" &&
 timeout 300 python3 benchmarks/edges.py --device cuda --size full --brute-budget 2 --trees lbvh:8 lbvhc:8 sah:4 ploc:8 ploc-t2:8 --json $OUT/edges_ploc.jsonl > $OUT/edges_ploc.txt 2>&1; echo "rc=$?"; grep -v '^{' $OUT/edges_ploc.txt | tail -40 | cut -c1-300)
