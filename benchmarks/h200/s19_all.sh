#!/usr/bin/env bash
# Session 19 (lead): what the next session with a GPU should run first, in one call of < 10 minutes on a warm H100/H200
# (PYTHONPATH=/tmp/site:$PWD/src, the repository root as working directory, $OUT an empty folder):
#   1. the whole -k cuda suite over tests/torch, tests/drjit, tests/engine and the seed on one GPU, at the defaults;
#   2. the decisive A/Bs of this session's helpers (no Mitsuba: every decision is between rayd's own variants):
#      trav19 (wide4 vs wide4q / wide4q@0 layouts, s19_trav.sh's rule), build19 (main's path vs every new switch on,
#      s19_build.sh's rule), inst19 (unified vs wide_both / wide_blas, s19_inst.sh's rule), edges19 (segment tests and
#      the wide3l / wideg refits, s19_edges.sh's rule). Each helper script runs its own full version with Mitsuba.
#   (SEED: the path of the seed program, default ../shared/seed/ddp_intersect_train.py)
#   3. the content check on CUDA (RAYD_CONTENT_CHECK=1; core/contents.py): its tests in both frontends.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; X=$OUT; Y=$OUT/ab; mkdir -p $Y
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; git rev-parse --short HEAD 2>/dev/null; } | tee $X/gpu.txt
timeout 200 python3 -m pytest -q -n 15 -p no:cacheprovider -k cuda tests/torch tests/drjit tests/engine > $X/tests_cuda.txt 2>&1; echo rc=$? >> $X/tests_cuda.txt
grep -E "^FAILED|^ERROR" $X/tests_cuda.txt | head -40 | cut -c1-220; tail -2 $X/tests_cuda.txt
echo "== seed"; timeout 40 torchrun --nproc_per_node=1 ${SEED:-../shared/seed/ddp_intersect_train.py} > $X/seed_1gpu.txt 2>&1; echo rc=$? >> $X/seed_1gpu.txt; tail -2 $X/seed_1gpu.txt
echo "== trav"
for W in terrain_C1024_S2048:60 sphere_1M_4Mrays:45; do
  timeout "${W#*:}" python3 benchmarks/traversal_ab.py --device cuda --workloads "${W%:*}" \
    --variants wide4:ploc,wide4q:ploc,wide4q@0:ploc --engines warp-sah --metrics closest_all,closest_minimal,any_hit,update \
    --build-repeats 1 --repeats 10 --warmup 2 --output "$Y/trav_${W%%_*}.json" > "$Y/trav_${W%%_*}.txt" 2>&1
  echo "rc=$?" >> "$Y/trav_${W%%_*}.txt"; grep -E "^\| (closest|any|update)|^same winner|^rc=|Error" "$Y/trav_${W%%_*}.txt" | cut -c1-200
done
echo "== build"
NEW="ploc_ahead.AHEAD=4,wide_levels.ONE_LAUNCH=1,runtime.STAGED_READS=1,triangles.EAGER_WIDE_REFIT=0"
timeout 45 python3 benchmarks/build_phases.py --workload terrain:1024,sphere:513:1024 --builds 10 --no-phases \
  --ab "main=;new=$NEW" --json "$Y/build_ab.json" > "$Y/build_ab.txt" 2>&1; echo "rc=$?" >> "$Y/build_ab.txt"
grep -E "^ab|^rc|differs" "$Y/build_ab.txt" | sed -E 's/ +/ /g; s/\[[^]]*\]//' | cut -c1-200
echo "== inst"
timeout 70 python3 benchmarks/instance_walks_ab.py --device cuda --repeats 10 --variants unified,wide_both,wide_blas \
  --json "$Y/inst_ab.jsonl" > "$Y/inst_ab.txt" 2>&1; echo "rc=$?" >> "$Y/inst_ab.txt"
grep -vE "^\{|^\[instance_walks_ab\]" "$Y/inst_ab.txt" | tail -10 | cut -c1-200
echo "== edges"
timeout 40 python3 benchmarks/edge_search_ab.py --device cuda --trees ploc+q:8 --maxreg 64 --block 128 --reps 5 \
  --seg exact:plain pruned:plain exact:v2 pruned:v2 > "$Y/edge_search.txt" 2>&1; echo "rc=$?" >> "$Y/edge_search.txt"
tail -10 "$Y/edge_search.txt" | cut -c1-180
timeout 25 python3 benchmarks/edge_refit_ab.py --device cuda --trees ploc+q:8 --modes wide3 wide3l wideg wide3 wide3l wideg \
  --reps 20 > "$Y/edge_refit.txt" 2>&1; echo "rc=$?" >> "$Y/edge_refit.txt"; tail -8 "$Y/edge_refit.txt" | cut -c1-180
echo "== content check on CUDA"
RAYD_CONTENT_CHECK=1 timeout 60 python3 -m pytest -q -n 15 -p no:cacheprovider -k cuda tests/torch/test_unseen_writes.py \
  tests/drjit/test_drjit_unseen_writes.py tests/drjit/test_drjit_host_syncs.py tests/torch/test_no_host_sync.py > $Y/contents.txt 2>&1
echo "rc=$?" >> $Y/contents.txt; grep -E "^FAILED|passed|failed|rc=" $Y/contents.txt | head
tar -czf $X/ab.tgz -C $Y . && rm -rf $Y
