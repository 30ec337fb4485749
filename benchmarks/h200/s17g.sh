#!/usr/bin/env bash
# lead, session 17: the one GPU call (after wheels): CUDA suite first, then the refit / slab A/Bs, at .device/trial (REV)
set -uo pipefail
cd .device/trial; export PYTHONPATH=/tmp/site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; cat REV; } | tee $OUT/gpu.txt
timeout 300 python3 -m pytest -q -n 14 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine > $OUT/tests_cuda.txt 2>&1; echo rc=$? >> $OUT/tests_cuda.txt
grep -E "^FAILED|^ERROR" $OUT/tests_cuda.txt | head -30; tail -2 $OUT/tests_cuda.txt
echo "== tri refit"; timeout 80 python3 benchmarks/h200/refit_orders.py --workloads terrain,sphere --tri-refits full,wide,wide_node,wide_levels --warp --repeats 12 > $OUT/tri.txt 2>&1; echo rc=$? >> $OUT/tri.txt
grep -E "^(ab|warp|terrain|sphere|rc)|FAILED|Error" $OUT/tri.txt | cut -c1-250
echo "== edge refit"; timeout 60 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 --modes 1 split wide wide1 wide3 split wide wide1 wide3 --reps 15 > $OUT/edge.txt 2>&1; echo rc=$? >> $OUT/edge.txt
sed -E "s/leaves +[0-9]+ depth +[0-9]+ //; s/ \(synchronised\)//" $OUT/edge.txt | cut -c1-200
echo "== slab"; timeout 45 python3 benchmarks/edge_search_ab.py --device cuda --trees ploc+q:8 --maxreg 64 --block 128 --slab 0 1 2 0 1 2 --reps 5 > $OUT/slab.txt 2>&1; echo rc=$? >> $OUT/slab.txt
sed -E "s/ \(built.*refit [0-9.]+ ms\)//" $OUT/slab.txt | cut -c1-220
