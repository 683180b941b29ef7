#!/usr/bin/env bash
# Issue 24 item 6: where the reference-as-candidate bias of `kg-bench run` comes from. The same
# reference runs of problems/core (a) as usual, (b) with --prestart off, (c) one problem per run
# (a fresh judge each), compared per workload with the speedup's distance from 1.00.
# Run from the repository root through `device`, carrying $KG_DEVICE_DIR/bin.
source "$(dirname "$0")/common.sh"
K=$B/bin
timeit full 200 $K/kg-bench run problems/core --gpus all -q -o $R/full
pack
timeit noprestart 200 $K/kg-bench run problems/core --gpus all -q --prestart off -o $R/noprestart
pack
for p in rmsnorm_bf16 gemm_bf16 permute_copy silu_and_mul layernorm_fp16 moe_topk; do
  timeit "one_$p" 100 $K/kg-bench run problems/core --gpus all -q --filter "problem:${p}*" -o $R/one/$p
done
pack
python3 - "$R" <<'PY' | tee -a $R/walls.txt
import json, glob, statistics, sys
r = sys.argv[1]
def load(pattern):
    out = {}
    for f in glob.glob(pattern):
        for l in open(f):
            t = json.loads(l); p = (t.get("evaluation") or {}).get("performance")
            if p: out[(t["definition"], t["workload"]["uuid"])] = p["speedup_factor"]
    return out
full = load(f"{r}/full/*/reference.jsonl"); nop = load(f"{r}/noprestart/*/reference.jsonl"); one = load(f"{r}/one/*/*/reference.jsonl")
for name, d in [("full", full), ("noprestart", nop), ("one-problem runs", one)]:
    v = list(d.values())
    print(f"{name}: n={len(v)} median={statistics.median(v):.4f} outside3%={sum(abs(x-1)>0.03 for x in v)}")
keys = sorted(one)
print("same workloads in full:", f"median={statistics.median([full[k] for k in keys if k in full]):.4f}", "outside3%=", sum(abs(full[k]-1)>0.03 for k in keys if k in full), "of", len(keys))
print("same workloads one-problem:", f"median={statistics.median([one[k] for k in keys]):.4f}", "outside3%=", sum(abs(one[k]-1)>0.03 for k in keys), "of", len(keys))
PY
pack
