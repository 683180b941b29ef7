#!/usr/bin/env bash
# Issue 26 on a GPU host: the shard interface under a Slurm task's environment.
# 1. kg-gpu claim with CUDA_VISIBLE_DEVICES naming no GPU of this host refuses, naming the
#    hidden GPU; with the GPU's own UUID it claims it.
# 2. problems/core references (2 workloads each) as 2 shards, each task given
#    SLURM_ARRAY_TASK_{ID,MIN,MAX,COUNT} and Slurm's CUDA_VISIBLE_DEVICES, run with
#    `--shard slurm --gpus all`; merged; verified; compared with a one-host run.
# Run from the repository root through `device`, carrying $KG_DEVICE_DIR/bin.
source "$(dirname "$0")/common.sh"
K=$B/bin
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
timeit hidden 60 env CUDA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000 $K/kg-gpu claim -- true
timeit visible 60 env CUDA_VISIBLE_DEVICES=$UUID $K/kg-gpu claim -- nvidia-smi -L
FLAGS="--max-workloads 2"
for k in 1 2; do
  timeit shard$k 500 env SLURM_ARRAY_TASK_ID=$k SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=2 \
    SLURM_ARRAY_TASK_COUNT=2 CUDA_VISIBLE_DEVICES=0 \
    $K/kg-bench run problems/core --shard slurm --gpus all $FLAGS -o $R/shards/$k
  pack
done
timeit merge 60 $K/kg-bench merge $R/merged $R/shards/1 $R/shards/2
timeit verify 60 $K/kg-bench verify --summary $R/merged/summary.json
timeit one 500 $K/kg-bench run problems/core --gpus all $FLAGS -o $R/one
python3 - "$R" <<'PY' | tee -a $R/walls.txt
import json, sys
r = sys.argv[1]
m = json.load(open(f"{r}/merged/summary.json")); o = json.load(open(f"{r}/one/summary.json"))
keys = ["totals", "problems", "problem_info", "errors", "refused", "filters"]
same = {k: m.get(k) == o.get(k) for k in keys}
print("merged vs one-host:", same, "files equal:", sorted(m["chain"]["heads"]) == sorted(o["chain"]["heads"]))
print("merged totals:", {k: v for k, v in m["totals"].items() if v})
print("shards:", [(s["shard"], s["host"], s["device"], s.get("gpus")) for s in m["merged_from"]])
PY
pack
