#!/usr/bin/env bash
# Session 16, call F2: the drjit CUDA suite again, the seed (1 GPU), host cost per query (final vs baseline 0599f97),
# the distributed example at 16,777,216 rays on 1 GPU (issue 17's 1-GPU figure).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD/src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 100 python3 -m pytest -q -n 14 -p no:cacheprovider -k cuda tests/drjit > /tmp/dj.txt 2>&1
echo "drjit repeat rc=$? $(tail -1 /tmp/dj.txt)" | tee "$OUT/drjit_repeat.txt"; grep -E "^FAILED|^ERROR" /tmp/dj.txt | tee -a "$OUT/drjit_repeat.txt"
timeout 40 torchrun --standalone --nnodes=1 --nproc_per_node=1 .device/seed/ddp_intersect_train.py > "$OUT/seed_1gpu.txt" 2>&1; echo "seed rc=$?"; tail -2 "$OUT/seed_1gpu.txt"
for i in 1 2; do
  PYTHONPATH=/tmp/site:$PWD/.device/baseline/src timeout 30 python3 benchmarks/query_host_cost.py --device cuda --label base_0599f97 --no-drjit >> "$OUT/host_cost_cuda.jsonl" 2>/dev/null
  timeout 30 python3 benchmarks/query_host_cost.py --device cuda --label final --no-drjit >> "$OUT/host_cost_cuda.jsonl" 2>/dev/null
done
python3 - "$OUT/host_cost_cuda.jsonl" <<'PY'
import json,sys,collections
best=collections.defaultdict(dict)
for l in open(sys.argv[1]):
    d=json.loads(l)
    for r in d["rows"]:
        k=(r["frontend"],r["query"],r["rays"]); best[k][d["label"]]=min(best[k].get(d["label"],1e9),r["us_per_call"])
for k,v in best.items(): print(k, {a:round(b,1) for a,b in v.items()})
PY
timeout 90 torchrun --standalone --nnodes=1 --nproc_per_node=1 examples/torch/distributed/ddp_intersect_train.py --rays 16777216 \
  > "$OUT/ddp_1gpu_16M.txt" 2>&1; echo "ddp rc=$?"; tail -4 "$OUT/ddp_1gpu_16M.txt"
