#!/usr/bin/env bash
set -uo pipefail
cd .device/br/ploc && export PYTHONPATH=/tmp/site:$PWD/src
echo "ploc branch $(cat rev)"
timeout 420 python3 benchmarks/h200/builders.py --out $OUT --stages \
  --builders sah,ploc,ploc:e0,ploc:k1,ploc+pool,ploc:l1,ploc:l2,ploc+one,ploc:l2+one,ploc+ww,ploc:l1+ww,ploc+wws,ploc:l1+wws,sah+ww,sah+wws \
  > $OUT/builders_ploc_h200.txt 2>&1; echo "rc=$?"; grep -v '^{' $OUT/builders_ploc_h200.txt | tail -40 | cut -c1-300
